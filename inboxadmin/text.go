package inboxadmin

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Stored text (an error, a header, a payload) may hold control characters:
// an escape sequence that clears the terminal of whoever reads the answer
// with curl, a carriage return that writes over what was shown, a
// right-to-left override that makes one id read as another. Every answer
// passes through one of the two functions below, so that none reaches an
// operator raw.

// hidden reports whether r is a control character to make visible: C0
// other than a tab and a newline, DEL, C1, and the bidirectional overrides
// and isolates.
func hidden(r rune) bool {
	switch {
	case r < 0x20:
		return r != '\t' && r != '\n'
	case r >= 0x7f && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// visible returns s with its control characters made visible: a C0
// character as its picture (ESC as ␛), DEL as ␡, and the others as \u
// escapes. A carriage return before a newline stays.
func visible(s string) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i, r := range s {
		switch {
		case r == '\r' && strings.HasPrefix(s[i+1:], "\n"):
			b.WriteRune(r)
		case !hidden(r):
			b.WriteRune(r)
		case r < 0x20:
			b.WriteRune(0x2400 + r)
		case r == 0x7f:
			b.WriteRune('\u2421')
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// escapeJSON escapes, in the encoded JSON b, the control characters that
// encoding/json leaves raw (DEL, C1, the bidirectional controls), as \u
// escapes: the JSON decodes to the same values. They can only stand inside
// strings, where a \u escape is valid.
func escapeJSON(b []byte) []byte {
	if !strings.ContainsFunc(string(b), hidden) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r >= 0x20 && hidden(r) {
			out = append(out, `\u`...)
			out = append(out, fmt.Sprintf("%04x", r)...)
		} else {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

// plural is n with its noun, singular for one: "1 attempt", "2 attempts".
func plural(n any, one, many string) string {
	var i int64
	switch v := n.(type) {
	case int:
		i = int64(v)
	case int64:
		i = v
	default:
		return fmt.Sprintf("%v %s", n, many)
	}
	if i == 1 || i == -1 {
		return strconv.FormatInt(i, 10) + " " + one
	}
	return strconv.FormatInt(i, 10) + " " + many
}

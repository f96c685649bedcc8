package command

import (
	"encoding/base64"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text returns s as a command prints stored data on a terminal: control
// characters (C0, DEL, C1), the characters that reorder a line (Unicode's
// bidirectional overrides and isolates) and bytes that are not UTF-8 are
// written as Go escapes (\x1b, \u202e, \xff). A dead letter's header or
// error text cannot then move the cursor, clear the screen or disguise what
// the operator reads.
func Text(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && unsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}

// unsafeRune reports the runes Text escapes.
func unsafeRune(r rune) bool {
	switch {
	case r < ' ', r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case unicode.Is(unicode.Bidi_Control, r):
		return true
	}
	return false
}

// Payload describes a message's payload for a terminal, clipped to max
// bytes: "(text, N bytes) …" when it is UTF-8, escaped as Text does, and
// "(base64, N bytes) …" otherwise, so that the reader knows which it is.
func Payload(b []byte, max int) string {
	if b == nil {
		return "(none)"
	}
	if utf8.Valid(b) {
		return fmt.Sprintf("(text, %s) %s", Count(len(b), "byte", "bytes"), Text(Clip(string(b), max)))
	}
	enc := base64.StdEncoding.EncodeToString(b)
	return fmt.Sprintf("(base64, %s) %s", Count(len(b), "byte", "bytes"), Clip(enc, max))
}

// Clip shortens s to at most max bytes, on a rune boundary, marking the
// cut with an ellipsis.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max] + "…"
}

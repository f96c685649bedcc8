package inbox

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/uuid"
)

// IDFormat is the form producers' event ids take.
type IDFormat uint8

const (
	// IDFormatUUID accepts UUIDs in any case, with or without hyphens,
	// braces or a "urn:uuid:" prefix, and canonicalises them to the
	// lower-case hyphenated form. The nil UUID is rejected. It is the
	// default.
	IDFormatUUID IDFormat = iota
	// IDFormatULID accepts ULIDs in either case and canonicalises them to
	// upper case. It needs a text id column.
	IDFormatULID
	// IDFormatText accepts opaque ids of 1 to 255 bytes of printable UTF-8
	// with no surrounding white space, unchanged. It needs a text id column.
	IDFormatText
)

func (f IDFormat) String() string {
	switch f {
	case IDFormatUUID:
		return "uuid"
	case IDFormatULID:
		return "ulid"
	case IDFormatText:
		return "text"
	default:
		return fmt.Sprintf("IDFormat(%d)", uint8(f))
	}
}

// CanonicalID validates id for format f and returns its canonical form. It
// returns an error wrapping ErrNoMessageID for an empty id and ErrMalformedID
// for an invalid one.
func (f IDFormat) CanonicalID(id string) (string, error) {
	if id == "" {
		return "", ErrNoMessageID
	}
	switch f {
	case IDFormatUUID:
		return canonicalUUID(id)
	case IDFormatULID:
		return canonicalULID(id)
	case IDFormatText:
		if err := checkText(id, inboxdriver.MaxTextIDLen); err != nil {
			return "", fmt.Errorf("%w: %q: %s", ErrMalformedID, clip(id), err)
		}
		return id, nil
	default:
		return "", fmt.Errorf("%w: unknown id format %v", ErrMalformedID, f)
	}
}

func canonicalUUID(id string) (string, error) {
	if uuid.IsCanonical(id) {
		return id, nil // the common case, and what Client.Key returns: no copy
	}
	s := id
	if len(s) > 9 && strings.EqualFold(s[:9], "urn:uuid:") {
		s = s[9:]
	}
	if len(s) == 38 && s[0] == '{' && s[37] == '}' {
		s = s[1:37]
	}
	var hex [32]byte
	n := 0
	switch len(s) {
	case 36:
		for i := 0; i < 36; i++ {
			c := s[i]
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if c != '-' {
					return "", malformedUUID(id)
				}
				continue
			}
			hex[n] = c
			n++
		}
	case 32:
		copy(hex[:], s)
		n = 32
	default:
		return "", malformedUUID(id)
	}
	zero := true
	for i := range hex {
		c := hex[i]
		switch {
		case c >= '0' && c <= '9':
		case c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			hex[i] = c + ('a' - 'A')
		default:
			return "", malformedUUID(id)
		}
		if c != '0' {
			zero = false
		}
	}
	if zero {
		return "", fmt.Errorf("%w: %q is the nil UUID", ErrMalformedID, clip(id))
	}
	var b [36]byte
	copy(b[0:8], hex[0:8])
	b[8] = '-'
	copy(b[9:13], hex[8:12])
	b[13] = '-'
	copy(b[14:18], hex[12:16])
	b[18] = '-'
	copy(b[19:23], hex[16:20])
	b[23] = '-'
	copy(b[24:36], hex[20:32])
	return string(b[:]), nil
}

func malformedUUID(id string) error {
	return fmt.Errorf("%w: %q is not a UUID", ErrMalformedID, clip(id))
}

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

func canonicalULID(id string) (string, error) {
	if len(id) != 26 {
		return "", fmt.Errorf("%w: %q is not a ULID: want 26 characters", ErrMalformedID, clip(id))
	}
	b := []byte(strings.ToUpper(id))
	for _, c := range b {
		if strings.IndexByte(crockford, c) < 0 {
			return "", fmt.Errorf("%w: %q is not a ULID: %q is not Crockford base32", ErrMalformedID, clip(id), c)
		}
	}
	if b[0] > '7' {
		return "", fmt.Errorf("%w: %q is not a ULID: timestamp overflows", ErrMalformedID, clip(id))
	}
	return string(b), nil
}

// checkText checks that s is printable UTF-8 of at most max bytes with no
// surrounding white space. It returns a description of the first problem.
func checkText(s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("longer than %d bytes", max)
	case !utf8.ValidString(s):
		return fmt.Errorf("not valid UTF-8")
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("has surrounding white space")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("contains the unprintable character %U", r)
		}
	}
	return nil
}

// clip shortens s for an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// MaxConsumerLen is the longest consumer name, in bytes.
const MaxConsumerLen = 128

// ValidateConsumer returns an error wrapping ErrInvalidConsumer unless name
// is a valid consumer name: non-empty, at most MaxConsumerLen bytes of
// printable UTF-8, with no surrounding white space. Consumer names are
// stored with every inbox row; keep them stable, because a renamed consumer
// has an empty inbox and applies every replayed message again.
func ValidateConsumer(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidConsumer)
	}
	if err := checkText(name, MaxConsumerLen); err != nil {
		return fmt.Errorf("%w: %q: %s", ErrInvalidConsumer, clip(name), err)
	}
	return nil
}

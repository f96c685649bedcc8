package inbox

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// MaxEffectKeyLen is the longest key EffectKey returns, in bytes: the
// common limit of an HTTP Idempotency-Key.
const MaxEffectKeyLen = 255

// effectKeyHashPrefix starts the hashed form of an effect key.
const effectKeyHashPrefix = "sha256:"

// EffectKey returns the idempotency key of one remote call: the call named
// step (such as "capture") of consumer's handler for the message messageID.
// Send it as the provider's idempotency key (an HTTP Idempotency-Key
// header) on every attempt of the call. Client.Effect computes it and passes
// it to the call; use EffectKey directly only to find a call at the
// provider, and pass the message id canonical, as handlers receive it.
//
// The key is deterministic: every attempt of every delivery of the message
// gets the same key, in every process, in every version of this module. It
// is at most MaxEffectKeyLen bytes of printable ASCII with no spaces,
// quotes or backslashes, so that it is a valid header value as it is.
//
// # Encoding
//
// Each of the three parts is percent-encoded: the bytes A–Z, a–z, 0–9 and
// "-._~" stand for themselves, and every other byte, including ":" and
// "%", becomes "%XX" with upper-case hex digits. The parts are joined with
// ":", so the usual key is readable:
//
//	billing:0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b:capture
//
// When that form would be longer than MaxEffectKeyLen bytes (long consumer
// names, text ids or step names, or non-ASCII text, which escapes to three
// bytes a byte), the key is instead "sha256:" followed by the 64 lower-case
// hex digits of the SHA-256 of the three parts, each preceded by its length
// as a uvarint.
//
// Distinct (consumer, messageID, step) triples never share a key: the
// readable form decodes back to its three parts, because ":" never occurs
// inside an encoded part; the hashed form is injective unless SHA-256
// collides, because the length prefixes make the hashed input decodable;
// and the two forms cannot meet, because a readable key holds exactly two
// ":" and a hashed one exactly one.
//
// Providers with a shorter limit than 255 (some take 64 or fewer
// characters) need a shorter key: derive one deterministically inside the
// call, for example a prefix of the hex SHA-256 of this key.
func EffectKey(consumer, messageID, step string) string {
	n := escapedLen(consumer) + escapedLen(messageID) + escapedLen(step) + 2
	if n > MaxEffectKeyLen {
		return hashedEffectKey(consumer, messageID, step)
	}
	var b strings.Builder
	b.Grow(n)
	escapeKeyPart(&b, consumer)
	b.WriteByte(':')
	escapeKeyPart(&b, messageID)
	b.WriteByte(':')
	escapeKeyPart(&b, step)
	return b.String()
}

func hashedEffectKey(parts ...string) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, p := range parts {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(p)))])
		h.Write([]byte(p))
	}
	return effectKeyHashPrefix + hex.EncodeToString(h.Sum(nil))
}

// keyUnreserved reports whether c stands for itself in an effect key: the
// URI unreserved characters of RFC 3986.
func keyUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func escapedLen(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if keyUnreserved(s[i]) {
			n++
		} else {
			n += 3
		}
	}
	return n
}

func escapeKeyPart(b *strings.Builder, s string) {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if keyUnreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
}

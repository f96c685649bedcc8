// Package uuid makes the event ids that producers in tests, the demo, the
// benchmarks and the chaos run attach to their events. A producer mints an
// event's id once; consumers never do.
package uuid

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// V5 returns the name-based UUID (RFC 9562, version 5) of name in the
// namespace ns.
func V5(ns [16]byte, name string) string {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return Format(b)
}

// V4 returns a random UUID.
func V4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return Format(b)
}

// V7 returns a time-ordered UUID for time t: 48 bits of Unix milliseconds,
// then random bits.
func V7(t time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[6:])
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(b[0:6], ms[2:8])
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return Format(b)
}

// Format formats b in the canonical form: lower-case hex with hyphens.
func Format(b [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}

// Parse reads s in the canonical form that Format writes, in either case,
// and reports whether it was one.
func Parse(s string) (b [16]byte, ok bool) { return parse(s, &unhex) }

// IsCanonical reports whether s is exactly in the form Format writes,
// lower-case, and is not the nil UUID.
func IsCanonical(s string) bool {
	b, ok := parse(s, &unhexLower)
	return ok && b != [16]byte{}
}

func parse(s string, digits *[256]byte) (b [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return b, false
	}
	for j, at := range byteAt {
		hi, lo := digits[s[at]], digits[s[at+1]]
		if hi > 15 || lo > 15 {
			return b, false
		}
		b[j] = hi<<4 | lo
	}
	return b, true
}

// byteAt are the offsets in the canonical form of the 16 bytes' hex pairs.
var byteAt = [16]int{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// unhex is the value of each hex digit of either case, and unhexLower of
// each lower-case one; 255 for the other bytes.
var unhex, unhexLower = func() (t, lower [256]byte) {
	for i := range t {
		t[i], lower[i] = 255, 255
	}
	for i, c := range "0123456789abcdef" {
		t[c], lower[c] = byte(i), byte(i)
	}
	for i, c := range "ABCDEF" {
		t[c] = byte(10 + i)
	}
	return t, lower
}()

package inbox_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
)

func TestEffectKey(t *testing.T) {
	t.Parallel()
	const id = "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b"
	long := func(n int, c string) string { return strings.Repeat(c, n) }
	for _, tc := range []struct {
		name                  string
		consumer, msgID, step string
		want                  string
		hashed                bool
	}{
		{name: "usual", consumer: "billing", msgID: id, step: "capture", want: "billing:" + id + ":capture"},
		{name: "unreserved characters stand for themselves", consumer: "billing-v2.eu_1~x", msgID: id, step: "capture.card",
			want: "billing-v2.eu_1~x:" + id + ":capture.card"},
		{name: "colon and percent are escaped", consumer: "a:b", msgID: "c%d", step: "e f",
			want: "a%3Ab:c%25d:e%20f"},
		{name: "non-ASCII is escaped byte by byte", consumer: "facturación", msgID: id, step: "émettre",
			want: "facturaci%C3%B3n:" + id + ":%C3%A9mettre"},
		{name: "empty parts", want: "::"},
		{name: "readable at exactly the limit", consumer: long(255-2-36-1, "c"), msgID: id, step: "s",
			want: long(216, "c") + ":" + id + ":s"},
		{name: "one byte over the limit is hashed", consumer: long(255-2-36, "c"), msgID: id, step: "s", hashed: true},
		{name: "long UTF-8 consumer and step are hashed", consumer: long(64, "é"), msgID: long(255, "i"), step: long(64, "ü"), hashed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := inbox.EffectKey(tc.consumer, tc.msgID, tc.step)
			requireValidKey(t, got)
			require.Equal(t, got, inbox.EffectKey(tc.consumer, tc.msgID, tc.step), "deterministic")
			if tc.hashed {
				require.Equal(t, wantHashed(tc.consumer, tc.msgID, tc.step), got)
				return
			}
			require.Equal(t, tc.want, got)
			c, m, s, ok := decodeEffectKey(got)
			require.True(t, ok, "a readable key decodes")
			require.Equal(t, [3]string{tc.consumer, tc.msgID, tc.step}, [3]string{c, m, s})
		})
	}
}

// TestEffectKeyBoundaries checks triples whose naive concatenation would
// collide.
func TestEffectKeyBoundaries(t *testing.T) {
	t.Parallel()
	triples := [][3]string{
		{"a:b", "c", "d"}, {"a", "b:c", "d"}, {"a", "b", "c:d"},
		{"a%3Ab", "c", "d"}, {"ab", "", "cd"}, {"", "ab", "cd"}, {"abc", "d", ""},
		{"billing", "x", "capture"}, {"Billing", "x", "capture"}, {"billing", "x", "capture "},
		{strings.Repeat("a", 200), "b", strings.Repeat("c", 60)},
		{strings.Repeat("a", 201), "b", strings.Repeat("c", 59)},
		{strings.Repeat("a", 200), "bc", strings.Repeat("c", 59)},
	}
	seen := map[string][3]string{}
	for _, tr := range triples {
		k := inbox.EffectKey(tr[0], tr[1], tr[2])
		requireValidKey(t, k)
		prev, dup := seen[k]
		require.False(t, dup, "%q and %q share the key %q", prev, tr, k)
		seen[k] = tr
	}
}

// FuzzEffectKey checks, for any three strings, that the key is within the
// bound, printable, deterministic and decodable back to its parts (or
// hashed only when the readable form is too long), and that moving bytes
// across a part boundary changes it. The seeds are in
// testdata/fuzz/FuzzEffectKey.
func FuzzEffectKey(f *testing.F) {
	f.Add("billing", "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b", "capture")
	f.Fuzz(func(t *testing.T, consumer, msgID, step string) {
		k := inbox.EffectKey(consumer, msgID, step)
		requireValidKey(t, k)
		if k != inbox.EffectKey(consumer, msgID, step) {
			t.Fatalf("not deterministic: %q", k)
		}
		if c, m, s, ok := decodeEffectKey(k); ok {
			if c != consumer || m != msgID || s != step {
				t.Fatalf("%q decodes to (%q, %q, %q), want (%q, %q, %q)", k, c, m, s, consumer, msgID, step)
			}
		} else {
			if k != wantHashed(consumer, msgID, step) {
				t.Fatalf("%q is neither readable nor the hash of the parts", k)
			}
			if n := len(readable(consumer, msgID, step)); n <= inbox.MaxEffectKeyLen {
				t.Fatalf("hashed although the readable form has %d bytes", n)
			}
		}
		// Shift one byte across each boundary: the key must change.
		if consumer != "" {
			n := len(consumer) - 1
			if k2 := inbox.EffectKey(consumer[:n], consumer[n:]+msgID, step); k2 == k {
				t.Fatalf("(%q, %q, %q) and its shift share %q", consumer, msgID, step, k)
			}
		}
		if msgID != "" {
			if k2 := inbox.EffectKey(consumer, msgID[1:], msgID[:1]+step); k2 == k {
				t.Fatalf("(%q, %q, %q) and its shift share %q", consumer, msgID, step, k)
			}
		}
	})
}

func requireValidKey(t *testing.T, k string) {
	t.Helper()
	if len(k) > inbox.MaxEffectKeyLen {
		t.Fatalf("key of %d bytes, want at most %d: %q", len(k), inbox.MaxEffectKeyLen, k)
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			t.Fatalf("key %q has byte %#x at %d: want visible ASCII without quotes or backslashes", k, c, i)
		}
	}
}

// decodeEffectKey inverts the readable form of a key, so that the tests
// prove it injective; ok is false for any other string.
func decodeEffectKey(k string) (consumer, msgID, step string, ok bool) {
	parts := strings.Split(k, ":")
	if len(parts) != 3 {
		return "", "", "", false
	}
	var out [3]string
	for i, p := range parts {
		var b []byte
		for j := 0; j < len(p); j++ {
			c := p[j]
			if c != '%' {
				if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0) {
					return "", "", "", false
				}
				b = append(b, c)
				continue
			}
			if j+2 >= len(p) {
				return "", "", "", false
			}
			v, err := hex.DecodeString(p[j+1 : j+3])
			if err != nil || strings.ToUpper(p[j+1:j+3]) != p[j+1:j+3] {
				return "", "", "", false
			}
			b = append(b, v[0])
			j += 2
		}
		out[i] = string(b)
	}
	return out[0], out[1], out[2], true
}

// readable is the readable form, written independently of the package.
func readable(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(':')
		}
		for j := 0; j < len(p); j++ {
			c := p[j]
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
				b.WriteByte(c)
			} else {
				b.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{c})))
			}
		}
	}
	return b.String()
}

// wantHashed is the hashed form, written independently of the package.
func wantHashed(parts ...string) string {
	var in []byte
	for _, p := range parts {
		in = binary.AppendUvarint(in, uint64(len(p)))
		in = append(in, p...)
	}
	sum := sha256.Sum256(in)
	return "sha256:" + hex.EncodeToString(sum[:])
}

package uuid

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var canonical = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-([0-9a-f])[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestVersions(t *testing.T) {
	t.Parallel()
	for version, id := range map[string]string{"4": V4(), "7": V7(time.Now()), "5": V5([16]byte{}, "x")} {
		m := canonical.FindStringSubmatch(id)
		require.NotNil(t, m, id)
		require.Equal(t, version, m[1], id)
	}
	require.NotEqual(t, V4(), V4())
}

func TestV5KnownValue(t *testing.T) {
	t.Parallel()
	// RFC 9562, appendix A.4: the DNS namespace and "www.example.com".
	dns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	require.Equal(t, "2ed6657d-e927-568b-95e1-2665a8aea6a2", V5(dns, "www.example.com"))
}

func TestV7IsTimeOrdered(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMilli(1_700_000_000_000)
	a, b := V7(t0), V7(t0.Add(time.Millisecond))
	require.Less(t, a, b, "ids of later milliseconds sort after")
	require.Equal(t, "018bcfe5-6800", a[:13], "the first 48 bits are the Unix milliseconds")
}

func TestParse(t *testing.T) {
	t.Parallel()
	for range 100 {
		id := V4()
		b, ok := Parse(id)
		require.True(t, ok, id)
		require.Equal(t, id, Format(b))
	}
	b, ok := Parse("2ED6657D-E927-568B-95E1-2665A8AEA6A2")
	require.True(t, ok, "upper case")
	require.Equal(t, "2ed6657d-e927-568b-95e1-2665a8aea6a2", Format(b))
	for _, bad := range []string{
		"", "2ed6657de927568b95e12665a8aea6a2", "{2ed6657d-e927-568b-95e1-2665a8aea6a2}",
		"2ed6657d-e927-568b-95e1-2665a8aea6a", "2ed6657d-e927-568b-95e1-2665a8aea6a2a",
		"2ed6657d_e927-568b-95e1-2665a8aea6a2", "2ed6657d-e927-568b-95e1-2665a8aea6g2",
		"2ed6657d-e927-568b-95e1-2665a8aea6 2", "-ed6657d-e927-568b-95e1-2665a8aea6a2",
	} {
		_, ok := Parse(bad)
		require.False(t, ok, bad)
	}
}

func TestIsCanonical(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		V7(time.Now()):                           true,
		"0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55":   true,
		"0190C8E4-7B3A-7CC1-9F00-2B7C4E1D9A55":   false, // Parse takes it; the canonical form is lower-case
		"00000000-0000-0000-0000-000000000000":   false,
		"0190c8e47b3a7cc19f002b7c4e1d9a55":       false,
		"0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a5g":   false,
		"{0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55}": false,
	} {
		require.Equal(t, want, IsCanonical(in), "IsCanonical(%q)", in)
	}
	_, ok := Parse("0190C8E4-7B3A-7CC1-9F00-2B7C4E1D9A55")
	require.True(t, ok, "Parse takes an upper-case UUID")
}

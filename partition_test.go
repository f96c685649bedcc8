package inbox

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ulidBits decodes a ULID to its 128 bits as hex, through math/big: a
// second implementation to check ulidAsUUID against.
func ulidBits(t testing.TB, ulid string) string {
	t.Helper()
	n := new(big.Int)
	for _, c := range strings.ToUpper(ulid) {
		i := strings.IndexRune(crockford, c)
		if i < 0 {
			t.Fatalf("%q is not Crockford base32", c)
		}
		n.Lsh(n, 5).Or(n, big.NewInt(int64(i)))
	}
	return fmt.Sprintf("%032x", n)
}

func TestULIDAsUUID(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"01ARZ3NDEKTSV4RRFFQ69G5FAV", "01arz3ndektsv4rrffq69g5fav", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
		"01J9Z8Y6X5W4V3T2S1R0QPNMKH", "00000000000000000000000001"} {
		got, err := ulidAsUUID(in)
		require.NoError(t, err, in)
		require.Equal(t, ulidBits(t, in), strings.ReplaceAll(got, "-", ""), in)
		again, err := ulidAsUUID(got)
		require.NoError(t, err, "the stored form %s of %s", got, in)
		require.Equal(t, got, again)
	}
	got, err := ulidAsUUID("01ARZ3NDEKTSV4RRFFQ69G5FAV")
	require.NoError(t, err)
	require.Equal(t, "01563e3a-b5d3-d676-4c61-efb99302bd5b", got)
	for _, bad := range []string{"01ARZ3NDEKTSV4RRFFQ69G5FA", "00000000000000000000000000", "81ARZ3NDEKTSV4RRFFQ69G5FAV", "01ARZ3NDEKTSV4RRFFQ69G5FAU", "not-an-id"} {
		_, err := ulidAsUUID(bad)
		require.ErrorIs(t, err, ErrMalformedID, bad)
	}
	_, err = ulidAsUUID("")
	require.ErrorIs(t, err, ErrNoMessageID)
}

func FuzzULIDAsUUID(f *testing.F) {
	for _, s := range []string{"01ARZ3NDEKTSV4RRFFQ69G5FAV", "01563e3a-b5d3-d676-4c61-efb99302bd5b", "7zzzzzzzzzzzzzzzzzzzzzzzzz", "", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ulidAsUUID(in)
		if err != nil {
			if !errors.Is(err, ErrMalformedID) && !errors.Is(err, ErrNoMessageID) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		// The stored form is a canonical UUID and a fixed point.
		if canon, err := canonicalUUID(got); err != nil || canon != got {
			t.Fatalf("%q became %q, not a canonical UUID: %v", in, got, err)
		}
		if again, err := ulidAsUUID(got); err != nil || again != got {
			t.Fatalf("stored form %q is not a fixed point: %q, %v", got, again, err)
		}
		if len(in) == 26 && ulidBits(t, in) != strings.ReplaceAll(got, "-", "") {
			t.Fatalf("%q became %q, which holds other bits", in, got)
		}
	})
}

func TestPartitionRetentionGuard(t *testing.T) {
	t.Parallel()
	const day = 24 * 60 * 60 * 1e9
	require.NoError(t, CheckPartitionRetention(15*day, 14*day, day))
	err := CheckPartitionRetention(14*day+day/2, 14*day, day)
	require.ErrorIs(t, err, ErrWindowTooShort)
	require.ErrorContains(t, err, "14d12h")
	require.Equal(t, 1, strings.Count(err.Error(), "inbox: "), "said once: %v", err)
}

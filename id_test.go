package inbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/uuid"
)

func TestCanonicalUUID(t *testing.T) {
	t.Parallel()
	const canon = "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55"
	for _, tc := range []struct {
		in      string
		want    string
		wantErr error
	}{
		{in: canon, want: canon},
		{in: strings.ToUpper(canon), want: canon},
		{in: "{" + canon + "}", want: canon},
		{in: "{" + strings.ToUpper(canon) + "}", want: canon},
		{in: "urn:uuid:" + canon, want: canon},
		{in: "URN:UUID:" + strings.ToUpper(canon), want: canon},
		{in: strings.ReplaceAll(canon, "-", ""), want: canon},
		{in: "", wantErr: ErrNoMessageID},
		{in: "00000000-0000-0000-0000-000000000000", wantErr: ErrMalformedID},
		{in: "{00000000000000000000000000000000}", wantErr: ErrMalformedID},
		{in: canon[:35], wantErr: ErrMalformedID},
		{in: canon + "0", wantErr: ErrMalformedID},
		{in: " " + canon, wantErr: ErrMalformedID},
		{in: "{" + canon, wantErr: ErrMalformedID},
		{in: "urn:uuid:{" + canon + "}", want: canon},
		{in: strings.Replace(canon, "-", "+", 1), wantErr: ErrMalformedID},
		{in: strings.Replace(canon, "a", "g", 1), wantErr: ErrMalformedID},
		{in: "order-42", wantErr: ErrMalformedID},
	} {
		got, err := IDFormatUUID.CanonicalID(tc.in)
		if tc.wantErr != nil {
			require.ErrorIs(t, err, tc.wantErr, "input %q", tc.in)
			continue
		}
		require.NoError(t, err, "input %q", tc.in)
		require.Equal(t, tc.want, got, "input %q", tc.in)
	}
}

func TestCanonicalULIDAndText(t *testing.T) {
	t.Parallel()
	got, err := IDFormatULID.CanonicalID("01hzx3k0f2b7q9m4v8c6d5e1ta")
	require.NoError(t, err)
	require.Equal(t, "01HZX3K0F2B7Q9M4V8C6D5E1TA", got)
	for _, bad := range []string{"01HZX3K0F2B7Q9M4V8C6D5E1T", "01HZX3K0F2B7Q9M4V8C6D5E1TU", "81HZX3K0F2B7Q9M4V8C6D5E1TA"} {
		_, err := IDFormatULID.CanonicalID(bad)
		require.ErrorIs(t, err, ErrMalformedID, bad)
	}

	got, err = IDFormatText.CanonicalID("order-42/v1")
	require.NoError(t, err)
	require.Equal(t, "order-42/v1", got)
	for _, bad := range []string{" x", "x\n", "a\x00b", "\xff", strings.Repeat("x", 256)} {
		_, err := IDFormatText.CanonicalID(bad)
		require.ErrorIs(t, err, ErrMalformedID, "%q", bad)
	}
	_, err = IDFormatText.CanonicalID(strings.Repeat("é", 127))
	require.NoError(t, err, "254 bytes of printable UTF-8 is a valid text id")
}

func FuzzCanonicalUUID(f *testing.F) {
	for _, s := range []string{"0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55", "{0190C8E4-7B3A-7CC1-9F00-2B7C4E1D9A55}",
		"urn:uuid:0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55", "0190c8e47b3a7cc19f002b7c4e1d9a55", "", "x",
		"00000000-0000-0000-0000-000000000000", "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a5G", "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9A55"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := IDFormatUUID.CanonicalID(in)
		// The fast path takes exactly the ids that are their own
		// canonical form.
		if fast := uuid.IsCanonical(in); fast != (err == nil && got == in) {
			t.Fatalf("uuid.IsCanonical(%q) = %v, but CanonicalID gives %q, %v", in, fast, got, err)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformedID) && !errors.Is(err, ErrNoMessageID) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		// The canonical form is a fixed point, 36 bytes of lower-case hex
		// and hyphens, and never the nil UUID.
		again, err := IDFormatUUID.CanonicalID(got)
		if err != nil || again != got {
			t.Fatalf("canonical form %q is not a fixed point: %q, %v", got, again, err)
		}
		if len(got) != 36 || strings.ToLower(got) != got || got == "00000000-0000-0000-0000-000000000000" {
			t.Fatalf("bad canonical form %q", got)
		}
		// Every accepted input names the same 128 bits as its canonical form.
		if strings.ReplaceAll(strings.ToLower(got), "-", "") != hexDigits(strings.ToLower(in)) {
			t.Fatalf("%q canonicalised to a different UUID %q", in, got)
		}
	})
}

// hexDigits keeps the hex digits of a UUID form, after its prefix.
func hexDigits(s string) string {
	s = strings.TrimPrefix(s, "urn:uuid:")
	var b strings.Builder
	for _, r := range s {
		if (r >= '0' && r <= '9') || (r >= 'a' && r <= 'f') {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestValidateConsumer(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"billing", "inventory-v2", "Billing Service", "facturación", strings.Repeat("b", MaxConsumerLen)} {
		require.NoError(t, ValidateConsumer(ok), ok)
	}
	for _, bad := range []string{"", " billing", "billing ", "bill\ting", "bill\x00", "\xff", strings.Repeat("b", MaxConsumerLen+1), "\u200bx\u0007"} {
		err := ValidateConsumer(bad)
		require.ErrorIs(t, err, ErrInvalidConsumer, "%q", bad)
	}
}

func TestErrorClasses(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	require.False(t, IsRetryable(nil))
	require.True(t, IsRetryable(boom))
	require.True(t, IsRetryable(ErrLockTimeout))
	require.True(t, IsRetryable(ErrUnavailable))
	require.True(t, IsRetryable(&PanicError{Value: "x"}))
	require.False(t, IsRetryable(Permanent(boom)))
	require.True(t, IsPermanent(Permanent(boom)))
	require.ErrorIs(t, Permanent(boom), boom)
	require.Nil(t, Permanent(nil))
	require.False(t, IsRetryable(ErrNoMessageID))
	require.False(t, IsRetryable(ErrMalformedID))
	require.False(t, IsRetryable(ErrInvalidConsumer))
	require.Equal(t, ReasonNoID, DeadLetterReason(ErrNoMessageID))
	require.Equal(t, ReasonMalformedID, DeadLetterReason(ErrMalformedID))
	require.Equal(t, ReasonPermanent, DeadLetterReason(Permanent(boom)))
	require.Equal(t, ReasonMaxAttempts, DeadLetterReason(boom))
}

package command_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/command"
)

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "30d", want: 30 * 24 * time.Hour},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "90m", want: 90 * time.Minute},
		{in: "36500d", want: 36500 * 24 * time.Hour},
		{in: "36500d1h", err: "under 100 years"},
		{in: "36500d2000000h", err: "under 100 years"}, // the sum would overflow
		{in: "100000000h", err: "under 100 years"},     // time.ParseDuration overflows
		{in: "-5d", err: "must be positive"},
		{in: "-5h", err: "must be positive"},
		{in: "3x", err: "want a form like"},
		{in: "d", err: "want a form like"},
	} {
		got, err := command.ParseDuration(c.in)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
}

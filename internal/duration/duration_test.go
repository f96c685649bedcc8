package duration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	for d, want := range map[string]string{"336h": "14d", "36h30m": "1d12h30m", "1h": "1h", "90m": "1h30m", "0s": "0s", "1500ms": "1.5s"} {
		dur, err := time.ParseDuration(d)
		require.NoError(t, err)
		require.Equal(t, want, Format(dur), d)
	}
}

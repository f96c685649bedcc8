package bench

import (
	"testing"
	"time"

	"github.com/txinbox/inbox/internal/require"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // reversed: percentile sorts
	}
	for _, tc := range []struct {
		name string
		lat  []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"median of odd", ms(3, 1, 2), 0.5, 2 * time.Millisecond},
		{"median of even is the lower", ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{"p99 of 100", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"p50 of 100", ms(hundred...), 0.50, 50 * time.Millisecond},
		{"p100", ms(5, 9, 1), 1, 9 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, percentile(tc.lat, tc.q))
		})
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	require.Zero(t, median(nil))
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	xs := []float64{3, 1, 2}
	median(xs)
	require.Equal(t, []float64{3, 1, 2}, xs, "median must not reorder its input")
}

func TestWorkerPartition(t *testing.T) {
	t.Parallel()
	// Worker i of n sees only the accounts ≡ i mod n, all of them in range,
	// and its payload carries the same account and amount.
	b := &bench{cfg: Config{Accounts: 10}}
	for n := 1; n <= 4; n++ {
		for i := range n {
			w := newWorker(1, i)
			w.part, w.parts = i, n
			for range 200 {
				e := w.next(b, 1)[0]
				require.GreaterOrEqual(t, e.account, int32(1))
				require.LessOrEqual(t, e.account, int32(10))
				require.Equal(t, i, int(e.account-1)%n, "worker %d of %d got account %d", i, n, e.account)
				account, amount, err := decodeEffect(e.msg.Payload)
				require.NoError(t, err)
				require.Equal(t, e.account, account)
				require.Equal(t, e.amount, amount)
				require.Positive(t, amount)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, mutate := range map[string]func(c *Config){
		"Accounts":  func(c *Config) { c.Accounts = 0 },
		"Workers":   func(c *Config) { c.Workers = nil },
		"Duration":  func(c *Config) { c.Duration = 0 },
		"Rounds":    func(c *Config) { c.Rounds = 0 },
		"PurgeRows": func(c *Config) { c.PurgeRows = -1 },
		"IDRows":    func(c *Config) { c.IDRows = -1 },
		"Rows":      func(c *Config) { c.Rows = []string{"nope"} },
	} {
		t.Run(name, func(t *testing.T) {
			c := Quick()
			mutate(&c)
			err := c.validate()
			var ce *ConfigError
			require.ErrorAs(t, err, &ce)
			require.Contains(t, err.Error(), "Config."+name)
		})
	}
	c := Quick()
	require.NoError(t, c.validate())
	c = Full()
	require.NoError(t, c.validate())
}

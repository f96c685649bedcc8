package bench

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
		"Accounts":      func(c *Config) { c.Accounts = 0 },
		"Workers":       func(c *Config) { c.Workers = nil },
		"Duration":      func(c *Config) { c.Duration = 0 },
		"Rounds":        func(c *Config) { c.Rounds = 0 },
		"PurgeRows":     func(c *Config) { c.PurgeRows = -1 },
		"IDRows":        func(c *Config) { c.IDRows = -1 },
		"Rows":          func(c *Config) { c.Rows = []string{"nope"} },
		"RelayBacklogs": func(c *Config) { c.RelayBacklogs = []int{10, 0} },
		"RelayRounds":   func(c *Config) { c.RelayRounds = 0 },
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

func TestRateRatio(t *testing.T) {
	t.Parallel()
	// Round by round: the machine ran at half speed in round 2, for both.
	x := &Result{MsgsPerS: 90, RoundRates: []float64{100, 50, 90}}
	y := &Result{MsgsPerS: 100, RoundRates: []float64{100, 100, 100}}
	require.Equal(t, 0.9, rateRatio(x, y))
	y.RoundRates = []float64{110, 50, 100}
	require.Equal(t, 100.0/110, rateRatio(x, y), "the median of 0.91, 1 and 0.9")
	// Without rates per round, or with rounds that differ in number: the
	// ratio of the medians.
	require.Equal(t, 0.9, rateRatio(&Result{MsgsPerS: 9}, &Result{MsgsPerS: 10}))
	require.Equal(t, 0.5, rateRatio(&Result{MsgsPerS: 5, RoundRates: []float64{1}}, &Result{MsgsPerS: 10, RoundRates: []float64{1, 2}}))
}

func TestGroupCells(t *testing.T) {
	t.Parallel()
	var cells []*cell
	for _, name := range []string{"bare", "inbox-sqlite", "inbox", "kafka-bare-ack", "kafka-inbox-batch-100", "watermill-sql-exactly-once"} {
		for _, w := range []int{1, 8} {
			cells = append(cells, &cell{row: &row{name: name}, workers: w})
		}
	}
	var got [][]string
	for _, u := range groupCells(cells) {
		var names []string
		for _, c := range u {
			names = append(names, c.row.name+"@"+strconv.Itoa(c.workers))
		}
		got = append(got, names)
	}
	require.Equal(t, [][]string{
		{"bare@1", "inbox@1"}, {"bare@8", "inbox@8"},
		{"inbox-sqlite@1"}, {"inbox-sqlite@8"},
		{"kafka-bare-ack@1", "kafka-inbox-batch-100@1", "watermill-sql-exactly-once@1"},
		{"kafka-bare-ack@8", "kafka-inbox-batch-100@8", "watermill-sql-exactly-once@8"},
	}, got)
}

// TestRatioGroupsNameRows keeps ratioGroups in step with the rows: a
// renamed row would otherwise drop out of its group unnoticed.
func TestRatioGroupsNameRows(t *testing.T) {
	t.Parallel()
	for _, g := range ratioGroups {
		for _, name := range g {
			if findRow(name) == nil {
				t.Errorf("ratioGroups names %q, which is no row", name)
			}
		}
	}
}

func TestPhases(t *testing.T) {
	t.Parallel()
	var names []string
	for _, r := range rows {
		names = append(names, r.name)
	}
	var got []string
	for _, ph := range phases(rows) {
		var rs []string
		for _, r := range ph.rows {
			rs = append(rs, r.name)
		}
		got = append(got, "["+resourceNames(ph.background)+"] "+strings.Join(rs, " "))
	}
	// The rows that need no background resource first, bare and what is
	// compared with it among them; kafka with watermill-sql, whose ratio
	// compares them; each broker with its pair, and the store's batch
	// claim measured again in its phase.
	require.Len(t, got, 4)
	require.Contains(t, got[0], "[] bare check-then-insert redis-setnx inbox inbox-handler")
	require.Contains(t, got[0], "outbox-enqueue-1")
	require.Contains(t, got[0], "watermill-middleware")
	require.Equal(t, "[kafka, watermill-sql] kafka-bare-ack kafka-inbox-batch-100 kafka-phase-inbox-batch-100 watermill-sql-exactly-once", got[1])
	require.Equal(t, "[nats] nats-bare-ack nats-inbox-batch-100 nats-phase-inbox-batch-100", got[2])
	require.Equal(t, "[rabbitmq] rabbitmq-bare-ack rabbitmq-inbox-batch-100 rabbitmq-phase-inbox-batch-100", got[3])
	for _, r := range rows {
		for _, res := range r.needs {
			if res.background {
				require.NotContains(t, got[0], " "+r.name+" ", "a row that needs %s runs without it open", res.name)
			}
		}
	}
}

// The adapter's target divides a broker's inbox row by the slower of its
// bare loop and the store's batch claim, each ratio taken round by round.
func TestBrokerTarget(t *testing.T) {
	t.Parallel()
	res := func(name string, rates ...float64) Result {
		return Result{Name: name, Workers: 1, MsgsPerS: median(rates), RoundRates: rates}
	}
	rep := &Report{Results: []Result{
		res("inbox-batch-100", 100, 200, 100),
		res("nats-bare-ack", 400, 400, 400),
		res("nats-inbox-batch-100", 90, 160, 80),
		res("rabbitmq-bare-ack", 50, 50, 50),
		res("rabbitmq-inbox-batch-100", 30, 40, 35),
	}}
	got := targetsByName(rep)
	requireTarget(t, got, "nats-inbox-batch-100 ÷ min(nats-bare-ack, inbox-batch-100), msgs/s at 1 worker (≥ 0.8)",
		0.8, true, "the store's claim is the slower: 0.9, 0.8, 0.8")
	requireTarget(t, got, "rabbitmq-inbox-batch-100 ÷ min(rabbitmq-bare-ack, inbox-batch-100), msgs/s at 1 worker (≥ 0.8)",
		0.7, false, "the bare loop is the slower: 0.6, 0.8, 0.7")
	_, ok := got["kafka-inbox-batch-100 ÷ min(kafka-bare-ack, inbox-batch-100), msgs/s at 1 worker (≥ 0.8)"]
	require.False(t, ok, "no kafka rows, no kafka target")
	_, ok = got["rabbitmq-inbox-batch-100 ÷ min(rabbitmq-bare-ack, rabbitmq-phase-inbox-batch-100), msgs/s at 1 worker (report only: the claim measured in the same phase)"]
	require.False(t, ok, "no claim measured in rabbitmq's phase, no same-phase ratio")

	// The claim measured again beside the inbox row, in its phase.
	rep.Results = append(rep.Results, res("nats-phase-inbox-batch-100", 200, 100, 100))
	requireTarget(t, targetsByName(rep), "nats-inbox-batch-100 ÷ min(nats-bare-ack, nats-phase-inbox-batch-100), msgs/s at 1 worker (report only: the claim measured in the same phase)",
		0.8, true, "the claim in the same phase is the slower: the median of 0.45, 1.6 and 0.8")
}

// The CPU lines of a broker whose server runs in this process say how busy
// each row kept the cores and what the ratio would be at equal use; a
// broker that runs elsewhere, whose CPU the client column misses, gets
// none.
func TestBrokerCPUTargets(t *testing.T) {
	t.Parallel()
	us := func(v float64) *float64 { return &v }
	rep := &Report{
		Results: []Result{
			{Name: "nats-bare-ack", Workers: 1, MsgsPerS: 50000, ClientCPUUsPerMsg: us(20)},
			{Name: "nats-inbox-batch-100", Workers: 1, MsgsPerS: 40000, ClientCPUUsPerMsg: us(22), ServerCPUUsPerMsg: us(8)},
			{Name: "rabbitmq-bare-ack", Workers: 1, MsgsPerS: 20000, ClientCPUUsPerMsg: us(30)},
			{Name: "rabbitmq-inbox-batch-100", Workers: 1, MsgsPerS: 16000, ClientCPUUsPerMsg: us(35), ServerCPUUsPerMsg: us(15)},
		},
		Machine:  Machine{CPUs: 2},
		Settings: Settings{InProcessBrokers: []string{"kafka", "nats"}},
	}
	got := targetsByName(rep)
	requireReportOnly(t, got, []reportOnly{
		{"nats-bare-ack ÷ nats-inbox-batch-100, client+server CPU per msg at 1 worker (report only: nats-inbox-batch-100 ÷ nats-bare-ack if both kept the cores equally busy)", 0.67, "20 µs against 22 + 8"},
		{"nats-inbox-batch-100, share of the 2 cores busy with it (msgs/s × client+server CPU per msg ÷ cores) at 1 worker (report only)", 0.6, "40000/s × 30 µs on 2 cores"},
		{"nats-bare-ack, share of the 2 cores busy with it (msgs/s × client+server CPU per msg ÷ cores) at 1 worker (report only)", 0.5, "50000/s × 20 µs on 2 cores"},
	})
	requireNoTarget(t, got, "RabbitMQ runs outside the process",
		"rabbitmq-bare-ack ÷ rabbitmq-inbox-batch-100, client+server CPU", "rabbitmq-inbox-batch-100, share of the")
}

// The transaction lines compare a broker's inbox row's timed transactions
// with the store's batch claim in the same phase; a row whose
// transactions were not timed gets none.
func TestBrokerTxTargets(t *testing.T) {
	t.Parallel()
	v := func(v float64) *float64 { return &v }
	rep := &Report{
		Results: []Result{
			{Name: "kafka-bare-ack", Workers: 1, Batch: 100, MsgsPerS: 300000},
			{Name: "kafka-inbox-batch-100", Workers: 1, Batch: 100, MsgsPerS: 50000, TxUsPerMsg: v(18), TxMsgsPerTx: v(100)},
			{Name: "kafka-phase-inbox-batch-100", Workers: 1, Batch: 100, MsgsPerS: 60000},
			{Name: "rabbitmq-bare-ack", Workers: 8, Batch: 100, MsgsPerS: 20000},
			{Name: "rabbitmq-inbox-batch-100", Workers: 8, Batch: 100, MsgsPerS: 16000, TxUsPerMsg: v(150), TxMsgsPerTx: v(25)},
			{Name: "rabbitmq-phase-inbox-batch-100", Workers: 8, Batch: 100, MsgsPerS: 100000},
			{Name: "nats-bare-ack", Workers: 1, Batch: 100, MsgsPerS: 50000},
			{Name: "nats-inbox-batch-100", Workers: 1, Batch: 100, MsgsPerS: 40000},
			{Name: "nats-phase-inbox-batch-100", Workers: 1, Batch: 100, MsgsPerS: 80000},
		},
		Machine: Machine{CPUs: 2},
	}
	got := targetsByName(rep)
	requireReportOnly(t, got, []reportOnly{
		{"kafka-inbox-batch-100's transactions ÷ kafka-phase-inbox-batch-100's, time per msg on a worker at 1 worker (report only: the store's work beside the broker's, in transactions of their own size)", 1.08, "18 µs against 1 worker ÷ 60000/s"},
		{"kafka-inbox-batch-100, share of its workers' time inside their transactions (transaction time per msg × msgs/s ÷ workers) at 1 worker (report only)", 0.9, "18 µs × 50000/s on 1 worker"},
		{"kafka-inbox-batch-100's messages per transaction ÷ kafka-phase-inbox-batch-100's batch at 1 worker (report only: below 1, each commit is shared by fewer messages)", 1, "100 a transaction, as the batch"},
		{"rabbitmq-inbox-batch-100's transactions ÷ rabbitmq-phase-inbox-batch-100's, time per msg on a worker at 8 workers (report only: the store's work beside the broker's, in transactions of their own size)", 1.88, "150 µs against 8 workers ÷ 100000/s"},
		{"rabbitmq-inbox-batch-100, share of its workers' time inside their transactions (transaction time per msg × msgs/s ÷ workers) at 8 workers (report only)", 0.3, "150 µs × 16000/s on 8 workers"},
		{"rabbitmq-inbox-batch-100's messages per transaction ÷ rabbitmq-phase-inbox-batch-100's batch at 8 workers (report only: below 1, each commit is shared by fewer messages)", 0.25, "25 a transaction against 100"},
	})
	requireNoTarget(t, got, "its transactions were not timed",
		"nats-inbox-batch-100's", "nats-inbox-batch-100, share of its workers'")
}

// reportOnly is a report-only target a test expects: its name, its value,
// and why.
type reportOnly struct {
	name  string
	value float64
	why   string
}

// requireReportOnly checks the report-only targets ws in got.
func requireReportOnly(t *testing.T, got map[string]Ratio, ws []reportOnly) {
	t.Helper()
	for _, w := range ws {
		requireTarget(t, got, w.name, w.value, true, w.why)
	}
}

// requireNoTarget checks that no target in got has a name containing one
// of parts, for the reason why.
func requireNoTarget(t *testing.T, got map[string]Ratio, why string, parts ...string) {
	t.Helper()
	for name := range got {
		for _, p := range parts {
			require.NotContains(t, name, p, why)
		}
	}
}

// targetsByName returns rep's targets by name.
func targetsByName(rep *Report) map[string]Ratio {
	got := map[string]Ratio{}
	for _, r := range rep.Ratios() {
		got[r.Name] = r
	}
	return got
}

// requireTarget checks the value of the target name in got, and whether
// it is met; why says how the value comes about.
func requireTarget(t *testing.T, got map[string]Ratio, name string, value float64, met bool, why string) {
	t.Helper()
	r, ok := got[name]
	require.True(t, ok, "no target %q", name)
	require.Equal(t, value, r.Value, why)
	require.Equal(t, met, r.Met, "%s met", name)
}

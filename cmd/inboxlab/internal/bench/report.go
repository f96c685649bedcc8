package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
)

// Report is what a run measured. It marshals to the JSON of
// `inboxlab bench --json`.
type Report struct {
	// Results has one entry per row and worker count, in the order of the
	// rows and then of Config.Workers.
	Results []Result      `json:"results"`
	Purge   *PurgeResult  `json:"purge,omitempty"`
	IDs     *IDsResult    `json:"ids,omitempty"`
	Outbox  *OutboxResult `json:"outbox,omitempty"`
	// Relay has the drain rows: the relay emptying a backlog, ordered and
	// not (relaydrain.go).
	Relay *RelayResult `json:"relay,omitempty"`
	// Partition compares retention by partition drop with the batched
	// delete, and claims on a partitioned inbox with claims on a plain one.
	Partition *PartitionResult `json:"partition,omitempty"`
	// Targets are the ratios, computed from this run.
	Targets []Ratio `json:"targets,omitempty"`
	// Skipped are the rows left out because a server they need could not
	// be reached.
	Skipped  []Skipped `json:"skipped,omitempty"`
	Machine  Machine   `json:"machine"`
	Settings Settings  `json:"settings"`
}

// Result is one row at one worker count.
type Result struct {
	Name    string `json:"name"`
	Workers int    `json:"workers"`
	// MsgsPerS is the median over the rounds of messages applied per second.
	MsgsPerS float64 `json:"msgs_per_s"`
	// P50Ms and P99Ms are latencies of one op (one message, or one batch
	// for the batch rows: every message of a batch commits with it), in
	// milliseconds, over every op of every round.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// Batch is the number of messages one op applies.
	Batch  int   `json:"batch"`
	Msgs   int64 `json:"msgs"`
	Ops    int64 `json:"ops"`
	Rounds int   `json:"rounds"`
	// MinRate and MaxRate are the slowest and fastest rounds, in msgs/s.
	MinRate float64 `json:"msgs_per_s_min"`
	MaxRate float64 `json:"msgs_per_s_max"`
	// RoundRates are the msgs/s of each round, in the order of the rounds:
	// the targets compare two rows round by round (rateRatio).
	RoundRates []float64 `json:"round_rates,omitempty"`
	// WALBytesPerMsg is the least over the rounds of the WAL written per
	// message, for rows whose effect is in Postgres.
	WALBytesPerMsg *float64 `json:"wal_bytes_per_msg,omitempty"`
	// InboxBytesPerRow is the inbox table's size, with its indexes, over
	// its rows at the end of the rounds, for the Postgres inbox rows.
	InboxBytesPerRow *float64 `json:"inbox_bytes_per_row,omitempty"`
	// ServerCPUUsPerMsg is the CPU time the Postgres backends of the
	// workers' pool spent per message, in microseconds, over every round;
	// ClientCPUUsPerMsg is the benchmark process's. They are left out
	// where they cannot be read (a remote server).
	ServerCPUUsPerMsg *float64 `json:"server_cpu_us_per_msg,omitempty"`
	ClientCPUUsPerMsg *float64 `json:"client_cpu_us_per_msg,omitempty"`
	// TxUsPerMsg is, for a broker's inbox row, the time its consumer's
	// inbox transactions took (claim, handlers and commit) over the
	// messages they committed, in microseconds: the store's part of the
	// row, as it ran beside the broker.
	TxUsPerMsg *float64 `json:"tx_us_per_msg,omitempty"`
	// TxMsgsPerTx is the mean number of messages in those transactions:
	// a commit costs about the same whatever the transaction's size, so
	// the fewer messages share it, the more each one pays.
	TxMsgsPerTx *float64 `json:"tx_msgs_per_tx,omitempty"`
}

// Skipped is a row left out of the run, and why.
type Skipped struct {
	Row    string `json:"row"`
	Reason string `json:"reason"`
}

// Figures are a throughput and its latencies.
type Figures struct {
	MsgsPerS float64 `json:"msgs_per_s"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	Msgs     int64   `json:"msgs"`
	Seconds  float64 `json:"seconds"`
}

// PurgeResult compares claims while a purge runs with claims without one.
type PurgeResult struct {
	// Rows is the number of expired rows the purge deleted.
	Rows      int64 `json:"rows"`
	BatchSize int   `json:"batch_size"`
	// Rest is the client's Config.PurgeRest: how long the purge rests
	// after each batch, as a multiple of the batch's time.
	Rest    float64 `json:"rest"`
	Workers int     `json:"workers"`
	// PurgeS is how long the purge took, and PurgeRowsPerS its speed.
	PurgeS        float64 `json:"purge_s"`
	PurgeRowsPerS float64 `json:"purge_rows_per_s"`
	// Without are the claims without a purge: measured before it and again
	// after it, together. Before and After are the two halves.
	Without Figures `json:"without"`
	During  Figures `json:"during"`
	Before  Figures `json:"before"`
	After   Figures `json:"after"`
	// P99Ratio is During.P99Ms over Without.P99Ms; RateRatio likewise for
	// msgs/s.
	P99Ratio  float64 `json:"p99_ratio"`
	RateRatio float64 `json:"rate_ratio"`
}

// PartitionResult compares the two ways of retention on Postgres, in one
// run: the batched delete of Rows expired rows from the plain inbox, and
// the drop of a day partition of as many rows from the partitioned inbox
// (DETACH PARTITION … CONCURRENTLY, then DROP TABLE). It also compares
// claims on the partitioned inbox, with Partitions partitions, with claims
// on the plain one.
type PartitionResult struct {
	Rows    int `json:"rows"`
	Workers int `json:"workers"`
	// HoldS is how long the long transaction (a claim left open) is held
	// during each measurement under load.
	HoldS  float64          `json:"hold_s"`
	Delete RetentionFigures `json:"delete"`
	Drop   RetentionFigures `json:"drop"`
	// WALRatio is Delete.WALBytes over Drop.WALBytes.
	WALRatio float64 `json:"wal_ratio"`
	// Partitions are the partitions of the partitioned inbox when its
	// claims were measured.
	Partitions int `json:"partitions"`
	// PlainClaims and PartitionedClaims are claims (the inbox row, one
	// message per transaction) at Workers workers; msgs/s is the median
	// of the rounds, which alternate.
	PlainClaims       Figures `json:"plain_claims"`
	PartitionedClaims Figures `json:"partitioned_claims"`
	// ClaimsRatio is PartitionedClaims.MsgsPerS over PlainClaims.MsgsPerS.
	ClaimsRatio float64 `json:"claims_ratio"`
	// The CPU time the Postgres backends spent per claim, over every
	// round, where it can be read: less noisy than the rates on a busy
	// machine.
	PlainServerCPUUsPerClaim       *float64 `json:"plain_server_cpu_us_per_claim,omitempty"`
	PartitionedServerCPUUsPerClaim *float64 `json:"partitioned_server_cpu_us_per_claim,omitempty"`
}

// RetentionFigures are one way of retention: alone, its time and WAL;
// under load, claims without it and during it, each with a long
// transaction open.
type RetentionFigures struct {
	// S is its time alone (a purge with no rest), and WALBytes the WAL it
	// wrote then (the pg_current_wal_lsn() delta: the LSN is
	// cluster-wide, so other sessions can only add to it).
	S        float64 `json:"s"`
	WALBytes int64   `json:"wal_bytes"`
	// UnderLoadS is its time under claims (a purge resting as the
	// cleaner does; a drop whose detach waits for the long transaction).
	UnderLoadS float64 `json:"under_load_s"`
	Without    Figures `json:"without"`
	During     Figures `json:"during"`
	// P99Ratio is During.P99Ms over Without.P99Ms. A retention measured
	// under load more than once (the partition drop) reports the trial of
	// the median ratio, and P99Ratios has every trial's, in order.
	P99Ratio  float64   `json:"p99_ratio"`
	P99Ratios []float64 `json:"p99_ratios,omitempty"`
}

// IDsResult compares random UUIDv4 ids with time-ordered UUIDv7 ids on an
// inbox that already holds Rows rows.
type IDsResult struct {
	Rows    int       `json:"rows"`
	Workers int       `json:"workers"`
	V4      IDFigures `json:"uuidv4"`
	V7      IDFigures `json:"uuidv7"`
	// Checkpoint reports whether each measurement started right after a
	// CHECKPOINT (it needs a superuser), so that both kinds pay the same
	// full-page writes.
	Checkpoint bool `json:"checkpoint"`
}

// IDFigures are one id kind's figures.
type IDFigures struct {
	Figures
	WALBytesPerMsg    float64  `json:"wal_bytes_per_msg"`
	InboxBytesPerRow  float64  `json:"inbox_bytes_per_row"`
	ServerCPUUsPerMsg *float64 `json:"server_cpu_us_per_msg,omitempty"`
}

// Machine describes where the run ran.
type Machine struct {
	OS         string            `json:"os"`
	Arch       string            `json:"arch"`
	CPUs       int               `json:"cpus"`
	CPUModel   string            `json:"cpu_model,omitempty"`
	MemoryMB   int64             `json:"memory_mb,omitempty"`
	Go         string            `json:"go"`
	Postgres   string            `json:"postgres"`
	PGSettings map[string]string `json:"pg_settings"`
	// LoadStart and LoadEnd are the machine's load averages (1, 5 and 15
	// minutes) when the run started and ended: what else was running.
	LoadStart string `json:"load_start,omitempty"`
	LoadEnd   string `json:"load_end,omitempty"`
}

// Settings are the configuration of the run.
type Settings struct {
	// Schema is the random schema the run used and dropped.
	Schema        string   `json:"schema"`
	Rows          []string `json:"rows"`
	Workers       []int    `json:"workers"`
	Accounts      int      `json:"accounts"`
	PoolSize      int      `json:"pool_size"`
	WarmupS       float64  `json:"warmup_s"`
	DurationS     float64  `json:"duration_s"`
	Rounds        int      `json:"rounds"`
	PurgeRows     int      `json:"purge_rows"`
	IDRows        int      `json:"id_rows"`
	IDDurationS   float64  `json:"id_duration_s"`
	IDRounds      int      `json:"id_rounds"`
	Seed          uint64   `json:"seed"`
	GoMaxProcs    int      `json:"gomaxprocs"`
	IDKind        string   `json:"id_kind"`
	SideEffectSQL string   `json:"side_effect_sql"`
	// InProcessBrokers are the brokers that ran in the benchmark process
	// (kfake, an embedded NATS server): their rows' client CPU counts the
	// broker's CPU too, and the report says where their cores' time went.
	InProcessBrokers []string `json:"in_process_brokers,omitempty"`
	// RabbitMQBatchWaitMS is Config.RabbitMQBatchWait, when not zero.
	RabbitMQBatchWaitMS float64 `json:"rabbitmq_batch_wait_ms,omitempty"`
}

// pgSettings are the server settings that decide these figures.
var pgSettings = []string{"shared_buffers", "synchronous_commit", "fsync", "wal_sync_method", "full_page_writes",
	"wal_compression", "checkpoint_timeout", "max_wal_size", "autovacuum", "max_connections"}

func (b *bench) machine(ctx context.Context) Machine {
	m := Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version(), PGSettings: map[string]string{}}
	m.CPUModel, m.MemoryMB = procInfo()
	m.LoadStart = loadAvg()
	_ = b.admin.QueryRow(ctx, `SHOW server_version`).Scan(&m.Postgres)
	rows, err := b.admin.Query(ctx, `SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY($1)`, pgSettings)
	if err == nil {
		for rows.Next() {
			var k, v string
			if rows.Scan(&k, &v) == nil {
				m.PGSettings[k] = v
			}
		}
		rows.Close()
	}
	return m
}

// loadAvg returns the 1, 5 and 15 minute load averages on Linux, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// procInfo reads the CPU model and the memory size on Linux; elsewhere it
// returns nothing.
func procInfo() (model string, memMB int64) {
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			var kb int64
			if n, _ := fmt.Sscanf(s.Text(), "MemTotal: %d kB", &kb); n == 1 {
				memMB = kb / 1024
				break
			}
		}
		f.Close()
	}
	return model, memMB
}

// WriteMarkdown writes the report as Markdown tables.
func (r *Report) WriteMarkdown(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	p("## Rows\n\n")
	p("One side effect, `%s`, over %d accounts; every row shares a pool of %d connections. ", r.Settings.SideEffectSQL, r.Settings.Accounts, r.Settings.PoolSize)
	p("msgs/s is the median of %d rounds of %gs (slowest–fastest round in brackets); latency is per operation (a batch for the batch rows); WAL is per message, the least of the rounds.\n\n",
		r.Settings.Rounds, r.Settings.DurationS)
	p("| row | workers | msgs/s | (min–max) | p50 ms | p99 ms | WAL B/msg | inbox B/row | server CPU µs/msg | client CPU µs/msg |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range r.Results {
		p("| `%s` | %d | %.0f | %.0f–%.0f | %.2f | %.2f | %s | %s | %s | %s |\n", x.Name, x.Workers, x.MsgsPerS, x.MinRate, x.MaxRate,
			x.P50Ms, x.P99Ms, optional(x.WALBytesPerMsg), optional(x.InboxBytesPerRow), optional(x.ServerCPUUsPerMsg), optional(x.ClientCPUUsPerMsg))
	}
	for _, sk := range r.Skipped {
		p("\n`%s` was left out: %s.\n", sk.Row, sk.Reason)
	}
	if ratios := r.Ratios(); len(ratios) > 0 {
		p("\n### Targets\n\n| target | measured | met |\n| --- | ---: | :---: |\n")
		for _, t := range ratios {
			met := "no"
			switch {
			case t.ReportOnly:
				met = "–"
			case t.Met:
				met = "yes"
			}
			p("| %s | %.2f | %s |\n", t.Name, t.Value, met)
		}
	}
	if pr := r.Purge; pr != nil {
		p("\n## Purge under load\n\n")
		p("Claims (`inbox`, %d workers) while a purge deletes %d expired rows in batches of %d, resting %g× each batch's time after it (Config.PurgeRest), against the same claims without a purge (measured before and after it). The purge took %.1fs (%.0f rows/s).\n\n",
			pr.Workers, pr.Rows, pr.BatchSize, pr.Rest, pr.PurgeS, pr.PurgeRowsPerS)
		p("| | claims/s | p50 ms | p99 ms | claims | seconds |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
		for _, f := range []struct {
			name string
			f    Figures
		}{{"without a purge", pr.Without}, {"during the purge", pr.During}, {"(before)", pr.Before}, {"(after)", pr.After}} {
			p("| %s | %.0f | %.2f | %.2f | %d | %.1f |\n", f.name, f.f.MsgsPerS, f.f.P50Ms, f.f.P99Ms, f.f.Msgs, f.f.Seconds)
		}
		p("\np99 during ÷ without: %.2f; claims/s during ÷ without: %.2f.\n", pr.P99Ratio, pr.RateRatio)
	}
	if pr := r.Partition; pr != nil {
		p("\n## Retention: partition drop against batched delete\n\n")
		p("%d expired rows, deleted in batches from the plain inbox, or dropped as one day partition of the partitioned inbox (`DETACH PARTITION … CONCURRENTLY`, then `DROP TABLE`). Alone: nothing else runs, and the WAL is the `pg_current_wal_lsn()` delta after a CHECKPOINT. Under load: claims (`inbox`, %d workers) before it, during it and after it, a claim left open for %.1fs in each (the drop's detach waits for it); \"without\" is before and after together. The drop is measured under load %d times, and its row is the trial of the median p99 ratio (all of them: %v).\n\n",
			pr.Rows, pr.Workers, pr.HoldS, len(pr.Drop.P99Ratios), pr.Drop.P99Ratios)
		p("| | alone s | WAL bytes | under load s | claims/s without | p99 ms without | claims/s during | p99 ms during | p99 ratio |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, f := range []struct {
			name string
			f    RetentionFigures
		}{{"batched delete", pr.Delete}, {"partition drop", pr.Drop}} {
			p("| %s | %.2f | %d | %.2f | %.0f | %.2f | %.0f | %.2f | %.2f |\n", f.name, f.f.S, f.f.WALBytes, f.f.UnderLoadS,
				f.f.Without.MsgsPerS, f.f.Without.P99Ms, f.f.During.MsgsPerS, f.f.During.P99Ms, f.f.P99Ratio)
		}
		p("\nWAL of the delete ÷ WAL of the drop: %.1f. Claims on %d partitions: %.0f msgs/s (p99 %.2f ms) against %.0f on the plain inbox (p99 %.2f ms): %.2f×.\n",
			pr.WALRatio, pr.Partitions, pr.PartitionedClaims.MsgsPerS, pr.PartitionedClaims.P99Ms, pr.PlainClaims.MsgsPerS, pr.PlainClaims.P99Ms, pr.ClaimsRatio)
		if pr.PlainServerCPUUsPerClaim != nil {
			p("Server CPU per claim: %s µs on %d partitions, %s µs on the plain inbox.\n", optional(pr.PartitionedServerCPUUsPerClaim), pr.Partitions, optional(pr.PlainServerCPUUsPerClaim))
		}
	}
	if o := r.Outbox; o != nil {
		p("\n## Outbox relay\n\n")
		p("One relay (batch %d, %d batches in flight) drains %d events, enqueued beforehand: to a sink that keeps nothing (the store's share: claim and delete), and to kfake in this process, with acks. Latency is from a producer's commit to the broker's confirmation, one event at a time, the relay woken after the commit (%d events).\n\n",
			o.Batch, o.Workers, o.Events, o.LatencySamples)
		p("| null sink msgs/s | kfake msgs/s | p50 ms | p99 ms |\n| ---: | ---: | ---: | ---: |\n")
		p("| %.0f | %.0f | %.2f | %.2f |\n", o.NullMsgsPerS, o.KafkaMsgsPerS, o.LatencyP50Ms, o.LatencyP99Ms)
		if o.ForwarderMsgsPerS > 0 {
			p("\nwatermill-sql's Forwarder, set up as its documentation does, drained %d events to the same kfake at %.0f msgs/s (the relay: %.1f×).\n",
				o.ForwarderEvents, o.ForwarderMsgsPerS, o.KafkaMsgsPerS/o.ForwarderMsgsPerS)
		}
	}
	if rl := r.Relay; rl != nil {
		p("\n## Relay catching up\n\n")
		p("One relay (batch %d, %d batches in flight) empties a backlog enqueued beforehand (not timed), in ordered mode over %d keys and unordered, to a sink that keeps nothing and to kfake in this process, with acks. msgs/s is the median of %d rounds (slowest–fastest round in brackets).\n\n",
			rl.Batch, rl.Workers, rl.Keys, rl.Rounds)
		p("| drain | backlog | msgs/s | (min–max) |\n| --- | ---: | ---: | ---: |\n")
		for _, d := range rl.Drains {
			lo, hi := d.MsgsPerS, d.MsgsPerS
			if len(d.RoundRates) > 0 {
				lo, hi = slices.Min(d.RoundRates), slices.Max(d.RoundRates)
			}
			p("| `%s` | %d | %.0f | %.0f–%.0f |\n", d.Name, d.Events, d.MsgsPerS, lo, hi)
		}
	}
	if ids := r.IDs; ids != nil {
		p("\n## Ids: UUIDv4 against UUIDv7\n\n")
		cp := "right after a CHECKPOINT"
		if !ids.Checkpoint {
			cp = "without a CHECKPOINT (not a superuser)"
		}
		p("`inbox` at %d workers on an inbox that already holds %d rows of the same kind, each measurement %s.\n\n", ids.Workers, ids.Rows, cp)
		p("| ids | msgs/s | p50 ms | p99 ms | WAL B/msg | inbox B/row | server CPU µs/msg |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, f := range []struct {
			name string
			f    IDFigures
		}{{"UUIDv4 (random)", ids.V4}, {"UUIDv7 (time-ordered)", ids.V7}} {
			p("| %s | %.0f | %.2f | %.2f | %.0f | %.1f | %s |\n", f.name, f.f.MsgsPerS, f.f.P50Ms, f.f.P99Ms, f.f.WALBytesPerMsg, f.f.InboxBytesPerRow, optional(f.f.ServerCPUUsPerMsg))
		}
	}
	m := r.Machine
	p("\n## Machine\n\n%s/%s, %d CPUs (%s), %d MB, %s, PostgreSQL %s (", m.OS, m.Arch, m.CPUs, m.CPUModel, m.MemoryMB, m.Go, m.Postgres)
	first := true
	for _, k := range pgSettings {
		if v, ok := m.PGSettings[k]; ok {
			if !first {
				p(", ")
			}
			p("%s=%s", k, v)
			first = false
		}
	}
	p(").")
	if m.LoadStart != "" {
		p(" Load averages (1, 5, 15 min): %s at the start, %s at the end.", m.LoadStart, m.LoadEnd)
	}
	p("\n")
	return bw.Flush()
}

func optional(x *float64) string {
	if x == nil {
		return "–"
	}
	return fmt.Sprintf("%.0f", *x)
}

// Ratio is one of the targets, computed from a report.
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Want  float64 `json:"want"`
	// Met reports Value >= Want, or Value <= Want for LessIsBetter.
	Met          bool `json:"met"`
	LessIsBetter bool `json:"less_is_better,omitempty"`
	// ReportOnly marks a ratio that is reported with no agreed threshold:
	// its Want is 0, so it is always Met.
	ReportOnly bool `json:"report_only,omitempty"`
}

// Ratios computes the targets the report has the rows for.
func (r *Report) Ratios() []Ratio {
	get := func(name string, workers int) *Result {
		for i := range r.Results {
			if r.Results[i].Name == name && r.Results[i].Workers == workers {
				return &r.Results[i]
			}
		}
		return nil
	}
	var out []Ratio
	add := func(name, a string, aw int, b string, bw int, want float64) {
		x, y := get(a, aw), get(b, bw)
		if x == nil || y == nil || y.MsgsPerS == 0 {
			return
		}
		v := rateRatio(x, y)
		out = append(out, Ratio{Name: name, Value: round2(v), Want: want, Met: v >= want})
	}
	add("inbox ÷ bare, msgs/s at 8 workers (≥ 0.95)", "inbox", 8, "bare", 8, 0.95)
	add("inbox-handler ÷ bare, msgs/s at 8 workers (≥ 0.9)", "inbox-handler", 8, "bare", 8, 0.9)
	// The floors (floor.go): what Postgres charges for the statements a row
	// sends, and what the library adds to them.
	reportOnly := func(name, a string, aw int, b string, bw int) {
		n := len(out)
		add(name, a, aw, b, bw, 0)
		if len(out) > n {
			out[n].ReportOnly = true
		}
	}
	reportOnly("bare-claim ÷ bare, msgs/s at 8 workers (report only: the claim's cost to Postgres, the most inbox-handler ÷ bare can be)", "bare-claim", 8, "bare", 8)
	reportOnly("inbox-handler ÷ bare-claim, msgs/s at 8 workers (report only: what the library adds to the statements it sends)", "inbox-handler", 8, "bare-claim", 8)
	add("inbox-batch-100 ÷ inbox, msgs/s at 1 worker (≥ 15)", "inbox-batch-100", 1, "inbox", 1, 15)
	add("inbox ÷ check-then-insert, msgs/s at 8 workers (≥ 1)", "inbox", 8, "check-then-insert", 8, 1)
	add("inbox-duplicate ÷ inbox, msgs/s at 1 worker (≥ 2)", "inbox-duplicate", 1, "inbox", 1, 2)
	out = append(out, r.brokerRatios(get)...)
	out = append(out, r.watermillRatios(get)...)
	add("outbox-enqueue-1 ÷ bare, business tx/s at 8 workers (≥ 0.83: at most 20% added)", "outbox-enqueue-1", 8, "bare", 8, 0.83)
	reportOnly("bare-enqueue ÷ bare, business tx/s at 8 workers (report only: the enqueue's cost to Postgres, the most outbox-enqueue-1 ÷ bare can be)", "bare-enqueue", 8, "bare", 8)
	reportOnly("outbox-enqueue-1 ÷ bare-enqueue, business tx/s at 8 workers (report only: what the library adds to the statements it sends)", "outbox-enqueue-1", 8, "bare-enqueue", 8)
	if o := r.Outbox; o != nil {
		out = append(out,
			Ratio{Name: "relay to kfake, msgs/s at batch 100 (≥ 25000)", Value: float64(int64(o.KafkaMsgsPerS)), Want: 25000, Met: o.KafkaMsgsPerS >= 25000},
			Ratio{Name: "outbox commit-to-publish p50 ms, woken in process (≤ 10)", Value: o.LatencyP50Ms, Want: 10, Met: o.LatencyP50Ms <= 10, LessIsBetter: true})
		if o.ForwarderMsgsPerS > 0 {
			v := o.KafkaMsgsPerS / o.ForwarderMsgsPerS
			out = append(out, Ratio{Name: "relay ÷ watermill-sql Forwarder, msgs/s to kfake (≥ 3)", Value: round2(v), Want: 3, Met: v >= 3})
		}
	}
	out = append(out, r.relayRatios()...)
	if r.Purge != nil && r.Purge.Without.P99Ms > 0 {
		v := r.Purge.P99Ratio
		out = append(out, Ratio{Name: "p99 during the purge ÷ p99 without (≤ 2)", Value: v, Want: 2, Met: v <= 2, LessIsBetter: true})
	}
	if p := r.Partition; p != nil {
		if p.Drop.Without.P99Ms > 0 {
			v := p.Drop.P99Ratio
			out = append(out, Ratio{Name: "partition drop: claims' p99 during ÷ without, a long transaction open (≤ 1.1)", Value: v, Want: 1.1, Met: v <= 1.1, LessIsBetter: true})
		}
		if p.Delete.Without.P99Ms > 0 {
			out = append(out, Ratio{Name: "batched delete: claims' p99 during ÷ without, a long transaction open (report only)", Value: p.Delete.P99Ratio, Met: true, ReportOnly: true})
		}
		if p.Drop.WALBytes > 0 {
			out = append(out, Ratio{Name: fmt.Sprintf("WAL of the batched delete ÷ WAL of the partition drop, %d rows (≥ 20)", p.Rows), Value: p.WALRatio, Want: 20, Met: p.WALRatio >= 20})
		}
		if p.PlainClaims.MsgsPerS > 0 {
			out = append(out, Ratio{Name: fmt.Sprintf("claims on %d partitions ÷ on the plain inbox, msgs/s at %d %s (≥ 0.95)", p.Partitions, p.Workers, workersWord(p.Workers)),
				Value: p.ClaimsRatio, Want: 0.95, Met: p.ClaimsRatio >= 0.95})
		}
		if p.PlainServerCPUUsPerClaim != nil && p.PartitionedServerCPUUsPerClaim != nil && *p.PartitionedServerCPUUsPerClaim > 0 {
			out = append(out, Ratio{Name: fmt.Sprintf("server CPU per claim, plain ÷ on %d partitions (report only: the rate's cost, less noisy)", p.Partitions),
				Value: round2(*p.PlainServerCPUUsPerClaim / *p.PartitionedServerCPUUsPerClaim), Met: true, ReportOnly: true})
		}
	}
	out = append(out, r.telemetryRatios()...)
	return out
}

// brokerRatios are the targets of the broker rows: what the inbox costs end
// to end on a broker, against the bare loop and the store's batch claim,
// and where the cores' time goes.
func (r *Report) brokerRatios(get func(name string, workers int) *Result) []Ratio {
	type pair struct{ x, bare *Result }
	var pairs []pair
	for _, broker := range []string{"kafka", "nats", "rabbitmq"} {
		for _, w := range []int{1, 8} {
			x, bare := get(broker+"-inbox-batch-100", w), get(broker+"-bare-ack", w)
			if x != nil && bare != nil && bare.MsgsPerS > 0 {
				pairs = append(pairs, pair{x, bare})
			}
		}
	}
	at := func(w int) string { return fmt.Sprintf("msgs/s at %d %s", w, workersWord(w)) }
	var out []Ratio
	// The inbox end to end on a broker, against taking and acknowledging
	// the same messages with no inbox and no database.
	for _, p := range pairs {
		if p.x.Name != "kafka-inbox-batch-100" {
			out = append(out, Ratio{Name: fmt.Sprintf("%s ÷ %s, %s (report only)", p.x.Name, p.bare.Name, at(p.x.Workers)),
				Value: round2(rateRatio(p.x, p.bare)), Met: true, ReportOnly: true})
		}
	}
	// The adapter's own cost: the inbox row against the slower of what it
	// is made of, taking and acking the messages (the bare loop) and
	// committing them (the store's batch claim), each ratio taken round by
	// round; x ÷ min(a, b) is the larger of x ÷ a and x ÷ b.
	for _, p := range pairs {
		v := rateRatio(p.x, p.bare)
		if batch := get("inbox-batch-100", p.x.Workers); batch != nil && batch.MsgsPerS > 0 {
			v = max(v, rateRatio(p.x, batch))
		}
		name := fmt.Sprintf("%s ÷ min(%s, inbox-batch-100), %s", p.x.Name, p.bare.Name, at(p.x.Workers))
		if p.x.Workers == 1 {
			out = append(out, Ratio{Name: name + " (≥ 0.8)", Value: round2(v), Want: 0.8, Met: v >= 0.8})
		} else {
			out = append(out, Ratio{Name: name + " (report only)", Value: round2(v), Met: true, ReportOnly: true})
		}
	}
	// The same ratio with the store's batch claim measured in the broker's
	// phase, round by round beside the inbox row: the machine's drift
	// between phases left out.
	for _, p := range pairs {
		claim := get(strings.TrimSuffix(p.x.Name, "inbox-batch-100")+"phase-inbox-batch-100", p.x.Workers)
		if claim == nil || claim.MsgsPerS == 0 {
			continue
		}
		v := max(rateRatio(p.x, p.bare), rateRatio(p.x, claim))
		out = append(out, Ratio{Name: fmt.Sprintf("%s ÷ min(%s, %s), %s (report only: the claim measured in the same phase)", p.x.Name, p.bare.Name, claim.Name, at(p.x.Workers)),
			Value: round2(v), Met: true, ReportOnly: true})
		out = append(out, txRatios(p.x, claim)...)
	}
	for _, p := range pairs {
		if slices.Contains(r.Settings.InProcessBrokers, strings.TrimSuffix(p.x.Name, "-inbox-batch-100")) {
			out = append(out, r.cpuRatios(p.x, p.bare)...)
		}
	}
	return out
}

// cpuRatios say where the cores' time goes in an inbox row x and its bare
// row bare, whose broker runs in this process, so that the client CPU
// counts all but Postgres's (report only): the share of the machine's
// cores that each kept busy, msgs/s × CPU per message (this process's and
// the Postgres backends') ÷ cores; and bare's CPU per message ÷ x's, which
// is what x ÷ bare would be if both kept the cores equally busy. When that
// is below a target, the target asks x to use the cores better than the
// bare loop does: no change to the adapter reaches it, only less CPU per
// message.
func (r *Report) cpuRatios(x, bare *Result) []Ratio {
	cpu := func(res *Result) float64 {
		if res == nil || res.ClientCPUUsPerMsg == nil {
			return 0
		}
		v := *res.ClientCPUUsPerMsg
		if res.ServerCPUUsPerMsg != nil {
			v += *res.ServerCPUUsPerMsg
		}
		return v
	}
	cx, cb := cpu(x), cpu(bare)
	if cx == 0 || cb == 0 || r.Machine.CPUs <= 0 {
		return nil
	}
	at := fmt.Sprintf("at %d %s", x.Workers, workersWord(x.Workers))
	busy := func(res *Result, c float64) Ratio {
		return Ratio{Name: fmt.Sprintf("%s, share of the %d cores busy with it (msgs/s × client+server CPU per msg ÷ cores) %s (report only)", res.Name, r.Machine.CPUs, at),
			Value: round2(res.MsgsPerS * c / 1e6 / float64(r.Machine.CPUs)), Met: true, ReportOnly: true}
	}
	return []Ratio{
		{Name: fmt.Sprintf("%s ÷ %s, client+server CPU per msg %s (report only: %s ÷ %s if both kept the cores equally busy)", bare.Name, x.Name, at, x.Name, bare.Name),
			Value: round2(cb / cx), Met: true, ReportOnly: true},
		busy(x, cx), busy(bare, cb),
	}
}

// txRatios say how the transactions of x, a broker's inbox row, compare
// with claim, the same transactions measured alone in x's phase (report
// only): x's transaction time per message ÷ claim's time per message on
// a worker (the same work, slowed by the broker's beside it on the same
// cores: a ratio above 1 is time the adapter cannot win back by
// overlapping); and the share of x's workers' time spent inside their
// transactions (the rest is the adapter's and the broker's); and how many
// messages x's transactions held, against claim's batch.
func txRatios(x, claim *Result) []Ratio {
	if x.TxUsPerMsg == nil || *x.TxUsPerMsg <= 0 || claim.MsgsPerS <= 0 || x.Workers <= 0 {
		return nil
	}
	tx := *x.TxUsPerMsg
	at := fmt.Sprintf("at %d %s", x.Workers, workersWord(x.Workers))
	alone := 1e6 * float64(claim.Workers) / claim.MsgsPerS // µs a worker spends per message
	out := []Ratio{
		{Name: fmt.Sprintf("%s's transactions ÷ %s's, time per msg on a worker %s (report only: the store's work beside the broker's, in transactions of their own size)", x.Name, claim.Name, at),
			Value: round2(tx / alone), Met: true, ReportOnly: true},
		{Name: fmt.Sprintf("%s, share of its workers' time inside their transactions (transaction time per msg × msgs/s ÷ workers) %s (report only)", x.Name, at),
			Value: round2(tx * x.MsgsPerS / 1e6 / float64(x.Workers)), Met: true, ReportOnly: true},
	}
	if x.TxMsgsPerTx != nil && claim.Batch > 0 {
		out = append(out, Ratio{Name: fmt.Sprintf("%s's messages per transaction ÷ %s's batch %s (report only: below 1, each commit is shared by fewer messages)", x.Name, claim.Name, at),
			Value: round2(*x.TxMsgsPerTx / float64(claim.Batch)), Met: true, ReportOnly: true})
	}
	return out
}

// rateRatio is x's throughput over y's: the median over the rounds of the
// ratio of their rates in the same round, which runs the rows a ratio
// compares back to back (ratioGroups). A shared machine drifts by tens of
// percent over a minute, and a ratio of two medians taken across whole
// rounds carries that drift; a ratio taken within a round mostly does not.
// Results with no rates per round (a report from an older run) fall back to
// the ratio of the medians.
func rateRatio(x, y *Result) float64 {
	return roundRatio(x.RoundRates, y.RoundRates, x.MsgsPerS, y.MsgsPerS)
}

// roundRatio is rateRatio of two rows' rates per round, xs and ys, and
// their medians x and y.
func roundRatio(xs, ys []float64, x, y float64) float64 {
	n := len(xs)
	if n == 0 || n != len(ys) {
		return x / y
	}
	rs := make([]float64, 0, n)
	for i := range n {
		if ys[i] > 0 {
			rs = append(rs, xs[i]/ys[i])
		}
	}
	return median(rs)
}

// ratioGroups are the rows that the targets compare with each other, each
// group in one piece: in every round, the cells of a group at one worker
// count run back to back, in a new order, between the other cells.
var ratioGroups = [][]string{
	{"bare", "check-then-insert", "inbox", "inbox-handler", "bare-claim", "inbox-duplicate", "inbox-batch-100",
		"outbox-enqueue-1", "bare-enqueue", "watermill-middleware", "inbox-batch-100-otel-noop", "inbox-batch-100-otel-sdk", "inbox-batch-100-prom"},
	{"kafka-inbox-batch-100", "kafka-bare-ack", "kafka-phase-inbox-batch-100", "watermill-sql-exactly-once"},
	{"nats-inbox-batch-100", "nats-bare-ack", "nats-phase-inbox-batch-100"},
	{"rabbitmq-inbox-batch-100", "rabbitmq-bare-ack", "rabbitmq-phase-inbox-batch-100"},
}

func workersWord(n int) string {
	if n == 1 {
		return "worker"
	}
	return "workers"
}

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

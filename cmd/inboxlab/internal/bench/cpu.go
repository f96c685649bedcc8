package bench

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
)

// cpuMeter reads the CPU time spent by this process and by the server
// backends of the workers' pool. On a machine shared with other work the
// throughput of a row moves with the load, but the CPU it costs per message
// hardly does, so these figures compare rows when msgs/s cannot.
//
// The server's side needs the server on this machine and its processes'
// /proc/<pid>/schedstat readable (Linux, and the same user or root); where
// that fails it is left out.
type cpuMeter struct {
	pids []uint32
}

// newCPUMeter finds the backend of every connection of pool. It holds all
// of them at once so that it sees each one.
func newCPUMeter(ctx context.Context, pool *pgxpool.Pool, n int, host string) *cpuMeter {
	if !isLocal(host) {
		return &cpuMeter{}
	}
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	m := &cpuMeter{}
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return &cpuMeter{}
		}
		conns = append(conns, c)
		m.pids = append(m.pids, c.Conn().PgConn().PID())
	}
	if _, ok := m.server(); !ok {
		return &cpuMeter{}
	}
	return m
}

func isLocal(host string) bool {
	if strings.HasPrefix(host, "/") || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// server returns the CPU time of the pool's backends so far.
func (m *cpuMeter) server() (time.Duration, bool) {
	if len(m.pids) == 0 {
		return 0, false
	}
	var total time.Duration
	for _, pid := range m.pids {
		b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/schedstat")
		if err != nil {
			return 0, false
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, false
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		total += time.Duration(ns)
	}
	return total, true
}

// client returns the CPU time of this process so far.
func (m *cpuMeter) client() time.Duration { return processCPU() }

// txClock adds up the inbox transactions of the broker rows' consumers
// that committed, as their clients' Observers report them: how many, their
// messages, and the time they took (claim, handlers and commit).
type txClock struct{ txs, msgs, nanos atomic.Int64 }

func (c *txClock) TxStart(ctx context.Context, _ string, _ []inbox.Message) context.Context {
	return ctx
}

func (c *txClock) TxEnd(_ context.Context, e *inbox.TxEvent) {
	if e.Err == nil {
		c.txs.Add(1)
		c.msgs.Add(int64(e.Messages))
		c.nanos.Add(int64(e.Claim + e.Handler + e.Commit))
	}
}

func (c *txClock) DeadLettered(context.Context, *inbox.DeadLetterEvent) {}

var _ inbox.Observer = (*txClock)(nil)

// mark is the state of the counters at one moment.
type mark struct {
	lsn      int64
	server   time.Duration
	serverOK bool
	client   time.Duration
	txs      int64
	txMsgs   int64
	txTime   time.Duration
}

// mark reads the WAL position and the CPU counters.
func (b *bench) mark(ctx context.Context) (mark, error) {
	lsn, err := b.lsn(ctx)
	if err != nil {
		return mark{}, err
	}
	srv, ok := b.cpu.server()
	return mark{lsn: lsn, server: srv, serverOK: ok, client: b.cpu.client(), txs: b.txs.txs.Load(), txMsgs: b.txs.msgs.Load(), txTime: time.Duration(b.txs.nanos.Load())}, nil
}

// usage is what a measurement cost.
type usage struct {
	wal      int64
	server   time.Duration
	serverOK bool
	client   time.Duration
	// txs, txMsgs and txTime are the broker rows' inbox transactions
	// that committed, their messages, and the time they took (txClock).
	txs    int64
	txMsgs int64
	txTime time.Duration
}

func since(a, z mark) usage {
	return usage{wal: z.lsn - a.lsn, server: z.server - a.server, serverOK: a.serverOK && z.serverOK, client: z.client - a.client,
		txs: z.txs - a.txs, txMsgs: z.txMsgs - a.txMsgs, txTime: z.txTime - a.txTime}
}

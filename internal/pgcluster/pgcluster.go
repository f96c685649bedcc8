// Package pgcluster starts Postgres servers of our own from the local
// PostgreSQL binaries, for tests and for the lab's failover chaos: a lone
// throwaway server, or a primary and a streaming replica (initdb,
// pg_basebackup -R), on free loopback ports, in a scratch folder that Close
// removes. As root the servers run as the postgres user. They die with this
// process where the platform can (Linux's parent-death signal), and Close
// stops them.
//
// A cluster with a replica can be failed over as an operator would: cut
// the replication link (the replica reaches the primary through a loopback
// proxy), kill the primary with SIGKILL, promote the replica. URL names
// both servers with target_session_attrs=read-write, so that a client
// finds whichever is the primary.
//
// It runs the binaries and psql, and needs no database driver. Every wait
// is bounded.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txinbox/inbox/internal/tcpproxy"
)

// ReplicaName is the replica's application_name, which
// synchronous_standby_names names.
const ReplicaName = "replica1"

// Database is the database that URL names.
const Database = "postgres"

// DefaultStartTimeout bounds the start of a cluster.
const DefaultStartTimeout = 2 * time.Minute

// Config configures a cluster. Its zero value starts a lone server.
type Config struct {
	// Replica starts a streaming replica of the primary too. Defaults to
	// false.
	Replica bool
	// Synchronous makes the replica synchronous: the primary's
	// synchronous_standby_names names it, with synchronous_commit on, so
	// that a commit returns once the replica has flushed it. Defaults to
	// false: asynchronous replication.
	Synchronous bool
	// Settings are more server settings, name=value, for every server,
	// after the defaults. Defaults to none.
	Settings []string
	// BinDir holds initdb, postgres, pg_basebackup, pg_ctl, pg_isready and
	// psql. Defaults to BinDir()'s.
	BinDir string
	// StartTimeout bounds Start. Defaults to DefaultStartTimeout.
	StartTimeout time.Duration
}

// defaultSettings keep a server small and quick to start. fsync stays on:
// the failover chaos kills a server, never the host, so the page cache
// survives either way, and a test that wants speed over durability says
// so in Config.Settings.
var defaultSettings = []string{
	"listen_addresses=127.0.0.1",
	"shared_buffers=32MB",
	"max_connections=100",
	"wal_level=replica",
	"max_wal_senders=5",
	"hot_standby=on",
	"wal_keep_size=256MB",
	"wal_receiver_status_interval=1s",
	"wal_retrieve_retry_interval=500ms",
}

// Node is one server.
type Node struct {
	// Port is its loopback port.
	Port int
	// Data is its data directory.
	Data string

	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	logf   *os.File
}

// URL is a URL of the node's database.
func (n *Node) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.Port, Database)
}

// running reports whether the server process is still there.
func (n *Node) running() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// stop stops the server with a fast shutdown, and kills it if it has not
// stopped within 30 seconds.
func (n *Node) stop() {
	if !n.running() {
		return
	}
	interrupt(n.cmd.Process)
	select {
	case <-n.exited:
		return
	case <-time.After(30 * time.Second):
	}
	_ = killGroup(n.cmd.Process)
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
	}
}

// Cluster is a primary and, with Config.Replica, a streaming replica.
type Cluster struct {
	// Primary is the server started as the primary, and Replica the
	// replica, or nil.
	Primary, Replica *Node

	cfg   Config
	dir   string
	owner *owner
	proxy *tcpproxy.Proxy

	closeOnce sync.Once
}

// Start starts a cluster as cfg says. A nil cfg starts a lone server.
func Start(ctx context.Context, cfg *Config) (*Cluster, error) {
	c := &Cluster{}
	if cfg != nil {
		c.cfg = *cfg
	}
	if c.cfg.BinDir == "" {
		d, err := BinDir()
		if err != nil {
			return nil, err
		}
		c.cfg.BinDir = d
	}
	if c.cfg.StartTimeout <= 0 {
		c.cfg.StartTimeout = DefaultStartTimeout
	}
	if c.cfg.Synchronous && !c.cfg.Replica {
		return nil, errors.New("pgcluster: a synchronous cluster needs a replica (Config.Replica)")
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	var err error
	if c.owner, err = clusterOwner(); err != nil {
		return nil, err
	}
	// In the temporary directory itself, which every user may enter: the
	// owner of the servers may not enter a test's own temporary directory.
	if c.dir, err = os.MkdirTemp("", "inbox-pgcluster-"); err != nil {
		return nil, err
	}
	if err := c.owner.chown(c.dir); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	primary := filepath.Join(c.dir, "primary")
	if err := c.run(ctx, "initdb", "-D", primary, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		return err
	}
	var err error
	if c.Primary, err = c.startNode(ctx, "primary", primary); err != nil {
		return err
	}
	if !c.cfg.Replica {
		return nil
	}
	// The replica reaches the primary through a proxy, so that the link
	// can be cut without touching either server.
	if c.proxy, err = tcpproxy.Start(fmt.Sprintf("127.0.0.1:%d", c.Primary.Port)); err != nil {
		return err
	}
	replica := filepath.Join(c.dir, "replica")
	if err := c.run(ctx, "pg_basebackup", "-D", replica, "-h", "127.0.0.1", "-p", strconv.Itoa(c.Primary.Port), "-U", "postgres",
		"-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return err
	}
	// -R wrote standby.signal and a primary_conninfo to the primary
	// itself; this one, later in the file, wins.
	host, port, _ := net.SplitHostPort(c.proxy.Addr())
	conninfo := fmt.Sprintf("\nprimary_conninfo = 'host=%s port=%s user=postgres application_name=%s'\n", host, port, ReplicaName)
	f, err := os.OpenFile(filepath.Join(replica, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(conninfo)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if c.Replica, err = c.startNode(ctx, "replica", replica); err != nil {
		return err
	}
	// Only now, on the primary alone: a replica that inherited it would
	// wait, once promoted, for a standby of its own that never comes.
	if c.cfg.Synchronous {
		return c.SetSynchronousStandbyNames(ctx, `"`+ReplicaName+`"`)
	}
	return c.waitStandby(ctx, "async")
}

// startNode starts a server on data, on a free port, and waits until it
// accepts connections.
func (c *Cluster) startNode(ctx context.Context, name, data string) (*Node, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", c.dir}
	for _, s := range append(append([]string{}, defaultSettings...), c.cfg.Settings...) {
		args = append(args, "-c", s)
	}
	n := &Node{Port: port, Data: data, name: name, exited: make(chan struct{})}
	n.cmd = exec.Command(filepath.Join(c.cfg.BinDir, "postgres"), args...)
	n.cmd.SysProcAttr = runAs(c.owner, true)
	if n.logf, err = os.Create(filepath.Join(c.dir, name+".log")); err != nil {
		return nil, err
	}
	n.cmd.Stdout, n.cmd.Stderr = n.logf, n.logf
	if err := n.cmd.Start(); err != nil {
		n.logf.Close()
		return nil, fmt.Errorf("pgcluster: start the %s: %w", name, err)
	}
	go func() { _ = n.cmd.Wait(); close(n.exited) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := c.isReady(ctx, n); err == nil {
			return n, nil
		}
		select {
		case <-n.exited:
			return nil, fmt.Errorf("pgcluster: the %s exited: %s", name, c.logTail(name))
		case <-ctx.Done():
			n.stop()
			return nil, fmt.Errorf("pgcluster: the %s did not accept connections in time: %w; %s", name, ctx.Err(), c.logTail(name))
		case <-tick.C:
		}
	}
}

// isReady runs pg_isready on n.
func (c *Cluster) isReady(ctx context.Context, n *Node) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.cfg.BinDir, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(n.Port), "-t", "2")
	return cmd.Run()
}

// logTail is the end of a server's log, for an error.
func (c *Cluster) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// run runs one of the binaries as the servers' owner.
func (c *Cluster) run(ctx context.Context, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.cfg.BinDir, bin), args...)
	cmd.SysProcAttr = runAs(c.owner, false)
	cmd.Dir = c.dir
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: %s: %w: %s", bin, err, bytes.TrimSpace(out))
	}
	return nil
}

// Query runs sql on n with psql, as a separate transaction for each
// statement, and returns the output of the last: unaligned, without
// headers, a line per row and columns split by '|'.
func (c *Cluster) Query(ctx context.Context, n *Node, sql ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := []string{"-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", strconv.Itoa(n.Port), "-U", "postgres", "-d", Database}
	for _, s := range sql {
		args = append(args, "-c", s)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.cfg.BinDir, "psql"), args...)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=5")
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("pgcluster: psql on the %s: %w: %s", n.name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}

// URL names both servers, the primary first, with
// target_session_attrs=read-write: a client connects to whichever accepts
// writes, and after a failover finds the promoted replica by itself.
// Without a replica it is the primary's URL.
func (c *Cluster) URL() string {
	if c.Replica == nil {
		return c.Primary.URL()
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		c.Primary.Port, c.Replica.Port, Database)
}

// SetSynchronousStandbyNames sets the primary's synchronous_standby_names
// (empty: asynchronous replication) and reloads its configuration, then
// waits until the replica reports the state that follows, "sync" or
// "async".
func (c *Cluster) SetSynchronousStandbyNames(ctx context.Context, names string) error {
	if c.Replica == nil {
		return errors.New("pgcluster: no replica")
	}
	if _, err := c.Query(ctx, c.Primary, `ALTER SYSTEM SET synchronous_standby_names = '`+strings.ReplaceAll(names, `'`, `''`)+`'`,
		`SELECT pg_reload_conf()`); err != nil {
		return err
	}
	want := "async"
	if names != "" {
		want = "sync"
	}
	return c.waitStandby(ctx, want)
}

// waitStandby waits until the primary sees the replica streaming, with
// sync_state want (any, when want is ""), for a minute at most.
func (c *Cluster) waitStandby(ctx context.Context, want string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var got string
	for {
		var err error
		got, err = c.Query(ctx, c.Primary, `SELECT coalesce((SELECT state || ' ' || sync_state FROM pg_stat_replication WHERE application_name = '`+ReplicaName+`'), 'absent')`)
		if err == nil && (got == "streaming "+want || want == "" && strings.HasPrefix(got, "streaming ")) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: the replica is not streaming as %s: %q (%v); replica log: %s", want, got, err, c.logTail("replica"))
		case <-tick.C:
		}
	}
}

// CatchUp waits until the replica has replayed everything the primary has
// written so far, a minute at most.
func (c *Cluster) CatchUp(ctx context.Context) error {
	if c.Replica == nil {
		return errors.New("pgcluster: no replica")
	}
	lsn, err := c.Query(ctx, c.Primary, `SELECT pg_current_wal_lsn()`)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := c.Query(ctx, c.Replica, `SELECT pg_last_wal_replay_lsn() >= '`+lsn+`'::pg_lsn`)
		if err == nil && out == "t" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: the replica did not replay up to %s: %q, %v", lsn, out, err)
		case <-tick.C:
		}
	}
}

// CutReplication cuts the link between the replica and the primary, as a
// network partition would, and keeps it cut: the primary goes on alone.
func (c *Cluster) CutReplication() {
	if c.proxy == nil {
		return
	}
	c.proxy.Refuse(true)
	c.proxy.Cut()
}

// RestoreReplication lets the replica reach the primary again after
// CutReplication, and waits until the primary sees it streaming (sync or
// async, as synchronous_standby_names says), a minute at most.
func (c *Cluster) RestoreReplication(ctx context.Context) error {
	if c.proxy == nil {
		return errors.New("pgcluster: no replica")
	}
	c.proxy.Refuse(false)
	return c.waitStandby(ctx, "")
}

// KillPrimary kills the primary, and every process of its, with SIGKILL,
// and waits for it to be reaped, ten seconds at most.
func (c *Cluster) KillPrimary() error {
	n := c.Primary
	if !n.running() {
		return errors.New("pgcluster: the primary is not running")
	}
	if err := killGroup(n.cmd.Process); err != nil {
		return fmt.Errorf("pgcluster: kill the primary: %w", err)
	}
	select {
	case <-n.exited:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("pgcluster: the primary was not reaped within 10s of SIGKILL")
	}
}

// Promote promotes the replica (pg_ctl promote), and waits until it
// accepts writes, a minute at most.
func (c *Cluster) Promote(ctx context.Context) error {
	if c.Replica == nil {
		return errors.New("pgcluster: no replica")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.run(ctx, "pg_ctl", "promote", "-D", c.Replica.Data, "-w", "-t", "50"); err != nil {
		return err
	}
	out, err := c.Query(ctx, c.Replica, `SELECT pg_is_in_recovery()`)
	if err != nil {
		return err
	}
	if out != "f" {
		return fmt.Errorf("pgcluster: the replica is still in recovery after pg_ctl promote: %q", out)
	}
	return nil
}

// Close stops the servers and the proxy and removes the folder. It is safe
// to call more than once.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, n := range []*Node{c.Primary, c.Replica} {
			if n != nil {
				wg.Add(1)
				go func() { defer wg.Done(); n.stop() }()
			}
		}
		wg.Wait()
		if c.proxy != nil {
			c.proxy.Close()
		}
		for _, n := range []*Node{c.Primary, c.Replica} {
			if n != nil && n.logf != nil {
				n.logf.Close()
			}
		}
		if c.dir != "" {
			_ = os.RemoveAll(c.dir)
		}
	})
}

// Log copies the servers' logs to w, for a failed test.
func (c *Cluster) Log(w io.Writer) {
	for _, name := range []string{"primary", "replica"} {
		if b, err := os.ReadFile(filepath.Join(c.dir, name+".log")); err == nil {
			fmt.Fprintf(w, "--- %s.log\n%s", name, b)
		}
	}
}

// BinDir finds the PostgreSQL binaries: where initdb on PATH is (after
// symbolic links: a distribution may link a few of them only), or the
// newest /usr/lib/postgresql/*/bin.
func BinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("pgcluster: no initdb on PATH or under /usr/lib/postgresql/*/bin")
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

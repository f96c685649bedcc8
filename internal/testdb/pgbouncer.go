//go:build unix

package testdb

import (
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/txinbox/inbox/internal/pgcluster"
)

// pgbouncerPaths are where PgBouncer is looked for when it is not on PATH:
// Debian installs it in /usr/sbin.
var pgbouncerPaths = []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"}

// PgBouncer starts the machine's PgBouncer on a free loopback port in front
// of the test server, in pool mode mode (PoolTransaction or PoolSession),
// and returns a URL of the test server's database through it. Clients log
// in as any user: PgBouncer logs in to the server as the test URL's user.
// It stops when t ends, and, on Linux, when the test binary dies. A missing
// pgbouncer skips t, or fails it in CI.
//
// Startup parameters other than PgBouncer's own (application_name,
// client_encoding, DateStyle, TimeZone, standard_conforming_strings) are
// refused, as a production PgBouncer refuses them: a test that needs a
// search_path names its schema instead (Tables.Schema).
func PgBouncer(t testing.TB, mode string) string {
	t.Helper()
	if mode != PoolTransaction && mode != PoolSession {
		t.Fatalf("testdb.PgBouncer: pool mode %q: want %q or %q", mode, PoolTransaction, PoolSession)
	}
	server := URL(t)
	bin, err := findPgBouncer()
	Require(t, "pgbouncer", err)
	u, stop, err := startPgBouncer(bin, server, mode)
	if err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	t.Cleanup(stop)
	return u
}

func findPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range pgbouncerPaths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no pgbouncer on PATH or in /usr/sbin (apt-get install pgbouncer)")
}

// startPgBouncer starts bin in front of the server at serverURL.
func startPgBouncer(bin, serverURL, mode string) (string, func(), error) {
	target, user, db, err := pgbouncerTarget(serverURL)
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "inbox-pgbouncer-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	// PgBouncer refuses to run as root: as root it runs as the postgres
	// user, which must read its configuration.
	attr, chown, err := pgcluster.ServerProcess()
	if err != nil {
		cleanup()
		return "", nil, err
	}
	listen, err := pgcluster.FreePort()
	if err != nil {
		cleanup()
		return "", nil, err
	}
	cfg, err := writePgBouncerConfig(dir, target, mode, listen, chown)
	if err != nil {
		cleanup()
		return "", nil, err
	}
	p, err := runPgBouncer(bin, cfg, attr, filepath.Join(dir, "pgbouncer.log"))
	if err != nil {
		cleanup()
		return "", nil, err
	}
	stop := func() {
		p.stop()
		cleanup()
	}
	u := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", neturl.PathEscape(user), listen, neturl.PathEscape(db))
	if err := p.await(u); err != nil {
		stop()
		return "", nil, err
	}
	return u, stop, nil
}

// pgbouncerTarget returns PgBouncer's connection string to the server at
// serverURL, and the user and database a client names.
func pgbouncerTarget(serverURL string) (target, user, db string, err error) {
	su, err := neturl.Parse(serverURL)
	if err != nil {
		return "", "", "", fmt.Errorf("test server URL: %w", err)
	}
	host, port := su.Hostname(), su.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	user = su.User.Username()
	if user == "" {
		user = "postgres"
	}
	pass, _ := su.User.Password()
	db = strings.TrimPrefix(su.Path, "/")
	if db == "" {
		db = user
	}
	target = fmt.Sprintf("host=%s port=%s user=%s", host, port, user)
	if pass != "" {
		target += " password=" + pass
	}
	return target, user, db, nil
}

// writePgBouncerConfig writes in dir the configuration of a PgBouncer that
// listens on the loopback port listen and pools, in mode, every database
// of the server target. It returns the file's path. chown gives dir and
// the file to the user PgBouncer runs as.
func writePgBouncerConfig(dir, target, mode string, listen int, chown func(path string) error) (string, error) {
	size := PgBouncerPoolSize
	if mode == PoolSession {
		// A client connection holds its server connection for as long
		// as it lives, idle or not: eight CLIs with two connections
		// each need sixteen.
		size = 20
	}
	ini := fmt.Sprintf(`[databases]
* = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = %s
default_pool_size = %d
max_client_conn = 1000
ignore_startup_parameters = extra_float_digits
server_lifetime = 3600
log_connections = 0
log_disconnections = 0
`, target, listen, mode, size)
	cfg := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(cfg, []byte(ini), 0o600); err != nil {
		return "", err
	}
	for _, p := range []string{dir, cfg} {
		if err := chown(p); err != nil {
			return "", err
		}
	}
	return cfg, nil
}

// pgbouncerProcess is a running PgBouncer.
type pgbouncerProcess struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed when it has exited
	logPath string
	logf    *os.File
}

// runPgBouncer starts bin with the configuration cfg as attr says, its
// output going to logPath.
func runPgBouncer(bin, cfg string, attr *syscall.SysProcAttr, logPath string) (*pgbouncerProcess, error) {
	cmd := exec.Command(bin, cfg)
	cmd.SysProcAttr = attr
	termWithParent(cmd.SysProcAttr)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &pgbouncerProcess{cmd: cmd, exited: make(chan struct{}), logPath: logPath, logf: logf}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// stop ends the process, with SIGTERM, or after 10s SIGKILL.
func (p *pgbouncerProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.logf.Close()
}

// await waits until PgBouncer answers at u, for at most 30s. If it exits
// first or does not answer, the error holds its log.
func (p *pgbouncerProcess) await(u string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ping(u)
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			log, _ := os.ReadFile(p.logPath)
			return fmt.Errorf("pgbouncer exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(p.logPath)
			return fmt.Errorf("pgbouncer did not answer within 30s: %w: %s", err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

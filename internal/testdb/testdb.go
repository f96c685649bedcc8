// Package testdb gives tests a real Postgres: the server named by
// TEST_DATABASE_URL, the machine's local server by default, or a throwaway
// cluster started from the local PostgreSQL binaries when nothing answers.
//
// Tests isolate themselves with a random schema (Schema) that is dropped on
// cleanup, so they can run in parallel.
//
// Environment:
//
//	TEST_DATABASE_URL  the server to use; default DefaultURL
//	TEST_POSTGRES      "throwaway" always starts a throwaway cluster
//	CI                 "true" turns a missing Postgres into a failure
//
// Call Main from TestMain so the throwaway cluster stops when the tests end;
// it also stops if the test binary dies, through a parent-death signal.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is the machine's local server.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// MaxConns is the size of the shared pool. Two test binaries run at once
// by default, and Postgres allows 100 connections.
const MaxConns = 34

var (
	once      sync.Once
	url       string
	setupErr  error
	stopFuncs []func()
	poolOnce  sync.Once
	pool      *pgxpool.Pool
	poolErr   error
)

// CI reports whether the tests run in CI, where a missing service fails.
func CI() bool { return os.Getenv("CI") == "true" }

// Require skips t, or fails it in CI, with err's message.
func Require(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if CI() {
		t.Fatalf("%s is required in CI (CI=true): %v", what, err)
	}
	t.Skipf("%s unavailable, skipping (set CI=true to fail instead): %v", what, err)
}

// URL returns the URL of the test server, starting a throwaway cluster if
// need be.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(setup)
	Require(t, "Postgres", setupErr)
	return url
}

// URLOrError returns the URL of the test server, starting a throwaway
// cluster if need be, or why there is none. It is for examples, which have
// no testing.TB to skip or fail.
func URLOrError() (string, error) {
	once.Do(setup)
	return url, setupErr
}

func setup() {
	explicit := os.Getenv("TEST_DATABASE_URL")
	if os.Getenv("TEST_POSTGRES") != "throwaway" {
		url = explicit
		if url == "" {
			url = DefaultURL
		}
		err := ping(url)
		if err == nil || explicit != "" {
			if err != nil {
				setupErr = fmt.Errorf("TEST_DATABASE_URL %s: %w", explicit, err)
			}
			return
		}
	}
	var stop func()
	url, stop, setupErr = startThrowaway()
	if setupErr != nil {
		setupErr = fmt.Errorf("no server answers at %s, and a throwaway cluster could not start: %w", DefaultURL, setupErr)
		return
	}
	stopFuncs = append(stopFuncs, stop)
}

func ping(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// Main runs the tests and then stops the throwaway cluster, if one started.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the throwaway cluster, if one started.
func Stop() {
	if pool != nil {
		pool.Close()
	}
	for _, f := range stopFuncs {
		f()
	}
	stopFuncs = nil
}

// Pool returns a pool shared by the tests of this binary.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := URL(t)
	poolOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			poolErr = err
			return
		}
		cfg.MaxConns = MaxConns
		pool, poolErr = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	Require(t, "Postgres pool", poolErr)
	return pool
}

// Schema creates a schema with a random name, drops it with everything in
// it when t ends, and returns its name.
func Schema(t testing.TB) string {
	t.Helper()
	p := Pool(t)
	name := "inbox_test_" + RandomSuffix()
	ctx := context.Background()
	if _, err := p.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := p.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// RandomSuffix returns 12 random hex digits for names of test objects.
func RandomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startThrowaway initialises a cluster in a temporary directory and starts
// it on a free port. Postgres refuses to run as root, so as root it runs as
// the postgres user.
func startThrowaway() (string, func(), error) {
	bindir, err := findBinDir()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "inbox-pg-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			cleanup()
			return "", nil, fmt.Errorf("running as root, and there is no postgres user to run the cluster as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			cleanup()
			return "", nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bindir, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		cleanup()
		return "", nil, err
	}
	pg := exec.Command(filepath.Join(bindir, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200")
	pg.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT, Setpgid: true}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err == nil {
		pg.Stdout, pg.Stderr = logf, logf
	}
	if err := pg.Start(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = pg.Wait(); close(exited) }()
	stop := func() {
		_ = pg.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = pg.Process.Kill()
			<-exited
		}
		if logf != nil {
			logf.Close()
		}
		cleanup()
	}
	u := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := ping(u)
		if err == nil {
			return u, stop, nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			cleanup()
			return "", nil, fmt.Errorf("postgres exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("throwaway postgres did not answer within 60s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// findBinDir finds initdb on PATH or under /usr/lib/postgresql/*/bin,
// newest version first.
func findBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
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
	return "", errors.New("no initdb on PATH or under /usr/lib/postgresql/*/bin")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// SchemaPool creates a schema with a random name and returns a small pool
// whose search_path is that schema, and a function that drops it. It is for
// examples, which have no testing.TB; tests use Schema.
func SchemaPool() (*pgxpool.Pool, string, func(), error) {
	once.Do(setup)
	if setupErr != nil {
		return nil, "", nil, setupErr
	}
	ctx := context.Background()
	name := "inbox_example_" + RandomSuffix()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, "", nil, err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", nil, err
	}
	if _, err := p.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{name}.Sanitize()); err != nil {
		p.Close()
		return nil, "", nil, err
	}
	drop := func() {
		_, _ = p.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{name}.Sanitize()+` CASCADE`)
		p.Close()
	}
	return p, name, drop, nil
}

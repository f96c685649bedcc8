package inboxcli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/cmd/inbox/inboxcli"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestAdminUsage(t *testing.T) {
	t.Parallel()
	code, _, stderr := run(t, nil, "admin", "--addr", "0.0.0.0:0")
	require.Equal(t, 2, code)
	requireOneLine(t, stderr)
	require.Contains(t, stderr, "--allow-remote")
	require.Contains(t, stderr, "authenticating proxy")
	code, _, stderr = run(t, nil, "admin", "--read-only", "--allow-writes")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "contradict")
	code, _, _ = run(t, nil, "admin", "--addr", "nonsense")
	require.Equal(t, 2, code)
}

// serveAdmin runs 'inbox admin' with args until the test ends, and returns
// the URL it serves.
func serveAdmin(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- inboxcli.Main(ctx, append([]string{"admin", "--addr", "127.0.0.1:0"}, args...), &inboxcli.Env{
			Stdout: pw, Stderr: &lockedWriter{w: &stderr}, Getenv: func(k string) string { return env[k] },
		})
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err, "inbox admin printed no address")
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	m := regexp.MustCompile(`serving (http://\S+)/ `).FindStringSubmatch(line)
	require.Equal(t, 2, len(m), line)
	t.Cleanup(func() {
		cancel()
		require.Equal(t, 0, <-done)
	})
	return m[1]
}

func TestAdminServes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := migratedPgx(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	db := []string{"--schema", schema}
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	id := inboxtest.NewID()
	require.NoError(t, c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: id, Payload: []byte("secret")},
		Err: inbox.Permanent(errors.New("declined")), Attempts: 1}))
	ds, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
	require.NoError(t, err)
	require.Len(t, ds, 1)

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	postReplay := func(base, site string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/deadletters/%d/replay", base, ds[0].ID), nil)
		require.NoError(t, err)
		req.Header.Set("Sec-Fetch-Site", site)
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}

	// Writes off by default.
	base := serveAdmin(t, env, db...)
	resp, err := http.Get(base + "/?format=json")
	require.NoError(t, err)
	var ov struct {
		Consumers []struct {
			Consumer    string `json:"consumer"`
			DeadLetters int    `json:"dead_letters"`
		} `json:"consumers"`
		Writable bool `json:"writable"`
		Outbox   *struct {
			Pending int64 `json:"pending"`
		} `json:"outbox"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ov))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, ov.Consumers, 1)
	require.Equal(t, 1, ov.Consumers[0].DeadLetters)
	require.False(t, ov.Writable)
	require.NotNil(t, ov.Outbox)
	require.Equal(t, http.StatusForbidden, postReplay(base, "same-origin").StatusCode)

	// With --allow-writes: a cross-site POST still gets 403; the page's own
	// POST marks the dead letter.
	base = serveAdmin(t, env, append(db, "--allow-writes", "--prefix", "/ops")...)
	require.True(t, strings.HasSuffix(base, "/ops"), base)
	require.Equal(t, http.StatusForbidden, postReplay(base, "cross-site").StatusCode)
	resp = postReplay(base, "same-origin")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, fmt.Sprintf("/ops/deadletters/%d?done=marked", ds[0].ID), resp.Header.Get("Location"))
	// The application replays it: applied once.
	applied := 0
	res, err := c.ProcessReplays(ctx, "billing", inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error {
		applied++
		return nil
	}))
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, inbox.Applied, res[0].Outcome)
	require.Equal(t, 1, applied)
}

// TestAdminHelp: the help names the method that replays what the page
// marks, and the Host check.
func TestAdminHelp(t *testing.T) {
	t.Parallel()
	code, stdout, _ := run(t, nil, "admin", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "inbox.Client.ProcessReplays")
	require.NotContains(t, stdout, "DeadLetterReplay")
	require.Contains(t, stdout, "--allowed-host")
	require.Contains(t, stdout, "DNS rebinding")
}

// TestAdminHosts: 'inbox admin' answers requests that name loopback, its
// --addr or an --allowed-host, and refuses another Host with 421, reads
// included: a site that points a name of its own at this machine (DNS
// rebinding) cannot use the page from its origin.
func TestAdminHosts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := migratedPgx(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	require.NoError(t, c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: inboxtest.NewID()},
		Err: inbox.Permanent(errors.New("declined")), Attempts: 1}))
	ds, err := c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
	require.NoError(t, err)
	require.Len(t, ds, 1)

	base := serveAdmin(t, env, "--schema", schema, "--allow-writes", "--allowed-host", "ops.example.com")
	port := base[strings.LastIndex(base, ":")+1:]
	send := func(method, path, host string) (int, string) {
		req, err := http.NewRequest(method, base+path, nil)
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Origin", "http://"+host)
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, host := range []string{"rebind.evil.example:" + port, "evil.example"} {
		code, body := send(http.MethodGet, "/deadletters?format=json", host)
		require.Equal(t, http.StatusMisdirectedRequest, code, body)
		require.Contains(t, body, "--allowed-host")
		require.NotContains(t, body, "billing")
		code, body = send(http.MethodPost, fmt.Sprintf("/deadletters/%d/delete", ds[0].ID), host)
		require.Equal(t, http.StatusMisdirectedRequest, code, body)
	}
	ds, err = c.Admin().DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: "billing", Limit: 10})
	require.NoError(t, err)
	require.Len(t, ds, 1, "the rebinding POST deleted nothing")
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "ops.example.com", "OPS.example.com:" + port} {
		code, body := send(http.MethodGet, "/?format=json", host)
		require.Equal(t, http.StatusOK, code, "%s: %s", host, body)
	}

	code, _, stderr := run(t, env, "admin", "--addr", "127.0.0.1:0", "--schema", schema, "--allowed-host", "http://ops.example.com/")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "AllowedHosts")
	code, _, stderr = run(t, nil, "admin", "--allowed-host", "a,,b")
	require.Equal(t, 2, code, stderr)
}

// lockedWriter serialises writes, for a writer a server goroutine shares.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

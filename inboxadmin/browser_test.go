package inboxadmin_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxadmin"
	"github.com/txinbox/inbox/internal/require"
	"github.com/txinbox/inbox/internal/testdb"
)

// chromium finds Debian's headless Chromium. It skips t when there is
// none, and fails it in CI, where .ci/run installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if testdb.CI() {
		t.Fatal("no chromium on PATH: CI needs it for the admin page's browser test ('apt-get install -y chromium'; .ci/run installs it)")
	}
	t.Skip("no chromium on PATH: skipping the admin page's browser test; install it with 'apt-get install -y chromium'")
	return ""
}

// browser starts a headless Chromium for t and returns a context to drive
// it with.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1200, 640),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first run starts the browser, for as long as ctx lives: it takes
	// no timeout. The browsing after it does, so that a hung browser fails
	// the test rather than the package's timeout.
	require.NoError(t, chromedp.Do(ctx), "start %s", path)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelT)
	return ctx
}

// TestBrowser drives the admin page in Chromium: it opens the overview,
// replays a dead letter by clicking and confirming, and checks in the
// database that the application's replay then applies it exactly once. A
// form on another site that posts to the page is refused.
//
// With INBOXADMIN_SCREENSHOT=path it also saves a screenshot of the
// overview there (docs/admin-overview.png is one).
func TestBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	f := postgres(t)
	s := seed(t, f)
	bg := context.Background()
	// A second consumer, and rows aged so that the coverage is real: one
	// consumer covers its replay horizon, the other does not yet.
	for range 3 {
		_, err := f.process(bg, "inventory", inbox.Message{ID: newID()})
		require.NoError(t, err)
	}
	require.NoError(t, f.exec(bg, `UPDATE {inbox} SET processed_at = now() - interval '20 days' WHERE consumer_name = 'billing'`))
	require.NoError(t, f.exec(bg, `UPDATE {inbox} SET processed_at = now() - interval '3 days' WHERE consumer_name = 'inventory'`))
	require.NoError(t, f.exec(bg, `UPDATE {inbox_effects} SET started_at = now() - interval '2 hours'`))
	require.NoError(t, f.exec(bg, `UPDATE {outbox} SET created_at = now() - interval '42 seconds'`))
	other := newID()
	require.NoError(t, f.deadLetter(bg, inbox.DeadLetterParams{Consumer: "inventory", Message: inbox.Message{ID: other, Payload: []byte(`{}`)},
		Err: inbox.Permanent(errors.New("unknown sku")), Attempts: 1}))

	h := f.handler(&inboxadmin.Config{Prefix: "/admin", Authorize: allowAll})
	mux := http.NewServeMux()
	mux.Handle("/admin/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base := srv.URL + "/admin"

	// The overview.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("main table")),
	))
	overview, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
	require.NoError(t, err)
	require.Contains(t, overview, "billing")
	require.Contains(t, overview, "inventory")
	require.Contains(t, overview, "shipping")
	if path := os.Getenv("INBOXADMIN_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, png, 0o644))
	}

	// The dead letter, by clicking: the list, the dead letter, Replay…,
	// Confirm replay. Each wait is for an element only the next page has.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`a[href="/admin/deadletters"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.filter`)),
		chromedp.Click(chromedp.Search(`//td[contains(., "`+s.dlID+`")]/preceding-sibling::td/a`)),
		chromedp.WaitVisible(chromedp.ID("replay")),
	))
	dlURL, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Regexp(t, `/admin/deadletters/\d+$`, dlURL)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("replay")),
		chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("confirm")),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
	))
	flash, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.flash`)))
	require.NoError(t, err)
	require.Contains(t, flash, "Marked for replay")

	// The application replays what was marked: the message is applied
	// exactly once, and a redelivery is a duplicate.
	res, err := f.replay(bg, "billing")
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, s.dlID, res[0].DeadLetter.MessageID)
	require.Equal(t, inbox.Applied, res[0].Outcome)
	require.Equal(t, 1, f.applied(bg, s.dlID))
	res, err = f.replay(bg, "billing")
	require.NoError(t, err)
	require.Len(t, res, 0)
	out, err := f.process(bg, "billing", inbox.Message{ID: s.dlID})
	require.NoError(t, err)
	require.Equal(t, inbox.Duplicate, out)
	require.Equal(t, 1, f.applied(bg, s.dlID))

	// A form on another site that posts to the page: the browser sends it
	// cross-site, and the page refuses it with 403.
	dls, err := f.store.ListDeadLetters(bg, "inventory", 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	target := fmt.Sprintf("http://127.0.0.1:%s/admin/deadletters/%d/replay", port, dls[0].ID)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s"><button id="go" type="submit">Win a prize</button></form>`, target)
	}))
	t.Cleanup(evil.Close)
	_, evilPort, err := net.SplitHostPort(strings.TrimPrefix(evil.URL, "http://"))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate("http://localhost:"+evilPort+"/"),
		chromedp.WaitVisible(chromedp.ID("go")),
		chromedp.Click(chromedp.ID("go")),
		chromedp.WaitVisible(chromedp.CSS(`.error`)),
	))
	refused, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.error`)))
	require.NoError(t, err)
	require.Contains(t, refused, "403")
	require.Contains(t, refused, "cross-origin request refused")
	res, err = f.replay(bg, "inventory")
	require.NoError(t, err)
	require.Len(t, res, 0, "the cross-site form marked nothing")
	require.Equal(t, 0, f.applied(bg, other))
}

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

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxadmin"
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

// rebindName is a name of another site that the browser resolves to this
// machine, as a DNS-rebinding attack makes it do.
const rebindName = "rebind.evil.example"

// browser starts a headless Chromium for t and returns a context to drive
// it with. Its flags are those known to work on a machine with no network
// beyond loopback (headless, no sandbox as root, no GPU, no QUIC, no first
// run, no background networking, component updates or sync), and it
// resolves rebindName to 127.0.0.1.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], // headless, no-first-run, disable-background-networking, disable-sync
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("host-resolver-rules", "MAP "+rebindName+" 127.0.0.1"),
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
	dls, err := f.store.DeadLetterList(bg, "inventory", 10)
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

// TestBrowserFilteredBulkReplay drives a bulk replay in Chromium from a
// list filtered by consumer: its confirmation counts that consumer's dead
// letters only, its Cancel returns to the filtered list, and confirming
// marks that consumer's dead letters only.
func TestBrowserFilteredBulkReplay(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	f := postgres(t)
	seed(t, f) // billing: one replayable dead letter, one without an id
	bg := context.Background()
	var inventory []string
	for range 2 {
		id := newID()
		inventory = append(inventory, id)
		require.NoError(t, f.deadLetter(bg, inbox.DeadLetterParams{Consumer: "inventory", Message: inbox.Message{ID: id, Payload: []byte(`{}`)},
			Err: inbox.Permanent(errors.New("unknown sku")), Attempts: 1}))
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/", f.handler(&inboxadmin.Config{Prefix: "/admin", Authorize: allowAll}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base := srv.URL + "/admin"

	// From the overview, inventory's dead letters; Replay all that match;
	// Cancel comes back to them; again, and confirm with the count typed.
	bulk := chromedp.Search(`//a[starts-with(., "Replay all that match")]`)
	count := chromedp.CSS(`input[name="confirm"]`)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("main table")),
		chromedp.Click(chromedp.CSS(`a[href="/admin/deadletters?consumer=inventory"]`)),
		chromedp.WaitVisible(bulk),
		chromedp.Click(bulk),
		chromedp.WaitVisible(count),
	))
	conf, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main p")))
	require.NoError(t, err)
	require.Contains(t, conf, "2 dead letters match consumer inventory")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.Search(`//a[text()="Cancel"]`)),
		chromedp.WaitVisible(bulk),
	))
	back, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, base+"/deadletters?consumer=inventory", back)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(bulk),
		chromedp.WaitVisible(count),
		chromedp.SendKeys(count, "2"),
		chromedp.Click(chromedp.ID("confirm")),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	))
	flash, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".flash")))
	require.NoError(t, err)
	require.Contains(t, flash, "2 dead letters marked for replay")
	after, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Contains(t, after, "/admin/deadletters?consumer=inventory&")
	// In the database: inventory's two are marked, billing's is not.
	res, err := f.replay(bg, "billing")
	require.NoError(t, err)
	require.Len(t, res, 0, "the filtered bulk replay marked another consumer's dead letter")
	res, err = f.replay(bg, "inventory")
	require.NoError(t, err)
	require.Len(t, res, 2)
	for _, id := range inventory {
		require.Equal(t, 1, f.applied(bg, id))
	}
}

// TestBrowserRebinding drives Chromium to a name of another site that
// resolves to this machine (DNS rebinding): to the browser, that site's
// page and the admin page are the same origin, but the page on that name
// can neither read the admin page nor delete a dead letter through it, and
// the admin page itself is refused there.
func TestBrowserRebinding(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	f := postgres(t)
	s := seed(t, f)
	bg := context.Background()
	var victim int64 // billing's replayable dead letter, for the rebinding page to delete
	dls, err := f.store.DeadLetterList(bg, "billing", 10)
	require.NoError(t, err)
	for _, d := range dls {
		if d.MessageID == s.dlID {
			victim = d.ID
		}
	}
	require.Positive(t, victim)
	mux := http.NewServeMux()
	mux.Handle("/admin/", f.handler(&inboxadmin.Config{Prefix: "/admin", Authorize: allowAll}))
	// What the rebinding site served from its own name before pointing the
	// name at this machine: a script that reads the page, and a form that
	// deletes a dead letter, both of its own origin.
	mux.HandleFunc("/evil", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><pre id="read"></pre>
<form method="post" action="/admin/deadletters/%d/delete"><button id="go" type="submit">Win a prize</button></form>
<script>fetch("/admin/deadletters?format=json").then(async r => {
  document.getElementById("read").textContent = r.status + " " + await r.text();
  document.body.insertAdjacentHTML("beforeend", '<p id="done">read</p>');
});</script>`, victim)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	// The rebinding site, under its own name: its read and its delete are
	// refused with 421, and so is the page itself.
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	evil := "http://" + rebindName + ":" + port
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(evil+"/evil"),
		chromedp.WaitVisible(chromedp.ID("done")),
	))
	read, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("read")))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(read, "421 "), read)
	require.Contains(t, read, "not one this page serves")
	require.NotContains(t, read, s.dlID)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("go")),
		chromedp.WaitVisible(chromedp.CSS("main h1")), // the answer to the POST, whatever it is
	))
	refused, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
	require.NoError(t, err)
	require.Contains(t, refused, "421: host")
	require.Contains(t, refused, rebindName)
	_, err = f.store.DeadLetterGet(bg, victim)
	require.NoError(t, err, "the rebinding site deleted a dead letter")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(evil+"/admin/deadletters"),
		chromedp.WaitVisible(chromedp.CSS("main h1")),
	))
	page, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
	require.NoError(t, err)
	require.Contains(t, page, "421")
	require.NotContains(t, page, s.dlID)
}

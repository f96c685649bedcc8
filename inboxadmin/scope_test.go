package inboxadmin_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxadmin"
)

// The tests of this file check that every action of the page acts on
// exactly what the page showed: a filter travels through every link and
// form, Cancel returns to the view it came from, and a set that changed
// after its confirmation is not acted on beyond what was shown.

// hrefOf returns the target of the link whose text starts with text.
func hrefOf(t *testing.T, body, text string) string {
	t.Helper()
	m := regexp.MustCompile(`href="([^"]*)"[^>]*>` + regexp.QuoteMeta(text)).FindStringSubmatch(body)
	require.Equal(t, 2, len(m), "no link %q in:\n%s", text, body)
	return html.UnescapeString(m[1])
}

// formOf returns the action and the hidden fields of the page's POST form
// whose action ends with suffix.
func formOf(t *testing.T, body, suffix string) (string, url.Values) {
	t.Helper()
	forms := regexp.MustCompile(`(?s)<form method="post" action="([^"]*)"[^>]*>(.*?)</form>`).FindAllStringSubmatch(body, -1)
	for _, m := range forms {
		action := html.UnescapeString(m[1])
		if !regexp.MustCompile(regexp.QuoteMeta(suffix) + `$`).MatchString(action) {
			continue
		}
		v := url.Values{}
		for _, in := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(m[2], -1) {
			v.Add(html.UnescapeString(in[1]), html.UnescapeString(in[2]))
		}
		return action, v
	}
	t.Fatalf("no form posting to …%s in:\n%s", suffix, body)
	return "", nil
}

// TestFilteredBulkReplay follows the links of a filtered dead-letter list:
// the bulk replay's confirmation counts the filtered letters only, Cancel
// returns to the filtered list, and confirming marks the filtered letters
// only.
func TestFilteredBulkReplay(t *testing.T) {
	t.Parallel()
	for _, mk := range fixtures(t) {
		f := mk(t)
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			seed(t, f) // billing: one replayable dead letter, one without an id
			for range 2 {
				require.NoError(t, f.deadLetter(ctx, inbox.DeadLetterParams{Consumer: "inventory", Message: inbox.Message{ID: newID()},
					Err: inbox.Permanent(errors.New("unknown sku")), Attempts: 2}))
			}
			h := f.handler(&inboxadmin.Config{Prefix: "/admin", Authorize: allowAll})
			mux := http.NewServeMux()
			mux.Handle("/admin/", h)
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)

			view := "/admin/deadletters?consumer=billing&limit=50"
			resp, body := get(t, srv.URL+view, "text/html")
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			link := hrefOf(t, body, "Replay all that match")
			u, err := url.Parse(link)
			require.NoError(t, err)
			require.Equal(t, "/admin/deadletters/bulk-replay", u.Path)
			require.Equal(t, url.Values{"consumer": {"billing"}, "limit": {"50"}}, u.Query())

			conf := getJSON[inboxadmin.BulkReplayJSON](t, srv.URL+link+"&format=json")
			require.Equal(t, 1, conf.Count, "billing has one replayable dead letter; inventory's two are not the page's")
			resp, body = get(t, srv.URL+link, "text/html")
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.Equal(t, view, hrefOf(t, body, "Cancel"))
			action, form := formOf(t, body, "/deadletters/bulk-replay")
			require.Equal(t, "billing", form.Get("consumer"))
			form.Set("confirm", "1")
			resp, body = post(t, srv.URL+action, form, nil)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
			back, err := url.Parse(resp.Header.Get("Location"))
			require.NoError(t, err)
			require.Equal(t, "/admin/deadletters", back.Path)
			require.Equal(t, "billing", back.Query().Get("consumer"))
			require.Equal(t, "50", back.Query().Get("limit"))

			res, err := f.replay(ctx, "inventory")
			require.NoError(t, err)
			require.Len(t, res, 0, "another consumer's dead letters were marked")
			res, err = f.replay(ctx, "billing")
			require.NoError(t, err)
			require.Len(t, res, 1)
		})
	}
}

// TestBulkReplayActsOnWhatWasShown: a dead letter that arrives between the
// confirmation and the POST is not marked; a POST that names letters outside
// its filter marks none of them; a link that lost its filter is refused, not
// widened to every consumer.
func TestBulkReplayActsOnWhatWasShown(t *testing.T) {
	t.Parallel()
	for _, mk := range fixtures(t) {
		f := mk(t)
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := seed(t, f)
			srv := httptest.NewServer(f.handler(&inboxadmin.Config{Authorize: allowAll}))
			t.Cleanup(srv.Close)

			// The broken link of the probe: the filter's '=' escaped.
			resp, body := get(t, srv.URL+"/deadletters/bulk-replay?consumer%3dbilling", "")
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			require.Contains(t, body, "consumer=billing")

			resp, body = get(t, srv.URL+"/deadletters/bulk-replay?consumer=billing", "text/html")
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			action, form := formOf(t, body, "/deadletters/bulk-replay")
			// A new dead letter of billing after the confirmation.
			late := newID()
			require.NoError(t, f.deadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: late},
				Err: inbox.Permanent(errors.New("late")), Attempts: 1}))
			form.Set("confirm", "1")
			resp, body = post(t, srv.URL+action, form, map[string]string{"Accept": "application/json"})
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.Equal(t, int64(1), decode[inboxadmin.ReplayJSON](t, []byte(body)).Marked)
			res, err := f.replay(ctx, "billing")
			require.NoError(t, err)
			require.Len(t, res, 1, "only the letter the confirmation showed")
			require.Equal(t, s.dlID, res[0].DeadLetter.MessageID)

			// A POST with no list of what was shown is refused.
			resp, body = post(t, srv.URL+"/deadletters/bulk-replay", url.Values{"consumer": {"billing"}, "confirm": {"1"}}, nil)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			// A POST naming another consumer's letter under billing's filter
			// marks nothing of it.
			require.NoError(t, f.deadLetter(ctx, inbox.DeadLetterParams{Consumer: "inventory", Message: inbox.Message{ID: newID()},
				Err: inbox.Permanent(errors.New("unknown sku")), Attempts: 1}))
			inv, err := f.store.DeadLetterList(ctx, "inventory", 10)
			require.NoError(t, err)
			require.Len(t, inv, 1)
			resp, body = post(t, srv.URL+"/deadletters/bulk-replay", url.Values{"consumer": {"billing"}, "ids": {strconv.FormatInt(inv[0].ID, 10)}, "confirm": {"1"}},
				map[string]string{"Accept": "application/json"})
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.Equal(t, int64(0), decode[inboxadmin.ReplayJSON](t, []byte(body)).Marked)
			res, err = f.replay(ctx, "inventory")
			require.NoError(t, err)
			require.Len(t, res, 0)
		})
	}
}

// TestViewsRoundTrip: the dead letter's pages, the stuck effects' resolve
// page and the outbox's actions come back to the view they were opened
// from, filter and all.
func TestViewsRoundTrip(t *testing.T) {
	t.Parallel()
	f := postgres(t)
	s := seed(t, f)
	ctx := context.Background()
	require.NoError(t, f.exec(ctx, `UPDATE {inbox_effects} SET started_at = now() - interval '2 hours'`))
	srv := httptest.NewServer(f.handler(&inboxadmin.Config{Authorize: allowAll}))
	t.Cleanup(srv.Close)

	// The list, filtered; the dead letter; its delete confirmation; its
	// replay confirmation: each Cancel or Back returns to the same list.
	view := "/deadletters?consumer=billing&reason=permanent"
	_, body := get(t, srv.URL+view, "text/html")
	dls := getJSON[inboxadmin.DeadLettersJSON](t, srv.URL+view)
	require.Len(t, dls.DeadLetters, 1)
	id := dls.DeadLetters[0].ID
	detail := hrefOf(t, body, strconv.FormatInt(id, 10)+"<")
	resp, body := get(t, srv.URL+detail, "text/html")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, view, hrefOf(t, body, "Back to the list"))
	del := hrefOf(t, body, "Delete…")
	resp, body = get(t, srv.URL+del, "text/html")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, s.dlID, "the confirmation shows what it deletes")
	require.Equal(t, detail, hrefOf(t, body, "Cancel"))
	replay := hrefOf(t, body, "Cancel")
	_, body = get(t, srv.URL+replay, "text/html")
	replayConf := hrefOf(t, body, "Replay…")
	_, body = get(t, srv.URL+replayConf, "text/html")
	require.Equal(t, detail, hrefOf(t, body, "Cancel"))
	action, form := formOf(t, body, "/replay")
	resp, _ = post(t, srv.URL+action, form, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("/deadletters/%d", id), loc.Path)
	require.Equal(t, "billing", loc.Query().Get("consumer"))
	require.Equal(t, "permanent", loc.Query().Get("reason"))
	// Deleting returns to the filtered list.
	_, body = get(t, srv.URL+del, "text/html")
	action, form = formOf(t, body, "/delete")
	resp, _ = post(t, srv.URL+action, form, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc, err = url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "/deadletters", loc.Path)
	require.Equal(t, "billing", loc.Query().Get("consumer"))
	require.Equal(t, "permanent", loc.Query().Get("reason"))
	require.Equal(t, "deleted", loc.Query().Get("done"))

	// The stuck effects of shipping, older than an hour: Resolve… and its
	// Cancel, and the resolution, come back to that view.
	view = "/effects?consumer=shipping&older=1h"
	_, body = get(t, srv.URL+view, "text/html")
	resolve := hrefOf(t, body, "Resolve…")
	_, body = get(t, srv.URL+resolve, "text/html")
	require.Equal(t, view, hrefOf(t, body, "Cancel"))
	action, form = formOf(t, body, "/effects/resolve")
	form.Set("state", "failed")
	form.Set("confirm", "label")
	resp, body = post(t, srv.URL+action, form, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	loc, err = url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "/effects", loc.Path)
	require.Equal(t, "shipping", loc.Query().Get("consumer"))
	require.Equal(t, "1h", loc.Query().Get("older"))

	// Parking an event from the pending list returns to the pending list.
	view = "/outbox?state=pending&limit=20"
	_, body = get(t, srv.URL+view, "text/html")
	action, form = formOf(t, body, "/park")
	require.Contains(t, action, s.eventID)
	resp, _ = post(t, srv.URL+action, form, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc, err = url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "/outbox", loc.Path)
	require.Equal(t, "pending", loc.Query().Get("state"))
	require.Equal(t, "20", loc.Query().Get("limit"))
	require.Equal(t, "parked", getJSON[inboxadmin.OutboxEventJSON](t, srv.URL+"/outbox/"+s.eventID).State)
}

// TestResolveOnlyWhatIsStuck: the resolve page shows the stored step, and
// a resolution is refused for a step that is not stuck (it may still be
// running) or that was attempted again since the page showed it.
func TestResolveOnlyWhatIsStuck(t *testing.T) {
	t.Parallel()
	f := sqlite(t)
	s := seed(t, f)
	srv := httptest.NewServer(f.handler(&inboxadmin.Config{Authorize: allowAll})) // the step started just now
	t.Cleanup(srv.Close)
	key := url.Values{"consumer": {"shipping"}, "message_id": {s.stuckID}, "step": {"label"}}

	resp, body := get(t, srv.URL+"/effects/resolve?"+url.Values{"consumer": {"shipping"}, "message_id": {s.stuckID}, "step": {"nope"}}.Encode(), "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	form := url.Values{"state": {"failed"}, "confirm": {"label"}, "attempts": {"1"}}
	for k, v := range key {
		form[k] = v
	}
	resp, body = post(t, srv.URL+"/effects/resolve", form, nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode, body)
	require.Contains(t, body, "not stuck")

	later := f.handler(&inboxadmin.Config{Authorize: allowAll, Now: later})
	srv2 := httptest.NewServer(later)
	t.Cleanup(srv2.Close)
	form.Set("attempts", "2")
	resp, body = post(t, srv2.URL+"/effects/resolve", form, nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode, body)
	require.Contains(t, body, "attempted again")
	form.Set("attempts", "1")
	resp, body = post(t, srv2.URL+"/effects/resolve", form, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
}

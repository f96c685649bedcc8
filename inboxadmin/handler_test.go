package inboxadmin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxadmin"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// client is an HTTP client that does not follow redirects, so that a
// test sees the 303 after a write.
var client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func get(t *testing.T, u string, accept string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// post sends a same-origin form POST, as the page's own forms do.
func post(t *testing.T, u string, form url.Values, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return do(t, req)
}

func getJSON[T any](t *testing.T, u string) T {
	t.Helper()
	resp, body := get(t, u, "application/json")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var v T
	require.NoError(t, json.Unmarshal([]byte(body), &v), body)
	return v
}

func TestPages(t *testing.T) {
	t.Parallel()
	for _, mk := range fixtures(t) {
		f := mk(t)
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			s := seed(t, f)
			h := f.handler(&inboxadmin.Config{Prefix: "/admin", Now: later})
			mux := http.NewServeMux()
			mux.Handle("/admin/", h)
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			base := srv.URL + "/admin"

			// Every page answers HTML with the security headers, and links
			// under the prefix.
			for _, p := range []string{"/", "/deadletters", "/deadletters?consumer=billing&reason=permanent", "/effects", "/outbox", "/outbox?state=parked",
				"/deadletters/bulk-replay?consumer=billing", "/effects/resolve?consumer=shipping&message_id=" + s.stuckID + "&step=label", "/outbox/" + s.eventID} {
				resp, body := get(t, base+p, "text/html")
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", p, body)
				require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
				require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
				require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
				require.Contains(t, body, `href="/admin/static/admin.css"`)
				require.NotContains(t, body, "<script")
			}
			resp, _ := get(t, base, "")
			require.Equal(t, "/admin/", resp.Header.Get("Location"))
			resp, body := get(t, base+"/static/admin.css", "")
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Contains(t, body, "table")
			resp, _ = get(t, base+"/nope", "")
			require.Equal(t, http.StatusNotFound, resp.StatusCode)
			resp, _ = get(t, base+"/deadletters/abc", "")
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			resp, _ = get(t, base+"/deadletters/999999", "")
			require.Equal(t, http.StatusNotFound, resp.StatusCode)
			resp, _ = get(t, base+"/deadletters?consumer=bad%00name", "")
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			resp, _ = get(t, base+"/outbox/not-a-uuid", "")
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)

			// The overview's JSON: rows, coverage, headroom, dead letters,
			// stuck effects and the outbox.
			ov := getJSON[inboxadmin.OverviewJSON](t, base+"/?format=json")
			require.Len(t, ov.Consumers, 2)
			billing, shipping := ov.Consumers[0], ov.Consumers[1]
			require.Equal(t, "billing", billing.Consumer)
			require.Equal(t, int64(2), billing.Rows)
			require.Equal(t, 2, billing.DeadLetters)
			require.True(t, billing.CoverageS >= 3600, "an hour ahead, the rows are over an hour old: %v", billing.CoverageS)
			require.Equal(t, billing.CoverageS-ov.ReplayHorizonS, billing.HeadroomS)
			require.True(t, billing.HeadroomS < 0, "coverage of an hour is short of the 14d horizon")
			require.Equal(t, "shipping", shipping.Consumer)
			require.Equal(t, 1, shipping.StuckEffects)
			require.NotNil(t, ov.Outbox)
			require.Equal(t, int64(1), ov.Outbox.Pending)
			require.False(t, ov.Writable)

			// Payloads and header values are redacted by default.
			dls := getJSON[inboxadmin.DeadLettersJSON](t, base+"/deadletters?consumer=billing&reason=permanent")
			require.Len(t, dls.DeadLetters, 1)
			dl := dls.DeadLetters[0]
			require.Equal(t, s.dlID, dl.MessageID)
			require.True(t, dl.PayloadRedacted)
			require.Equal(t, "", dl.Payload)
			require.Equal(t, "(redacted)", dl.Headers["authorization"])
			_, body = get(t, fmt.Sprintf("%s/deadletters/%d", base, dl.ID), "text/html")
			require.NotContains(t, body, "4111-secret")
			require.NotContains(t, body, "secret-token")
			require.Contains(t, body, "redacted")
			one := getJSON[inboxadmin.DeadLettersJSON](t, base+"/deadletters?q="+s.dlID[len(s.dlID)-12:])
			require.Len(t, one.DeadLetters, 1)

			// Writes are refused without an Authorize hook, and no action
			// button is rendered.
			require.NotContains(t, body, `id="replay"`)
			resp, body = post(t, fmt.Sprintf("%s/deadletters/%d/replay", base, dl.ID), nil, nil)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
			require.Contains(t, body, "writes are off")

			// With ShowPayloads the payload shows.
			hp := f.handler(&inboxadmin.Config{ShowPayloads: true})
			rec := httptest.NewRecorder()
			hp.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, fmt.Sprintf("http://localhost/deadletters/%d?format=json", dl.ID), nil))
			require.Equal(t, http.StatusOK, rec.Code)
			var shown inboxadmin.DeadLetterJSON
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &shown))
			require.Equal(t, `{"card":"4111-secret"}`, shown.Payload)
			require.Equal(t, "Bearer secret-token", shown.Headers["authorization"])
		})
	}
}

func TestWrites(t *testing.T) {
	t.Parallel()
	for _, mk := range fixtures(t) {
		f := mk(t)
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := seed(t, f)
			var actions []inboxadmin.Action
			h := f.handler(&inboxadmin.Config{Now: later, Authorize: func(r *http.Request, a inboxadmin.Action) error {
				if r.Header.Get("X-User") == "intruder" {
					return fmt.Errorf("user intruder may not")
				}
				if a.Write() {
					actions = append(actions, a)
				}
				return nil
			}})
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			dls := getJSON[inboxadmin.DeadLettersJSON](t, srv.URL+"/deadletters?consumer=billing&reason=permanent")
			require.Len(t, dls.DeadLetters, 1)
			id := dls.DeadLetters[0].ID
			replayURL := fmt.Sprintf("%s/deadletters/%d/replay", srv.URL, id)

			// A cross-site POST is refused, before any authorization.
			resp, body := post(t, replayURL, nil, map[string]string{"Sec-Fetch-Site": "cross-site"})
			require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
			require.Contains(t, body, "cross-origin")
			req, _ := http.NewRequest(http.MethodPost, replayURL, nil)
			req.Header.Set("Origin", "https://evil.example")
			resp, _ = do(t, req)
			require.Equal(t, http.StatusForbidden, resp.StatusCode)
			// Authorize refuses.
			resp, body = post(t, replayURL, nil, map[string]string{"X-User": "intruder"})
			require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
			require.Contains(t, body, "user intruder may not")
			require.Len(t, actions, 0)

			// The replay: a mark, a 303 to the dead letter, then the
			// application's replay applies it once.
			resp, _ = post(t, replayURL, nil, nil)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			require.Equal(t, fmt.Sprintf("/deadletters/%d?done=marked", id), resp.Header.Get("Location"))
			var again inboxadmin.ReplayJSON
			resp, body = post(t, replayURL, nil, map[string]string{"Accept": "application/json"})
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.NoError(t, json.Unmarshal([]byte(body), &again))
			require.True(t, again.AlreadyMarked)
			res, err := f.replay(ctx, "billing")
			require.NoError(t, err)
			require.Len(t, res, 1)
			require.Equal(t, inbox.Applied, res[0].Outcome)
			require.Equal(t, 1, f.applied(ctx, s.dlID))
			res, err = f.replay(ctx, "billing")
			require.NoError(t, err)
			require.Len(t, res, 0)
			out, err := f.process(ctx, "billing", inbox.Message{ID: s.dlID})
			require.NoError(t, err)
			require.Equal(t, inbox.Duplicate, out)
			require.Equal(t, 1, f.applied(ctx, s.dlID))

			// A bulk replay needs the count typed back.
			for range 3 {
				require.NoError(t, f.deadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: newID()},
					Err: inbox.Permanent(fmt.Errorf("bad")), Attempts: 1}))
			}
			conf := getJSON[inboxadmin.BulkReplayJSON](t, srv.URL+"/deadletters/bulk-replay?consumer=billing")
			require.Equal(t, 3, conf.Count)
			require.Equal(t, s.noIDCount, conf.Skipped)
			require.Len(t, conf.IDs, 3)
			ids := make([]string, len(conf.IDs))
			for i, id := range conf.IDs {
				ids[i] = fmt.Sprint(id)
			}
			bulk := url.Values{"consumer": {"billing"}, "ids": {strings.Join(ids, ",")}, "confirm": {"2"}}
			resp, body = post(t, srv.URL+"/deadletters/bulk-replay", bulk, nil)
			require.Equal(t, http.StatusConflict, resp.StatusCode)
			require.Contains(t, body, "the confirmation listed 3 dead letters")
			bulk.Set("confirm", "3")
			resp, _ = post(t, srv.URL+"/deadletters/bulk-replay", bulk, nil)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			require.Contains(t, resp.Header.Get("Location"), "n=3")
			res, err = f.replay(ctx, "billing")
			require.NoError(t, err)
			require.Len(t, res, 3)

			// Delete the one without an id.
			left := getJSON[inboxadmin.DeadLettersJSON](t, srv.URL+"/deadletters")
			require.Len(t, left.DeadLetters, 1)
			require.False(t, left.DeadLetters[0].Replayable)
			resp, _ = post(t, fmt.Sprintf("%s/deadletters/%d/delete", srv.URL, left.DeadLetters[0].ID), nil, nil)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			require.Len(t, getJSON[inboxadmin.DeadLettersJSON](t, srv.URL+"/deadletters").DeadLetters, 0)

			// Resolve the stuck effect: the step's name typed back.
			form := url.Values{"consumer": {"shipping"}, "message_id": {s.stuckID}, "step": {"label"}, "state": {"failed"}, "confirm": {"lable"}, "attempts": {"1"}}
			resp, _ = post(t, srv.URL+"/effects/resolve", form, nil)
			require.Equal(t, http.StatusConflict, resp.StatusCode)
			form.Set("confirm", "label")
			resp, body = post(t, srv.URL+"/effects/resolve", form, nil)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
			require.Len(t, getJSON[inboxadmin.EffectsJSON](t, srv.URL+"/effects").Effects, 0)
			resp, _ = post(t, srv.URL+"/effects/resolve", form, nil)
			require.Equal(t, http.StatusNotFound, resp.StatusCode)

			// The outbox: park, unpark, retry.
			ev := srv.URL + "/outbox/" + s.eventID
			resp, _ = post(t, ev+"/unpark", nil, nil)
			require.Equal(t, http.StatusConflict, resp.StatusCode)
			resp, _ = post(t, ev+"/park", nil, nil)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			require.Equal(t, "parked", getJSON[inboxadmin.OutboxEventJSON](t, ev).State)
			require.Equal(t, int64(1), getJSON[inboxadmin.OutboxPageJSON](t, srv.URL+"/outbox").Stats.Parked)
			resp, _ = post(t, ev+"/unpark", nil, nil)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			resp, _ = post(t, ev+"/retry", nil, nil)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			require.Equal(t, "pending", getJSON[inboxadmin.OutboxEventJSON](t, ev).State)
			resp, _ = post(t, ev+"/explode", nil, nil)
			require.Equal(t, http.StatusNotFound, resp.StatusCode)

			require.Equal(t, []inboxadmin.Action{inboxadmin.ActionDeadLetterReplay, inboxadmin.ActionDeadLetterReplay, inboxadmin.ActionDeadLetterReplay,
				inboxadmin.ActionDeadLetterReplay, inboxadmin.ActionDeadLetterDelete, inboxadmin.ActionEffectResolve, inboxadmin.ActionEffectResolve,
				inboxadmin.ActionEffectResolve, inboxadmin.ActionOutboxUnpark, inboxadmin.ActionOutboxPark, inboxadmin.ActionOutboxUnpark, inboxadmin.ActionOutboxRetry}, actions)
		})
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	f := sqlite(t)
	s := seed(t, f)
	h := f.handler(&inboxadmin.Config{ReadOnly: true, Authorize: allowAll})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	dls := getJSON[inboxadmin.DeadLettersJSON](t, srv.URL+"/deadletters?reason=permanent")
	require.Len(t, dls.DeadLetters, 1)
	_, body := get(t, fmt.Sprintf("%s/deadletters/%d", srv.URL, dls.DeadLetters[0].ID), "")
	require.NotContains(t, body, "<form method=\"post\"")
	require.Contains(t, body, "read-only")
	for _, p := range []string{fmt.Sprintf("/deadletters/%d/replay", dls.DeadLetters[0].ID), fmt.Sprintf("/deadletters/%d/delete", dls.DeadLetters[0].ID),
		"/outbox/" + s.eventID + "/park", "/effects/resolve", "/deadletters/bulk-replay"} {
		resp, body := post(t, srv.URL+p, nil, map[string]string{"Accept": "application/json"})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, p)
		require.Contains(t, body, "read-only")
	}
	// Nothing changed.
	require.Len(t, getJSON[inboxadmin.DeadLettersJSON](t, srv.URL+"/deadletters").DeadLetters, 2)
	require.Equal(t, "pending", getJSON[inboxadmin.OutboxEventJSON](t, srv.URL+"/outbox/"+s.eventID).State)
}

func TestAuthorizeReads(t *testing.T) {
	t.Parallel()
	f := sqlite(t)
	h := f.handler(&inboxadmin.Config{Authorize: func(r *http.Request, a inboxadmin.Action) error {
		if r.Header.Get("X-User") == "" {
			return fmt.Errorf("sign in first")
		}
		return nil
	}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/?format=json", nil))
	require.Equal(t, http.StatusForbidden, rec.Code)
	require.Contains(t, rec.Body.String(), "sign in first")
	req := httptest.NewRequest(http.MethodGet, "http://localhost/?format=json", nil)
	req.Header.Set("X-User", "ops")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	s := sqlite(t).store
	_, err := inboxadmin.NewHandler(nil, nil)
	require.Error(t, err)
	_, err = inboxadmin.NewHandler(s, &inboxadmin.Config{Prefix: "admin"})
	require.ErrorContains(t, err, "Config.Prefix")
	_, err = inboxadmin.NewHandler(s, &inboxadmin.Config{StuckAfter: -1})
	require.ErrorContains(t, err, "Config.StuckAfter")
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(b, &v), string(b))
	return v
}

// failingOutbox is an Outbox whose every read fails with err.
type failingOutbox struct{ err error }

func (o failingOutbox) OutboxStats(context.Context) (*inboxtype.OutboxStats, error) {
	return nil, o.err
}
func (o failingOutbox) OutboxList(context.Context, string, int) ([]*inboxdriver.OutboxRow, error) {
	return nil, o.err
}
func (o failingOutbox) OutboxGet(context.Context, string) (*inboxdriver.OutboxRow, error) {
	return nil, o.err
}
func (o failingOutbox) OutboxSet(context.Context, string, string) (bool, error) { return false, o.err }

// The page says an error it knows by its meaning in its own words, and
// shows any other as its package worded it.
func TestErrorText(t *testing.T) {
	t.Parallel()
	s := sqlite(t).store
	serve := func(ob inboxadmin.Outbox, path string) *httptest.ResponseRecorder {
		h, err := inboxadmin.NewHandler(s, &inboxadmin.Config{Outbox: ob})
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost"+path, nil))
		return rec
	}

	rec := serve(nil, "/deadletters/987654321?format=json")
	require.Equal(t, http.StatusNotFound, rec.Code)
	answer := decode[struct{ Error string }](t, rec.Body.Bytes())
	require.Equal(t, "not found: it may have been replayed or deleted since the page that linked here was shown", answer.Error)

	for _, c := range []struct {
		err    error
		status int
		want   string
	}{
		{fmt.Errorf("read: %w", inbox.ErrNoOutbox), http.StatusNotImplemented, "the store keeps no outbox"},
		{errors.New("inbox: outbox stats: store unavailable: dial tcp: connection refused"), http.StatusInternalServerError,
			"inbox: outbox stats: store unavailable: dial tcp: connection refused"},
	} {
		rec = serve(failingOutbox{c.err}, "/?format=json")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, c.want, decode[inboxadmin.OverviewJSON](t, rec.Body.Bytes()).OutboxError)

		rec = serve(failingOutbox{c.err}, "/outbox/x?format=json")
		require.Equal(t, c.status, rec.Code)
		require.Equal(t, c.want, decode[struct{ Error string }](t, rec.Body.Bytes()).Error)
	}
}

package inboxadmin_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxadmin"
)

// requireNoControls fails unless s is free of control characters other
// than a newline, a tab, and a carriage return before a newline.
func requireNoControls(t *testing.T, what, s string) {
	t.Helper()
	s = strings.ReplaceAll(s, "\r\n", "\n")
	for i, r := range s {
		if r != '\n' && r != '\t' && (unicode.IsControl(r) || r == '\u202e') {
			from := max(i-40, 0)
			t.Fatalf("%s: the control character %U at %d: %q", what, r, i, s[from:min(i+40, len(s))])
		}
	}
}

// TestNoControlCharacters: text from stored data reaches neither a page nor
// a JSON answer with its control characters raw, whatever the store holds
// (an escape sequence in an error clears a terminal that shows the answer);
// the JSON still decodes to the stored text.
func TestNoControlCharacters(t *testing.T) {
	t.Parallel()
	f := postgres(t)
	ctx := context.Background()
	const (
		errText = "declined \x1b[2J\x1b]0;pwned\x07 \u009b31m\rOVERWRITTEN \u202eevil"
		header  = "v\x1b[31mred\x7f"
		payload = "line 1\r\nline 2\x1b[2J"
	)
	id := newID()
	require.NoError(t, f.deadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Reason: "permanent",
		Message: inbox.Message{ID: id, Payload: []byte(payload), Headers: map[string]string{"x-\x1b[1mkey": header}},
		Err:     inbox.Permanent(errors.New(errText)), Attempts: 1}))
	ev, err := f.enqueue(ctx, "orders", []byte(payload))
	require.NoError(t, err)
	require.NoError(t, f.exec(ctx, `UPDATE {outbox} SET last_error = $1`, errText))
	srv := httptest.NewServer(f.handler(&inboxadmin.Config{ShowPayloads: true, Authorize: allowAll}))
	t.Cleanup(srv.Close)
	dls := getJSON[inboxadmin.DeadLettersJSON](t, srv.URL+"/deadletters")
	require.Len(t, dls.DeadLetters, 1)
	dl := fmt.Sprintf("/deadletters/%d", dls.DeadLetters[0].ID)
	require.Contains(t, dls.DeadLetters[0].Error, errText, "the JSON decodes to the stored text")

	for _, p := range []string{"/deadletters", dl, dl + "/replay", dl + "/delete", "/outbox", "/outbox/" + ev, "/outbox?state="} {
		for _, accept := range []string{"text/html", "application/json"} {
			resp, body := get(t, srv.URL+p, accept)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", p, body)
			requireNoControls(t, p+" "+accept, body)
		}
	}
	// A filter with a control character is refused with a plain message.
	resp, body := get(t, srv.URL+"/deadletters?"+url.Values{"reason": {"a\x1b[2J"}}.Encode(), "")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	requireNoControls(t, "refused filter", body)
}

// TestWording: counts agree with their nouns, and the page names the
// method that replays what it marks, Client.ProcessReplays.
func TestWording(t *testing.T) {
	t.Parallel()
	f := sqlite(t)
	ctx := context.Background()
	id := newID()
	require.NoError(t, f.deadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing",
		Message: inbox.Message{ID: id, Payload: []byte("x")}, Err: inbox.Permanent(errors.New("declined")), Attempts: 1}))
	srv := httptest.NewServer(f.handler(&inboxadmin.Config{Authorize: allowAll}))
	t.Cleanup(srv.Close)
	dls := getJSON[inboxadmin.DeadLettersJSON](t, srv.URL+"/deadletters")
	require.Len(t, dls.DeadLetters, 1)
	dl := fmt.Sprintf("%s/deadletters/%d", srv.URL, dls.DeadLetters[0].ID)

	_, body := get(t, dl, "")
	require.Contains(t, body, "1 byte;")
	require.NotContains(t, body, "1 bytes")
	_, body = get(t, dl+"/replay", "")
	require.Contains(t, body, "1 attempt)")
	require.NotContains(t, body, "1 attempts")
	require.Contains(t, body, "Client.ProcessReplays")
	require.NotContains(t, body, "DeadLetterReplay")
	_, body = get(t, srv.URL+"/deadletters/bulk-replay?consumer=billing", "")
	require.Contains(t, body, "1</strong> dead letter matches")
	require.NotContains(t, body, "dead letters match")

	_, body = get(t, dl+"?done=marked", "")
	require.Contains(t, body, "Client.ProcessReplays")
	require.NotContains(t, body, "DeadLetterReplay")
	_, body = get(t, srv.URL+"/deadletters?done=bulk-marked&n=1", "")
	require.Contains(t, body, "1 dead letter marked for replay")
	require.Contains(t, body, "Client.ProcessReplays")
}

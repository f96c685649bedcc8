package inboxadmin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxadmin"
)

// TestForeignHost: a request whose Host is not one the page serves is
// refused, reads included, so that a page on another site cannot reach it
// through a name that it rebinds to this machine (DNS rebinding): with a
// matching Origin the cross-origin check alone lets it through.
func TestForeignHost(t *testing.T) {
	t.Parallel()
	f := sqlite(t)
	seed(t, f)
	srv := httptest.NewServer(f.handler(&inboxadmin.Config{Authorize: allowAll}))
	t.Cleanup(srv.Close)
	dls := getJSON[inboxadmin.DeadLettersJSON](t, srv.URL+"/deadletters")
	require.Len(t, dls.DeadLetters, 2)
	id := dls.DeadLetters[0].ID

	const evil = "rebind.evil.example:18080"
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/deadletters/%d/delete", srv.URL, id), nil)
	require.NoError(t, err)
	req.Host = evil
	req.Header.Set("Origin", "http://"+evil)
	resp, body := do(t, req)
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, body)
	require.Contains(t, body, "rebind.evil.example")
	require.Contains(t, body, "AllowedHosts")
	for _, accept := range []string{"text/html", "application/json"} {
		req, err = http.NewRequest(http.MethodGet, srv.URL+"/deadletters", nil)
		require.NoError(t, err)
		req.Host = evil
		req.Header.Set("Accept", accept)
		resp, body = do(t, req)
		require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, body)
		require.NotContains(t, body, dls.DeadLetters[0].Consumer+"<", "a refused read shows no data")
	}
	require.Len(t, getJSON[inboxadmin.DeadLettersJSON](t, srv.URL+"/deadletters").DeadLetters, 2, "nothing was deleted")

	// The loopback names and addresses, with or without a port.
	for _, host := range []string{"localhost", "localhost:8080", "127.0.0.1", "127.0.0.2:80", "[::1]:8080", "[::1]"} {
		req, err = http.NewRequest(http.MethodGet, srv.URL+"/?format=json", nil)
		require.NoError(t, err)
		req.Host = host
		resp, body = do(t, req)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", host, body)
	}
	for _, host := range []string{"localhost.evil.example", "127.0.0.1.nip.io", "evil.localhost", "10.0.0.1"} {
		req, err = http.NewRequest(http.MethodGet, srv.URL+"/?format=json", nil)
		require.NoError(t, err)
		req.Host = host
		resp, body = do(t, req)
		require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, "%s: %s", host, body)
	}
}

// TestAllowedHosts: Config.AllowedHosts adds names and addresses, with any
// port or one; "*" answers every host; a malformed entry is refused.
func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	f := sqlite(t)
	h := f.handler(&inboxadmin.Config{AllowedHosts: []string{"Ops.Example.com", "10.0.0.5:8080", "[fd00::1]"}})
	for host, want := range map[string]int{
		"ops.example.com": http.StatusOK, "OPS.EXAMPLE.COM:443": http.StatusOK, "10.0.0.5:8080": http.StatusOK, "[fd00::1]:9": http.StatusOK,
		"10.0.0.5:8081": http.StatusMisdirectedRequest, "10.0.0.5": http.StatusMisdirectedRequest, "example.com": http.StatusMisdirectedRequest,
		"ops.example.com.evil.example": http.StatusMisdirectedRequest, "127.0.0.1:1": http.StatusOK,
	} {
		req := httptest.NewRequest(http.MethodGet, "/?format=json", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, want, rec.Code, "%s: %s", host, rec.Body.String())
	}
	anyHost := f.handler(&inboxadmin.Config{AllowedHosts: []string{"*"}})
	req := httptest.NewRequest(http.MethodGet, "/?format=json", nil)
	req.Host = "whatever.example"
	rec := httptest.NewRecorder()
	anyHost.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)

	for _, bad := range []string{"", "http://ops.example.com/", "ops.example.com/admin", "*.example.com", "ops example", "host:port", "host:0", "a@b"} {
		_, err := inboxadmin.NewHandler(f.store, &inboxadmin.Config{AllowedHosts: []string{bad}})
		require.ErrorContains(t, err, "Config.AllowedHosts", "%q", bad)
	}
}

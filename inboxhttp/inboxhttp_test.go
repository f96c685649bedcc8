package inboxhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxhttp"
	"github.com/txinbox/inbox/internal/effectctx"
)

func TestSetIdempotencyKey(t *testing.T) {
	t.Parallel()
	req, err := http.NewRequest(http.MethodPost, "http://provider.invalid/captures", nil)
	require.NoError(t, err)
	key := inbox.EffectKey("billing", "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b", "capture")
	inboxhttp.SetIdempotencyKey(req, key)
	require.Equal(t, key, req.Header.Get("Idempotency-Key"))
}

func TestTransport(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get(inboxhttp.IdempotencyKeyHeader)+"|"+r.Header.Get("PayPal-Request-Id"))
	}))
	t.Cleanup(srv.Close)
	key := inbox.EffectKey("billing", "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b", "capture")
	withKey := effectctx.With(context.Background(), key)
	got, ok := inbox.EffectKeyFromContext(withKey)
	require.True(t, ok)
	require.Equal(t, key, got, "the context carries the key as Client.Effect passes it")

	send := func(tr http.RoundTripper, ctx context.Context, preset map[string]string) (string, *http.Request) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		require.NoError(t, err)
		for k, v := range preset {
			req.Header.Set(k, v)
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body), req
	}

	got, req := send(&inboxhttp.Transport{}, withKey, nil)
	require.Equal(t, key+"|", got, "the key from the context is sent")
	require.Empty(t, req.Header.Get(inboxhttp.IdempotencyKeyHeader), "the caller's request is not modified")

	got, _ = send(&inboxhttp.Transport{}, context.Background(), nil)
	require.Equal(t, "|", got, "no key in the context, no header")

	got, _ = send(&inboxhttp.Transport{}, withKey, map[string]string{inboxhttp.IdempotencyKeyHeader: "mine"})
	require.Equal(t, "mine|", got, "a header the caller set is kept")

	got, _ = send(&inboxhttp.Transport{Header: "PayPal-Request-Id", Base: http.DefaultTransport}, withKey, nil)
	require.Equal(t, "|"+key, got, "the configured header is used")
}

package inbox

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIdempotencyTransport(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get(IdempotencyKeyHeader)+"|"+r.Header.Get("PayPal-Request-Id"))
	}))
	t.Cleanup(srv.Close)
	key := EffectKey("billing", "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b", "capture")
	withKey := context.WithValue(context.Background(), effectKeyKey{}, key)

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

	got, req := send(&IdempotencyTransport{}, withKey, nil)
	require.Equal(t, key+"|", got, "the key from the context is sent")
	require.Empty(t, req.Header.Get(IdempotencyKeyHeader), "the caller's request is not modified")

	got, _ = send(&IdempotencyTransport{}, context.Background(), nil)
	require.Equal(t, "|", got, "no key in the context, no header")

	got, _ = send(&IdempotencyTransport{}, withKey, map[string]string{IdempotencyKeyHeader: "mine"})
	require.Equal(t, "mine|", got, "a header the caller set is kept")

	got, _ = send(&IdempotencyTransport{Header: "PayPal-Request-Id", Base: http.DefaultTransport}, withKey, nil)
	require.Equal(t, "|"+key, got, "the configured header is used")
}

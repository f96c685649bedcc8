package inbox

import (
	"net/http"
)

// IdempotencyKeyHeader is the HTTP header that carries an idempotency key,
// as payment providers and the IETF Idempotency-Key draft name it.
const IdempotencyKeyHeader = "Idempotency-Key"

// SetIdempotencyKey sets req's Idempotency-Key header to key, the key an
// EffectFunc receives.
func SetIdempotencyKey(req *http.Request, key string) {
	req.Header.Set(IdempotencyKeyHeader, key)
}

// IdempotencyTransport is an http.RoundTripper that sets the idempotency
// key of every request made with the context Client.Effect passes to an
// EffectFunc, so that an EffectFunc only has to build its request with
// that context:
//
//	httpClient := &http.Client{Transport: &inbox.IdempotencyTransport{}}
//	…
//	res, err := client.Effect(ctx, msg, "capture", func(ctx context.Context, key string) ([]byte, error) {
//		req, err := http.NewRequestWithContext(ctx, "POST", captureURL, body)
//		…
//		resp, err := httpClient.Do(req) // carries Idempotency-Key: key
//	}, nil)
//
// A request that already has the header, or whose context carries no key,
// is sent unchanged. The request is cloned before its header is set, as the
// RoundTripper contract asks.
type IdempotencyTransport struct {
	// Base sends the requests. Defaults to http.DefaultTransport.
	Base http.RoundTripper
	// Header is the header to set, for providers that name it otherwise
	// (such as "PayPal-Request-Id"). Defaults to IdempotencyKeyHeader.
	Header string
}

// RoundTrip implements http.RoundTripper.
func (t *IdempotencyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	header := t.Header
	if header == "" {
		header = IdempotencyKeyHeader
	}
	key, ok := EffectKeyFromContext(req.Context())
	if !ok || req.Header.Get(header) != "" {
		return base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set(header, key)
	return base.RoundTrip(req)
}

// Package inboxhttp sends the idempotency key of an inbox effect
// (inbox.Client.Effect) with an HTTP request, in the header that payment
// providers and the IETF Idempotency-Key draft name, so that the provider
// deduplicates a call that Effect makes again after a crash.
//
// Either set the header on each request with SetIdempotencyKey, from the
// key the EffectFunc receives, or send the requests through a client whose
// Transport sets it from the request's context:
//
//	httpClient := &http.Client{Transport: &inboxhttp.Transport{}}
//	…
//	res, err := client.Effect(ctx, msg, "capture", func(ctx context.Context, key string) ([]byte, error) {
//		req, err := http.NewRequestWithContext(ctx, "POST", captureURL, body)
//		…
//		resp, err := httpClient.Do(req) // carries Idempotency-Key: key
//	}, nil)
package inboxhttp

import (
	"net/http"

	"github.com/txinbox/inbox"
)

// IdempotencyKeyHeader is the HTTP header that carries an idempotency key,
// as payment providers and the IETF Idempotency-Key draft name it.
const IdempotencyKeyHeader = "Idempotency-Key"

// SetIdempotencyKey sets req's Idempotency-Key header to key, the key an
// inbox.EffectFunc receives.
func SetIdempotencyKey(req *http.Request, key string) {
	req.Header.Set(IdempotencyKeyHeader, key)
}

// Transport is an http.RoundTripper that sets the idempotency key of
// every request made with the context inbox.Client.Effect passes to an
// EffectFunc (inbox.EffectKeyFromContext), so that an EffectFunc only has
// to build its request with that context.
//
// A request that already has the header, or whose context carries no key,
// is sent unchanged. The request is cloned before its header is set, as the
// RoundTripper contract asks.
type Transport struct {
	// Base sends the requests. Defaults to http.DefaultTransport.
	Base http.RoundTripper
	// Header is the header to set, for providers that name it otherwise
	// (such as "PayPal-Request-Id"). Defaults to IdempotencyKeyHeader.
	Header string
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	header := t.Header
	if header == "" {
		header = IdempotencyKeyHeader
	}
	key, ok := inbox.EffectKeyFromContext(req.Context())
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

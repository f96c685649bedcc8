// Package effectctx carries an effect's idempotency key in a context:
// inbox.Client.Effect sets it for its EffectFunc, and
// inbox.EffectKeyFromContext reads it. It is a package of its own so that
// the tests of packages that read the key (inboxhttp) can make such a
// context without a store.
package effectctx

import "context"

type keyKey struct{}

// With returns a context that carries the idempotency key.
func With(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyKey{}, key)
}

// Key returns the idempotency key that ctx carries.
func Key(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyKey{}).(string)
	return k, ok
}

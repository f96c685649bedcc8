package inboxwatermill

import "context"

// txKey is the context key of a transaction of type TTx: each type has its
// own, so that TxFromContext[pgx.Tx] never finds a *sql.Tx.
type txKey[TTx any] struct{}

// WithTx returns a copy of ctx that carries tx. Middleware puts the inbox
// transaction in the context of the message it hands the handler; a
// producer outside a handler puts its own business transaction in the
// context of the messages it gives a Publisher.
func WithTx[TTx any](ctx context.Context, tx TTx) context.Context {
	return context.WithValue(ctx, txKey[TTx]{}, tx)
}

// TxFromContext returns the transaction of type TTx that ctx carries, and
// whether it carries one. Inside a handler wrapped by Middleware,
// TxFromContext[TTx](msg.Context()) is the transaction that holds the
// message's inbox row: do the handler's database work through it, and
// neither commit nor roll it back.
func TxFromContext[TTx any](ctx context.Context) (TTx, bool) {
	tx, ok := ctx.Value(txKey[TTx]{}).(TTx)
	return tx, ok
}

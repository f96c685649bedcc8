package chaos

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/inbox"
)

// A transaction of the chaos handler credits up to a batch's worth of
// accounts, out of a few dozen that every consumer shares. Crediting them
// in message order lets two transactions take the same rows in opposite
// orders: Postgres then finds the deadlock only after deadlock_timeout (1s
// by default), and one of the two retries. On an SQS queue, where any
// consumer receives any account's events, a backlog makes every batch full
// and most of them collide: the consumers then apply a few dozen events a
// second instead of hundreds, and a short run cannot drain. (Kafka keys the
// events by account, so its partitions share no rows.) So each
// transaction locks its accounts first, in id order, as a handler that
// updates shared rows in batches should.

// txAccounts are the accounts of one transaction's messages, sorted and
// distinct, and whether the transaction has locked them yet.
type txAccounts struct {
	ids    []int
	locked bool
}

type txAccountsKey struct{}

// withAccounts returns ctx carrying the accounts of msgs. It is called from
// the observer's TxStart, whose context the client passes to the handler of
// the same transaction.
func withAccounts(ctx context.Context, msgs []inbox.Message) context.Context {
	ids := accountsOf(msgs)
	if len(ids) < 2 {
		return ctx
	}
	return context.WithValue(ctx, txAccountsKey{}, &txAccounts{ids: ids})
}

// accountsOf returns the distinct accounts that msgs credit, sorted.
// Payloads that do not parse are left to the handler to reject.
func accountsOf(msgs []inbox.Message) []int {
	ids := make([]int, 0, len(msgs))
	for _, m := range msgs {
		var p payload
		if json.Unmarshal(m.Payload, &p) == nil {
			ids = append(ids, p.Account)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// lockAccountsSQL locks the rows of the given accounts in id order: the
// rows are locked as the sort returns them.
func lockAccountsSQL(accounts string) string {
	return `SELECT id FROM ` + accounts + ` WHERE id = ANY($1) ORDER BY id FOR UPDATE`
}

// lockAccounts locks the accounts of the transaction that ctx belongs to,
// once, before its first credit.
func lockAccounts(ctx context.Context, tx pgx.Tx, accounts string) error {
	a, ok := ctx.Value(txAccountsKey{}).(*txAccounts)
	if !ok || a.locked {
		return nil
	}
	if _, err := tx.Exec(ctx, lockAccountsSQL(accounts), a.ids); err != nil {
		return err
	}
	a.locked = true
	return nil
}

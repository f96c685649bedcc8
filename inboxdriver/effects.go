package inboxdriver

import (
	"context"
	"time"

	"github.com/txinbox/inbox/inboxtype"
)

// EffectStore is the ledger of remote side effects: calls to a payment
// provider, a mail service or another cluster, which the inbox transaction
// cannot roll back. It is optional: a Driver that keeps the ledger also
// implements EffectStore, and the client finds it with a type assertion.
// It is kept apart from Driver so that a store can be written, and pass
// the conformance suite's other tests, before it has a ledger.
//
// Every method runs in its own short transaction, outside the message's
// transaction, and commits before it returns: a ledger entry must survive
// the rollback of the handler that wrote it. Entries are keyed by
// (consumer, message id, step).
type EffectStore interface {
	// EffectBegin records an attempt of a step as started, unless the
	// step's entry says it must not be called, and returns the entry as it
	// stands after the begin. In one transaction it:
	//
	//   - inserts a new entry in state inboxtype.EffectStarted with one attempt, and
	//     reports started;
	//   - or, when the entry exists, locks it and:
	//   - returns it unchanged if it is inboxtype.EffectDone;
	//   - restarts it (state inboxtype.EffectStarted, attempts + 1, StartedAt = p.Now)
	//     and reports started if it is inboxtype.EffectFailed, or if it is
	//     inboxtype.EffectStarted and p.RetryStarted is true;
	//   - returns it unchanged if it is inboxtype.EffectStarted and p.RetryStarted is
	//     false: the outcome of its earlier attempt is unknown.
	//
	// The caller calls the step only when started is true.
	EffectBegin(ctx context.Context, p *EffectBeginParams) (e *inboxtype.EffectEntry, started bool, err error)

	// inboxtype.EffectDone records a started step as done, with the call's result.
	// It reports false, and changes nothing, when there is no entry in state
	// inboxtype.EffectStarted under the key (it was forgotten, purged or resolved
	// while the call ran).
	EffectDone(ctx context.Context, p *EffectDoneParams) (bool, error)

	// inboxtype.EffectFailed records that the started attempt of a step certainly
	// did not take effect at the provider, so that the step may be called
	// again whatever its declaration (state inboxtype.EffectFailed). It reports false,
	// and changes nothing, when there is no entry in state inboxtype.EffectStarted
	// under the key.
	EffectFailed(ctx context.Context, p *EffectKeyParams) (bool, error)

	// EffectResolve settles, for an operator, a step left in state
	// inboxtype.EffectStarted: p.State inboxtype.EffectDone records that the call took effect,
	// with p.Result; p.State inboxtype.EffectFailed records that it did not, so that
	// the next attempt calls again. It reports false, and changes nothing,
	// when there is no entry in state inboxtype.EffectStarted under the key.
	EffectResolve(ctx context.Context, p *EffectResolveParams) (bool, error)

	// EffectList lists ledger entries, oldest StartedAt first. p.MessageID,
	// when set, is canonical, and p.Limit is positive.
	EffectList(ctx context.Context, p *inboxtype.EffectListParams) ([]*inboxtype.EffectEntry, error)
}

// MaxStepLen is the longest step name, in bytes, that the ledger holds.
const MaxStepLen = 128

// EffectKeyParams name one ledger entry.
type EffectKeyParams struct {
	Consumer string
	ID       string
	Step     string
}

// EffectBeginParams are the parameters of EffectBegin.
type EffectBeginParams struct {
	EffectKeyParams
	// Now is the StartedAt of the attempt.
	Now time.Time
	// RetryStarted lets an entry found in state inboxtype.EffectStarted start again:
	// the provider honours the idempotency key, so calling again with the
	// same key cannot apply the effect twice.
	RetryStarted bool
}

// EffectDoneParams are the parameters of inboxtype.EffectDone.
type EffectDoneParams struct {
	EffectKeyParams
	Result []byte
	// Now is the DoneAt of the entry.
	Now time.Time
}

// EffectResolveParams are the parameters of EffectResolve.
type EffectResolveParams struct {
	EffectKeyParams
	// State is inboxtype.EffectDone or inboxtype.EffectFailed.
	State inboxtype.EffectState
	// Result is stored when State is inboxtype.EffectDone.
	Result []byte
	// Now is the DoneAt of an entry resolved as done.
	Now time.Time
}

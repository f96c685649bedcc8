package inboxdriver

import (
	"context"
	"time"
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
	//   - inserts a new entry in state EffectStarted with one attempt, and
	//     reports started;
	//   - or, when the entry exists, locks it and:
	//   - returns it unchanged if it is EffectDone;
	//   - restarts it (state EffectStarted, attempts + 1, StartedAt = p.Now)
	//     and reports started if it is EffectFailed, or if it is
	//     EffectStarted and p.RetryStarted is true;
	//   - returns it unchanged if it is EffectStarted and p.RetryStarted is
	//     false: the outcome of its earlier attempt is unknown.
	//
	// The caller calls the step only when started is true.
	EffectBegin(ctx context.Context, p *EffectBeginParams) (e *EffectEntry, started bool, err error)

	// EffectDone records a started step as done, with the call's result.
	// It reports false, and changes nothing, when there is no entry in state
	// EffectStarted under the key (it was forgotten, purged or resolved
	// while the call ran).
	EffectDone(ctx context.Context, p *EffectDoneParams) (bool, error)

	// EffectFailed records that the started attempt of a step certainly
	// did not take effect at the provider, so that the step may be called
	// again whatever its declaration (state EffectFailed). It reports false,
	// and changes nothing, when there is no entry in state EffectStarted
	// under the key.
	EffectFailed(ctx context.Context, p *EffectKeyParams) (bool, error)

	// EffectResolve settles, for an operator, a step left in state
	// EffectStarted: p.State EffectDone records that the call took effect,
	// with p.Result; p.State EffectFailed records that it did not, so that
	// the next attempt calls again. It reports false, and changes nothing,
	// when there is no entry in state EffectStarted under the key.
	EffectResolve(ctx context.Context, p *EffectResolveParams) (bool, error)

	// EffectList lists ledger entries, oldest StartedAt first.
	EffectList(ctx context.Context, p *EffectListParams) ([]*EffectEntry, error)
}

// EffectState is the state of a ledger entry.
type EffectState string

// The states of a ledger entry.
const (
	// EffectStarted is a step whose latest attempt was recorded before its
	// call and whose result was not recorded: the call may or may not have
	// taken effect at the provider.
	EffectStarted EffectState = "started"
	// EffectFailed is a step whose latest attempt certainly did not take
	// effect at the provider. It may be called again.
	EffectFailed EffectState = "failed"
	// EffectDone is a step whose call took effect and whose result is
	// stored. It is never called again.
	EffectDone EffectState = "done"
)

// MaxStepLen is the longest step name, in bytes, that the ledger holds.
const MaxStepLen = 128

// EffectEntry is one entry of the effects ledger.
type EffectEntry struct {
	Consumer string
	// MessageID is the canonical id of the message.
	MessageID string
	// Step names the call within the message's handler, such as "capture".
	Step  string
	State EffectState
	// Result is what the call returned, once the entry is EffectDone.
	Result []byte
	// Attempts counts the attempts that were started.
	Attempts int
	// StartedAt is when the latest attempt was started.
	StartedAt time.Time
	// DoneAt is when the entry became EffectDone; zero before.
	DoneAt time.Time
}

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
	// RetryStarted lets an entry found in state EffectStarted start again:
	// the provider honours the idempotency key, so calling again with the
	// same key cannot apply the effect twice.
	RetryStarted bool
}

// EffectDoneParams are the parameters of EffectDone.
type EffectDoneParams struct {
	EffectKeyParams
	Result []byte
	// Now is the DoneAt of the entry.
	Now time.Time
}

// EffectResolveParams are the parameters of EffectResolve.
type EffectResolveParams struct {
	EffectKeyParams
	// State is EffectDone or EffectFailed.
	State EffectState
	// Result is stored when State is EffectDone.
	Result []byte
	// Now is the DoneAt of an entry resolved as done.
	Now time.Time
}

// EffectListParams filter a listing of ledger entries. Zero fields do not
// filter.
type EffectListParams struct {
	Consumer string
	// ID is a canonical message id.
	ID    string
	State EffectState
	// StartedBefore keeps the entries whose latest attempt started strictly
	// before it.
	StartedBefore time.Time
	// Limit bounds the list; it is always positive.
	Limit int
}

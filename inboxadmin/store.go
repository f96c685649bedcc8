package inboxadmin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// Store is what the admin page reads and changes of an inbox. It names
// only the operations the pages use, in the page's own words, so that it
// stays the same when the client's API moves: FromClient adapts an
// *inbox.Client to it.
type Store interface {
	// Stats reports the rows of each consumer.
	Stats(ctx context.Context) (*inboxtype.Stats, error)
	// ReplayHorizon is the longest window over which a message may be
	// delivered again (inbox.Config.ReplayHorizon).
	ReplayHorizon() time.Duration

	// DeadLetterList lists dead letters, newest first; consumer filters
	// when not empty.
	DeadLetterList(ctx context.Context, consumer string, limit int) ([]*inboxtype.DeadLetter, error)
	// DeadLetterGet returns one dead letter, or an error wrapping
	// inbox.ErrNotFound.
	DeadLetterGet(ctx context.Context, id int64) (*inboxtype.DeadLetter, error)
	// DeadLetterDelete deletes one dead letter, or returns an error
	// wrapping inbox.ErrNotFound.
	DeadLetterDelete(ctx context.Context, id int64) error
	// DeadLetterReplay marks one dead letter for replay: the application's next
	// replay of its consumer processes it with the handler. It reports
	// false when it was marked already.
	DeadLetterReplay(ctx context.Context, id int64) (bool, error)

	// StuckEffects lists the remote-effect steps started before before and
	// never recorded done, oldest first. It returns an error wrapping
	// ErrUnsupported when the store keeps no ledger.
	StuckEffects(ctx context.Context, consumer string, before time.Time, limit int) ([]*inboxtype.EffectEntry, error)
	// Effect returns one step of the effects ledger, whatever its state,
	// or an error wrapping inbox.ErrNotFound; it wraps ErrUnsupported when
	// the store keeps no ledger.
	Effect(ctx context.Context, consumer, messageID, step string) (*inboxtype.EffectEntry, error)
	// EffectResolve settles a started step as done or failed.
	EffectResolve(ctx context.Context, p inbox.EffectResolveParams) error

	// Partitions lists the partitions of a partitioned inbox; it returns
	// nil and no error when the inbox is not partitioned.
	Partitions(ctx context.Context) (*inboxtype.PartitionState, error)
}

// Outbox is what the admin page reads and changes of a store's outbox
// (package outbox).
type Outbox interface {
	// OutboxStats counts the pending, parked and kept events.
	OutboxStats(ctx context.Context) (*inboxtype.OutboxStats, error)
	// OutboxList lists events in state (pending, parked, published; empty
	// for all), oldest first.
	OutboxList(ctx context.Context, state string, limit int) ([]*inboxdriver.OutboxRow, error)
	// OutboxGet returns one event, or an error wrapping inbox.ErrNotFound.
	OutboxGet(ctx context.Context, id string) (*inboxdriver.OutboxRow, error)
	// OutboxSet applies action ("retry", "park", "unpark") to one event
	// and reports whether an event in a state the action applies to was
	// found.
	OutboxSet(ctx context.Context, id, action string) (bool, error)
}

// ErrUnsupported is returned by a Store for a part the underlying store
// does not keep: the effects ledger, replay marks, the outbox.
var ErrUnsupported = errors.New("inboxadmin: the store does not keep this")

// FromClient adapts c to the Store the page reads. It also returns the
// store's outbox, or nil when the store keeps none.
func FromClient[TTx any](c *inbox.Client[TTx]) (Store, Outbox) {
	s := FromAdmin(c.Admin(), c.Driver().Tables().Layout == inboxdriver.LayoutPartitioned)
	if a, ok := c.Driver().(inboxdriver.OutboxAdmin); ok {
		return s, OutboxOf(c.Admin(), a)
	}
	return s, nil
}

// FromAdmin adapts a, any store's inbox.Admin, to the Store the page
// reads; partitioned says whether its inbox has the partitioned layout.
func FromAdmin(a *inbox.Admin, partitioned bool) Store {
	return adminStore{a: a, partitioned: partitioned}
}

// OutboxOf adapts a store's outbox administration, oa, to the Outbox the
// page reads; admin, an Admin over the same store, reads its statistics,
// and admin's Config.Now is the clock of its lag and of the operator's
// changes.
func OutboxOf(admin *inbox.Admin, oa inboxdriver.OutboxAdmin) Outbox {
	return driverOutbox{admin: admin, a: oa, now: admin.Config().Now}
}

// adminStore is a Store over an *inbox.Admin.
type adminStore struct {
	a           *inbox.Admin
	partitioned bool
}

func (s adminStore) Stats(ctx context.Context) (*inboxtype.Stats, error) { return s.a.Stats(ctx) }
func (s adminStore) ReplayHorizon() time.Duration                        { return s.a.Config().ReplayHorizon }

func (s adminStore) DeadLetterList(ctx context.Context, consumer string, limit int) ([]*inboxtype.DeadLetter, error) {
	return s.a.DeadLetterList(ctx, inboxtype.DeadLetterListParams{Consumer: consumer, Limit: limit})
}

func (s adminStore) DeadLetterGet(ctx context.Context, id int64) (*inboxtype.DeadLetter, error) {
	return s.a.DeadLetterGet(ctx, id)
}

func (s adminStore) DeadLetterDelete(ctx context.Context, id int64) error {
	return s.a.DeadLetterDelete(ctx, id)
}

func (s adminStore) DeadLetterReplay(ctx context.Context, id int64) (bool, error) {
	n, err := s.a.DeadLetterReplay(ctx, inbox.DeadLetterReplayParams{ID: id})
	if errors.Is(err, inbox.ErrReplayUnsupported) {
		err = errors.Join(ErrUnsupported, err)
	}
	return n > 0, err
}

func (s adminStore) StuckEffects(ctx context.Context, consumer string, before time.Time, limit int) ([]*inboxtype.EffectEntry, error) {
	es, err := s.a.EffectList(ctx, inboxtype.EffectListParams{Consumer: consumer, State: inboxtype.EffectStarted, StartedBefore: before, Limit: limit})
	if errors.Is(err, inbox.ErrEffectsUnsupported) {
		err = errors.Join(ErrUnsupported, err)
	}
	return es, err
}

// effectsPerMessage bounds the steps Effect reads of one message.
const effectsPerMessage = 1000

func (s adminStore) Effect(ctx context.Context, consumer, messageID, step string) (*inboxtype.EffectEntry, error) {
	es, err := s.a.EffectList(ctx, inboxtype.EffectListParams{Consumer: consumer, MessageID: messageID, Limit: effectsPerMessage})
	if errors.Is(err, inbox.ErrEffectsUnsupported) {
		err = errors.Join(ErrUnsupported, err)
	}
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		if e.Step == step {
			return e, nil
		}
	}
	return nil, fmt.Errorf("no step %s/%s/%s in the effects ledger: %w", consumer, messageID, step, inbox.ErrNotFound)
}

func (s adminStore) EffectResolve(ctx context.Context, p inbox.EffectResolveParams) error {
	return s.a.EffectResolve(ctx, p)
}

func (s adminStore) Partitions(ctx context.Context) (*inboxtype.PartitionState, error) {
	if !s.partitioned {
		return nil, nil
	}
	return s.a.Partitions(ctx)
}

// driverOutbox is an Outbox over a store's OutboxAdmin.
type driverOutbox struct {
	admin *inbox.Admin
	a     inboxdriver.OutboxAdmin
	now   func() time.Time
}

func (o driverOutbox) OutboxStats(ctx context.Context) (*inboxtype.OutboxStats, error) {
	return o.admin.OutboxStats(ctx)
}

func (o driverOutbox) OutboxList(ctx context.Context, state string, limit int) ([]*inboxdriver.OutboxRow, error) {
	return o.a.OutboxList(ctx, &inboxdriver.OutboxListParams{State: inboxdriver.OutboxState(state), Limit: limit})
}

// id validates an event id for the outbox's id column, so that a bad one
// is refused with inbox.ErrMalformedID before it reaches the database.
func (o driverOutbox) id(raw string) (string, error) {
	f := inbox.IDFormatUUID
	if o.a.Tables().IDType == inboxdriver.IDTypeText {
		f = inbox.IDFormatText
	}
	return f.CanonicalID(raw)
}

func (o driverOutbox) OutboxGet(ctx context.Context, id string) (*inboxdriver.OutboxRow, error) {
	id, err := o.id(id)
	if err != nil {
		return nil, err
	}
	return o.a.OutboxGet(ctx, id) // inboxdriver.ErrNotFound is inbox.ErrNotFound
}

func (o driverOutbox) OutboxSet(ctx context.Context, id, action string) (bool, error) {
	id, err := o.id(id)
	if err != nil {
		return false, err
	}
	return o.a.OutboxSet(ctx, &inboxdriver.OutboxSetParams{ID: id, Action: inboxdriver.OutboxAction(action), Now: o.now()})
}

package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/uuid"
)

// The headers every record carries, whatever the sink. A consumer reads the
// event id with inbox.HeaderKey(outbox.HeaderEventID), and needs nothing
// else configured.
const (
	// HeaderEventID carries the event id: minted once, at enqueue, and the
	// same on every publish of the event.
	HeaderEventID = "event-id"
	// HeaderCausationID carries the id of the message whose handler
	// enqueued this one, when there was one (Message.CausationID).
	HeaderCausationID = "causation-id"
	// HeaderKeySeq carries, in ordered mode, the event's place among the
	// events of its key, from 1, in decimal: a consumer can check that a
	// key's events arrive in order and with no gap.
	HeaderKeySeq = "inbox-key-seq"
)

// Message is one event to publish.
type Message struct {
	// ID is the event id. Leave it empty and EnqueueTx mints a UUIDv7; set
	// it to carry an id of your own, in Config.IDFormat. Either way it is
	// stored with the event and never changed: every publish of the event,
	// including a relay's retry after a crash, carries the same id.
	ID string
	// Topic is the destination: a Kafka topic, an SQS queue URL. It must
	// not be empty and holds at most 512 bytes of UTF-8.
	Topic string
	// Key is the record key: the Kafka partition key, the SQS FIFO message
	// group. In ordered mode events of one key are published in the order
	// they were enqueued. At most 1024 bytes.
	Key []byte
	// Headers are the record's headers. The names HeaderEventID,
	// HeaderCausationID and HeaderKeySeq are the outbox's own.
	Headers map[string]string
	// Payload is the record's body.
	Payload []byte
	// CausationID is the id of the message that caused this one: set it to
	// the inbound message's id when a handler enqueues its outputs inside
	// inbox.Client.Process. At most 255 bytes of printable UTF-8.
	CausationID string
}

// Config configures an Outbox. The zero value is valid.
type Config struct {
	// IDFormat is the form of the event ids: those EnqueueTx mints are
	// UUIDs, and ids of your own are validated and canonicalised to it.
	// IDFormatULID and IDFormatText need a store whose id columns are text.
	// Defaults to inbox.IDFormatUUID.
	IDFormat inbox.IDFormat

	// Ordered stamps every event that has a key with the next sequence
	// number of its key, so that relays publish a key's events in the
	// order their transactions committed, one key never waiting for
	// another. It costs a row lock per key in each enqueueing transaction:
	// producers of the same key wait for each other's commit. Events with
	// no key stay unordered. Defaults to false.
	Ordered bool

	// Logger receives the outbox's logs. Defaults to nil, which is silent.
	Logger *slog.Logger

	// Observer, if set, sees each event before it is written and may add
	// headers to it, such as a trace context (package inboxotel).
	Observer EnqueueObserver

	// Now returns the current time, which stamps created_at and mints the
	// ids' time. Defaults to time.Now.
	Now func() time.Time
}

// Outbox writes events into the outbox table inside the caller's
// transaction, for relays to publish. It is safe for concurrent use. TTx is
// the store's transaction type, as for inbox.Client.
type Outbox[TTx any] struct {
	store  inboxdriver.OutboxStore[TTx]
	config Config
	logger *slog.Logger

	mu     sync.Mutex
	relays map[*Relay]struct{}
}

// New returns an outbox over store, such as an *inboxpgx.Driver. config may
// be nil.
func New[TTx any](store inboxdriver.OutboxStore[TTx], config *Config) (*Outbox[TTx], error) {
	if store == nil {
		return nil, errors.New("outbox: New: store is nil")
	}
	var cfg Config
	if config != nil {
		cfg = *config
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch t := store.Tables().WithDefaults(); {
	case cfg.IDFormat > inbox.IDFormatText:
		return nil, fmt.Errorf("outbox: Config.IDFormat: unknown format %v", cfg.IDFormat)
	case cfg.IDFormat != inbox.IDFormatUUID && t.IDType == inboxdriver.IDTypeUUID:
		return nil, fmt.Errorf("outbox: Config.IDFormat is %v, but the store's id columns are uuids: migrate with text id columns and configure the store with IDType %q", cfg.IDFormat, inboxdriver.IDTypeText)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Outbox[TTx]{store: store, config: cfg, logger: logger, relays: map[*Relay]struct{}{}}, nil
}

// Store returns the outbox's store.
func (o *Outbox[TTx]) Store() inboxdriver.OutboxStore[TTx] { return o.store }

// EnqueueTx writes msgs into the outbox inside tx, the caller's business
// transaction, with one statement, and returns their event ids in order.
// The events are published once tx commits, and never if it rolls back.
//
// Each relay of this Outbox (NewRelay) is woken to look for them. The
// signal goes before the commit, so a relay looks again a few times over
// the next second; call Wake after the commit for an exact signal.
// Relays in other processes find the events when they next poll.
//
// Nothing is written when a message is invalid: the error names it.
func (o *Outbox[TTx]) EnqueueTx(ctx context.Context, tx TTx, msgs ...Message) ([]string, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	p, ids, err := o.rows(msgs)
	if err != nil {
		return nil, err
	}
	o.observeEnqueue(ctx, p)
	if err := o.store.OutboxEnqueue(ctx, tx, p); err != nil {
		return nil, fmt.Errorf("outbox: enqueue %d events: %w", len(msgs), classify(o.store, err))
	}
	o.Wake()
	return ids, nil
}

// EnqueueBatch is EnqueueTx for a transaction that sends its statements in
// batches: it queues the write of msgs on batch, the caller's batch of
// statements (a *pgx.Batch for inboxpgx), and returns their event ids.
// Queue the business statements on the same batch and send it in the
// transaction: the events then cost no round trip of their own, where
// EnqueueTx costs one.
//
//	b := &pgx.Batch{}
//	b.Queue(`UPDATE accounts SET balance = balance - $1 WHERE id = $2`, cents, acct)
//	ids, err := o.EnqueueBatch(b, outbox.Message{Topic: "payments", Key: []byte(acct), Payload: body})
//	err = tx.SendBatch(ctx, b).Close()
//	err = tx.Commit(ctx)
//
// The events are written only if the batch is sent, and kept only if its
// transaction commits. It returns ErrNotQueueable for a store that cannot
// queue. It wakes the relays as EnqueueTx does.
func (o *Outbox[TTx]) EnqueueBatch(batch any, msgs ...Message) ([]string, error) {
	q, ok := o.store.(inboxdriver.OutboxQueuer)
	if !ok {
		return nil, ErrNotQueueable
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	p, ids, err := o.rows(msgs)
	if err != nil {
		return nil, err
	}
	if err := q.OutboxQueue(batch, p); err != nil {
		return nil, fmt.Errorf("outbox: queue %d events: %w", len(msgs), err)
	}
	o.Wake()
	return ids, nil
}

// ErrNotQueueable is returned by EnqueueBatch for a store that has no batch
// of statements to queue on (the database/sql stores): use EnqueueTx.
var ErrNotQueueable = errors.New("outbox: the store cannot queue an enqueue on a batch: use EnqueueTx")

// Enqueue writes msgs into the outbox in a transaction of its own, commits
// it, and wakes this Outbox's relays. Use EnqueueTx to write events
// together with the business change that causes them: that is the point of
// an outbox.
func (o *Outbox[TTx]) Enqueue(ctx context.Context, msgs ...Message) ([]string, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	p, ids, err := o.rows(msgs)
	if err != nil {
		return nil, err
	}
	o.observeEnqueue(ctx, p)
	tx, err := o.store.OutboxBegin(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: begin: %w", classify(o.store, err))
	}
	if err := o.store.OutboxEnqueue(ctx, tx, p); err != nil {
		o.rollback(ctx, tx)
		return nil, fmt.Errorf("outbox: enqueue %d events: %w", len(msgs), classify(o.store, err))
	}
	if err := o.store.Commit(ctx, tx); err != nil {
		o.rollback(ctx, tx)
		return nil, fmt.Errorf("outbox: commit: %w", classify(o.store, err))
	}
	o.Wake()
	return ids, nil
}

func (o *Outbox[TTx]) rollback(ctx context.Context, tx TTx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := o.store.Rollback(rctx, tx); err != nil {
		o.logger.WarnContext(ctx, "outbox: rollback failed", "err", err)
	}
}

// Wake tells this Outbox's relays that events were committed. It never
// blocks.
func (o *Outbox[TTx]) Wake() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for r := range o.relays {
		r.Wake()
	}
}

// subscribe has r woken by o's enqueues until the returned func is called.
func (o *Outbox[TTx]) subscribe(r *Relay) func() {
	o.mu.Lock()
	o.relays[r] = struct{}{}
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		delete(o.relays, r)
		o.mu.Unlock()
	}
}

// rows validates msgs and turns them into rows, minting the missing ids.
func (o *Outbox[TTx]) rows(msgs []Message) (*inboxdriver.OutboxEnqueueParams, []string, error) {
	now := o.config.Now()
	p := &inboxdriver.OutboxEnqueueParams{Rows: make([]inboxdriver.OutboxRow, len(msgs)), Ordered: o.config.Ordered}
	ids := make([]string, len(msgs))
	seen := make(map[string]int, len(msgs))
	for i, m := range msgs {
		id := m.ID
		if id == "" {
			id = uuid.V7(now)
		} else {
			canon, err := o.config.IDFormat.CanonicalID(id)
			if err != nil {
				return nil, nil, fmt.Errorf("outbox: message %d: %w", i, err)
			}
			id = canon
		}
		if j, ok := seen[id]; ok {
			return nil, nil, fmt.Errorf("outbox: messages %d and %d have the same id %s", j, i, id)
		}
		seen[id] = i
		if err := validate(m); err != nil {
			return nil, nil, fmt.Errorf("outbox: message %d (%s): %w", i, id, err)
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		p.Rows[i] = inboxdriver.OutboxRow{
			ID: id, Topic: m.Topic, Key: m.Key, Headers: m.Headers, Payload: payload,
			CausationID: m.CausationID, CreatedAt: now,
		}
		ids[i] = id
	}
	return p, ids, nil
}

// ErrInvalidMessage is returned by EnqueueTx and Enqueue, before any SQL
// runs, for a message the outbox cannot hold: no topic, a key or a topic
// too long, a header named like the outbox's own.
var ErrInvalidMessage = errors.New("outbox: invalid message")

func validate(m Message) error {
	switch {
	case m.Topic == "":
		return fmt.Errorf("%w: no topic", ErrInvalidMessage)
	case len(m.Topic) > inboxdriver.MaxOutboxTopicLen:
		return fmt.Errorf("%w: topic is longer than %d bytes", ErrInvalidMessage, inboxdriver.MaxOutboxTopicLen)
	case !utf8.ValidString(m.Topic):
		return fmt.Errorf("%w: topic is not valid UTF-8", ErrInvalidMessage)
	case len(m.Key) > inboxdriver.MaxOutboxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, longer than %d", ErrInvalidMessage, len(m.Key), inboxdriver.MaxOutboxKeyLen)
	case len(m.CausationID) > inboxdriver.MaxTextIDLen:
		return fmt.Errorf("%w: causation id is longer than %d bytes", ErrInvalidMessage, inboxdriver.MaxTextIDLen)
	case !utf8.ValidString(m.CausationID):
		return fmt.Errorf("%w: causation id is not valid UTF-8", ErrInvalidMessage)
	}
	for k, v := range m.Headers {
		switch {
		case k == HeaderEventID || k == HeaderCausationID || k == HeaderKeySeq:
			return fmt.Errorf("%w: header %q is the outbox's own: the relay sets it", ErrInvalidMessage, k)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return fmt.Errorf("%w: header %q is not valid UTF-8", ErrInvalidMessage, k)
		}
	}
	return nil
}

// classify wraps a store error with inbox's sentinel of its class.
func classify(a inboxdriver.OutboxAdmin, err error) error {
	switch a.Classify(err) {
	case inboxdriver.ClassConflict:
		return fmt.Errorf("%w: %w", inbox.ErrConflict, err)
	case inboxdriver.ClassLockTimeout:
		return fmt.Errorf("%w: %w", inbox.ErrLockTimeout, err)
	case inboxdriver.ClassUnavailable:
		return fmt.Errorf("%w: %w", inbox.ErrUnavailable, err)
	case inboxdriver.ClassNotMigrated:
		return fmt.Errorf("%w: %w", inbox.ErrNotMigrated, err)
	}
	return err
}

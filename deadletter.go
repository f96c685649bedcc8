package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/txinbox/inbox/inboxtype"
)

// Reasons a message is dead-lettered. They are stored with it.
const (
	ReasonNoID        = "no_id"
	ReasonMalformedID = "malformed_id"
	ReasonPermanent   = "permanent"
	ReasonMaxAttempts = "max_attempts"
	// ReasonUnknownOutcome is a message whose handler found a non-idempotent
	// remote call started but never recorded done (ErrUnknownOutcome). A
	// human checks with the provider, settles the step with
	// Admin.EffectResolve, and replays the dead letter.
	ReasonUnknownOutcome = "unknown_outcome"
	// ReasonCrashedConsumer is a message that took its consumer down (an
	// out-of-memory kill, a panic on a goroutine the handler started,
	// os.Exit in a dependency) every time it ran: the takeover ledger
	// (inboxtransport.Ledger) found it started by several consumers in a
	// row that went down before they got past it. Its handler was not run
	// the last time. Replaying the dead letter runs it again, deliberately.
	// The transport adapters dead-letter it (inboxtransport.Settings's
	// MaxCrashes).
	ReasonCrashedConsumer = "crashed_consumer"
)

// KnownReason reports whether r is one of the reasons this module's code
// dead-letters with (the Reason constants), and not a caller's own: a
// metric labels only these, so that its labels stay a bounded set.
func KnownReason(r string) bool {
	switch r {
	case ReasonNoID, ReasonMalformedID, ReasonPermanent, ReasonMaxAttempts, ReasonUnknownOutcome,
		ReasonExpiredID, ReasonFutureID, ReasonNotTimeOrdered, ReasonCrashedConsumer:
		return true
	}
	return false
}

// DeadLetterReason names the reason to store for a message that failed with
// err and will not be retried: ReasonNoID, ReasonMalformedID,
// ReasonUnknownOutcome or ReasonPermanent, or ReasonMaxAttempts for any
// other error.
func DeadLetterReason(err error) string {
	switch {
	case errors.Is(err, ErrNoMessageID):
		return ReasonNoID
	case errors.Is(err, ErrMalformedID):
		return ReasonMalformedID
	case errors.Is(err, ErrUnknownOutcome):
		return ReasonUnknownOutcome
	case partitionReason(err) != "":
		return partitionReason(err)
	case IsPermanent(err):
		return ReasonPermanent
	default:
		return ReasonMaxAttempts
	}
}

// DeadLetterParams describe a message being dead-lettered.
type DeadLetterParams struct {
	Consumer string
	// Message is the delivery, with the id its KeyFunc returned, if any.
	Message Message
	// Reason is a short code such as ReasonPermanent. Defaults to
	// DeadLetterReason(Err).
	Reason string
	// Err is the error that sent the message here.
	Err error
	// Attempts is how many times the message was tried.
	Attempts int
}

// DeadLetter stores a message that will not be applied, with the reason, in
// its own transaction. The payload and record key are stored as they are;
// text fields and headers that are not valid UTF-8, or hold NUL bytes, are
// stored with those bytes replaced by U+FFFD, so that every message can be
// dead-lettered. Ack the message only after it returns nil: that is
// what makes dead-lettering lose nothing. A message dead-lettered again
// (its redelivery raced the ack) updates the stored row's reason, attempts
// and last-seen time rather than adding a row.
func (c *Client[TTx]) DeadLetter(ctx context.Context, p DeadLetterParams) error {
	if err := ValidateConsumer(p.Consumer); err != nil {
		return err
	}
	m := p.Message
	id, idErr := c.config.IDFormat.CanonicalID(m.ID)
	if idErr != nil {
		id = ""
	}
	reason := p.Reason
	if reason == "" {
		reason = DeadLetterReason(p.Err)
	}
	errText := ""
	if p.Err != nil {
		errText = p.Err.Error()
	}
	if idErr != nil && m.ID != "" {
		errText += fmt.Sprintf(" (raw id %q)", clip(m.ID))
	}
	var headers map[string]string
	if m.Headers != nil {
		headers = make(map[string]string, len(m.Headers))
		for k, v := range m.Headers {
			headers[storable(k)] = storable(v)
		}
	}
	d := &inboxtype.DeadLetter{
		Consumer:  p.Consumer,
		MessageID: id,
		DedupKey:  storable(deadLetterKey(id, m)),
		Transport: storable(m.Source.Transport),
		Queue:     storable(m.Source.Queue),
		Partition: m.Source.Partition,
		Offset:    m.Source.Offset,
		BrokerID:  storable(m.Source.BrokerID),
		Key:       m.Source.Key,
		Headers:   headers,
		Payload:   m.Payload,
		Reason:    storable(reason),
		Error:     storable(errText),
		Attempts:  p.Attempts,
		LastSeen:  c.config.Now(),
	}
	if err := c.driver.DeadLetter(ctx, d); err != nil {
		return atStage(StageDeadLetter, fmt.Errorf("inbox: dead-letter %s/%s: %w", p.Consumer, d.DedupKey, c.admin.classify(err)))
	}
	if c.config.Observer != nil {
		c.config.Observer.DeadLettered(ctx, &DeadLetterEvent{Consumer: p.Consumer, MessageID: id, Reason: reason, Attempts: p.Attempts, Err: p.Err})
	}
	c.logger.WarnContext(ctx, "inbox: dead-lettered a message", "consumer", p.Consumer, "key", d.DedupKey,
		"reason", reason, "attempts", p.Attempts, "err", errText)
	return nil
}

// storable makes s storable in a text column of every store. Postgres and
// MySQL refuse invalid UTF-8, and Postgres a NUL byte, and a message that
// cannot be dead-lettered would be redelivered forever. The payload and the
// record key are stored as bytes, unchanged.
func storable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// deadLetterKey identifies a dead letter: by its id when it has a valid one,
// by its transport coordinates otherwise, and by a hash of its payload as a
// last resort. This key is never an inbox key.
func deadLetterKey(id string, m Message) string {
	if id != "" {
		return "id:" + id
	}
	if s := m.Source.String(); s != "" {
		return s
	}
	sum := sha256.Sum256(m.Payload)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// DeadLetterList lists dead letters, newest first.
func (a *Admin) DeadLetterList(ctx context.Context, p inboxtype.DeadLetterListParams) ([]*inboxtype.DeadLetter, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	ds, err := a.driver.DeadLetterList(ctx, &p)
	if err != nil {
		return nil, fmt.Errorf("inbox: list dead letters: %w", a.classify(err))
	}
	return ds, nil
}

// DeadLetterGet returns one dead letter by its id, or an error wrapping
// ErrNotFound.
func (a *Admin) DeadLetterGet(ctx context.Context, id int64) (*inboxtype.DeadLetter, error) {
	d, err := a.driver.DeadLetterGet(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		// Drivers name the id in their error too: say it once.
		return nil, fmt.Errorf("inbox: dead letter %d: %w", id, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("inbox: dead letter %d: %w", id, a.classify(err))
	}
	return d, nil
}

// ProcessDeadLetter processes a stored dead letter with h, for its
// consumer, exactly as Process would, and deletes it once it is Applied or
// found to be a Duplicate. A dead letter that had no valid id cannot be
// replayed: fix the producer and publish it again. To replay the dead
// letters an operator asked for (Admin.DeadLetterReplay), use
// ProcessReplays.
func (c *Client[TTx]) ProcessDeadLetter(ctx context.Context, id int64, h Handler[TTx]) (Outcome, error) {
	d, err := c.admin.DeadLetterGet(ctx, id)
	if err != nil {
		return 0, err
	}
	if d.MessageID == "" {
		return 0, fmt.Errorf("inbox: replay dead letter %d: %w: fix the producer and publish it again", id, ErrNoMessageID)
	}
	outcome, err := c.Process(ctx, d.Consumer, deadLetterMessage(d), h)
	if err != nil {
		return 0, wrapf(err, "replay dead letter %d", id)
	}
	if _, err := c.driver.DeadLetterDelete(ctx, id); err != nil {
		return outcome, fmt.Errorf("inbox: replayed dead letter %d (%v) but could not delete it: %w", id, outcome, c.admin.classify(err))
	}
	return outcome, nil
}

// DeadLetterDelete deletes a dead letter, or returns an error wrapping
// ErrNotFound.
func (a *Admin) DeadLetterDelete(ctx context.Context, id int64) error {
	ok, err := a.driver.DeadLetterDelete(ctx, id)
	if err != nil {
		return fmt.Errorf("inbox: delete dead letter %d: %w", id, a.classify(err))
	}
	if !ok {
		return fmt.Errorf("inbox: delete dead letter %d: %w", id, ErrNotFound)
	}
	return nil
}

package inbox

import (
	"context"
	"errors"
)

// ErrNotAttempted is the result of the messages that ProcessBatchOrdered did
// not attempt because an earlier message of the batch failed with a
// retryable error. It is retryable: deliver them again after the earlier
// one.
var ErrNotAttempted = errors.New("not attempted: an earlier message of the batch failed")

// BatchResult is the result of one message of a batch: an Outcome, or an
// error that means the message was not applied.
type BatchResult struct {
	Outcome Outcome
	Err     error
}

// ProcessBatch applies many messages for consumer, each exactly once, in
// one transaction:
//
//  1. one statement claims every id (unnest on Postgres);
//  2. the handler runs for the new ids only, in message order;
//  3. one commit.
//
// The result has one entry per message, in the order of msgs. A message
// whose id was already applied, earlier or by an earlier message of the same
// batch, is a Duplicate. A message with no id or a malformed one fails with
// ErrNoMessageID or ErrMalformedID and does not hold up the others.
//
// When the handler fails on one message, the transaction is rolled back and
// the batch is split: the messages before it run again as a batch, the
// failing message runs alone and reports its error, and the messages after
// it run as a batch, split again if another fails. A poison message never
// fails its batch-mates. Use ProcessBatchOrdered when later messages must
// wait for a failed one.
//
// ProcessBatch returns an error, and no results, only when consumer is
// invalid.
func (c *Client[TTx]) ProcessBatch(ctx context.Context, consumer string, msgs []Message, h Handler[TTx]) ([]BatchResult, error) {
	return c.processBatch(ctx, consumer, msgs, h, false)
}

// ProcessBatchOrdered is ProcessBatch for a stream whose order matters, such
// as a Kafka partition. After the first message that fails with a retryable
// error, the later messages are not attempted and report ErrNotAttempted, so
// that none is applied before the failed one. Messages that fail
// permanently (no id, a malformed id, a Permanent handler error) do not stop
// the batch: they are for the dead-letter store.
func (c *Client[TTx]) ProcessBatchOrdered(ctx context.Context, consumer string, msgs []Message, h Handler[TTx]) ([]BatchResult, error) {
	return c.processBatch(ctx, consumer, msgs, h, true)
}

func (c *Client[TTx]) processBatch(ctx context.Context, consumer string, msgs []Message, h Handler[TTx], ordered bool) ([]BatchResult, error) {
	if err := ValidateConsumer(consumer); err != nil {
		return nil, err
	}
	results := make([]BatchResult, len(msgs))
	// Canonicalise the ids (here, unless Client.Key did), and keep the
	// first message of each id; a later message with the same id takes
	// the first one's result.
	var first map[string]int
	if len(msgs) > 1 {
		first = make(map[string]int, len(msgs))
	}
	firstOf := make([]int, len(msgs))
	unique := make([]Message, 0, len(msgs))
	uniqueAt := make([]int, 0, len(msgs))
	for i, m := range msgs {
		firstOf[i] = -1
		id, err := c.admin.messageID(m)
		if err != nil {
			results[i].Err = idFailure(consumer, err)
			continue
		}
		if j, ok := first[id]; ok {
			firstOf[i] = j
			continue
		}
		if first != nil {
			first[id] = i
		}
		m.ID = id
		unique = append(unique, m)
		uniqueAt = append(uniqueAt, i)
	}
	out := make([]BatchResult, len(unique))
	c.runBatch(ctx, consumer, unique, h, ordered, out)
	for k, i := range uniqueAt {
		results[i] = out[k]
	}
	for i, j := range firstOf {
		if j < 0 {
			continue
		}
		results[i] = results[j]
		if results[i].Err == nil {
			results[i].Outcome = Duplicate
		}
	}
	return results, nil
}

// messageID is m's canonical id: its ID as a's Client.Key left it, or else
// canonicalised here.
func (a *Admin) messageID(m Message) (string, error) {
	if m.keyedBy == a && m.ID != "" && m.ID == m.keyed {
		return m.ID, nil
	}
	return a.canonicalID(m.ID)
}

// runBatch processes msgs, whose ids are canonical and distinct, and writes
// their results to out. When a handler fails, the batch is split: around
// the message it failed on, or in halves when that is not known (a batch
// handler), down to single messages, so that a poison message never fails
// its batch-mates.
func (c *Client[TTx]) runBatch(ctx context.Context, consumer string, msgs []Message, h Handler[TTx], ordered bool, out []BatchResult) {
	if len(msgs) == 0 {
		return
	}
	a := c.transact(ctx, consumer, msgs, h)
	switch {
	case a.err == nil:
		for i := range out {
			out[i] = BatchResult{Outcome: a.outcomes[i]}
		}
		return
	case len(msgs) == 1 || len(a.suspects) == 0 || errors.Is(a.err, ErrUnavailable):
		for i := range out {
			out[i] = BatchResult{Err: a.err}
		}
		return
	}
	// The ones before the suspects as a batch, the suspects (split in
	// halves when there are many), the ones after them as a batch.
	lo := index(msgs, a.suspects[0])
	hi := lo + len(a.suspects)
	parts := [][2]int{{0, lo}, {lo, hi}, {hi, len(msgs)}}
	if hi-lo > 1 {
		mid := (lo + hi) / 2
		parts = [][2]int{{0, lo}, {lo, mid}, {mid, hi}, {hi, len(msgs)}}
	}
	c.logger.DebugContext(ctx, "inbox: splitting a failed batch", "consumer", consumer, "messages", len(msgs), "suspects", hi-lo, "err", a.err)
	for k, p := range parts {
		c.runBatch(ctx, consumer, msgs[p[0]:p[1]], h, ordered, out[p[0]:p[1]])
		if ordered && anyRetryable(out[p[0]:p[1]]) {
			for _, q := range parts[k+1:] {
				notAttempted(out[q[0]:q[1]])
			}
			return
		}
	}
}

// index returns the position of m in msgs, whose ids are distinct.
func index(msgs []Message, m Message) int {
	for i := range msgs {
		if msgs[i].ID == m.ID {
			return i
		}
	}
	return 0
}

func anyRetryable(rs []BatchResult) bool {
	for _, r := range rs {
		if IsRetryable(r.Err) {
			return true
		}
	}
	return false
}

func notAttempted(rs []BatchResult) {
	for i := range rs {
		rs[i] = BatchResult{Err: ErrNotAttempted}
	}
}

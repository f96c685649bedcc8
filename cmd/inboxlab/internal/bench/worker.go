package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/uuid"
)

// idKind is the kind of event id a producer mints.
type idKind int

const (
	idV7 idKind = iota // time-ordered: the default of every row
	idV4               // random
)

func (k idKind) String() string {
	if k == idV4 {
		return "uuidv4"
	}
	return "uuidv7"
}

// effect is one message and the side effect it asks for: add amount to
// account's balance. The message carries the same two numbers in its
// payload, which is what the inbox rows' handler reads.
type effect struct {
	msg     inbox.Message
	account int32
	amount  int64
}

// worker is one consumer goroutine's state. Workers keep their random
// streams across rows, so that every row sees messages of the same kind.
type worker struct {
	index int
	rng   *rand.Rand
	// part and parts place the worker among the workers of a run: it only
	// sees the accounts ≡ part mod parts, as a consumer of a broker
	// partitioned by account key does.
	part, parts int
	// batch is the number of messages one op of the current row applies.
	batch int
	ids   idKind
	buf   []effect
	msgs  []inbox.Message
	// lat holds the latency of each op of the current measurement.
	lat []time.Duration
	// pending waits until the batch that the worker's last op sent is
	// done, on a broker row (pipeline); first marks that the first op of
	// the measurement waited for no batch.
	pending func(ctx context.Context) error
	first   bool
}

func newWorker(seed uint64, index int) *worker {
	return &worker{index: index, rng: rand.New(rand.NewPCG(seed, uint64(index)+1)), parts: 1}
}

// next returns n new messages for b's accounts.
func (w *worker) next(b *bench, n int) []*effect {
	if cap(w.buf) < n {
		w.buf = make([]effect, n)
	}
	w.buf = w.buf[:n]
	out := make([]*effect, n)
	now := time.Now()
	for i := range w.buf {
		e := &w.buf[i]
		switch w.ids {
		case idV4:
			e.msg.ID = uuid.V4()
		default:
			e.msg.ID = uuid.V7(now)
		}
		w.fill(b, e)
		out[i] = e
	}
	return out
}

// duplicate returns a message whose id the inbox already holds.
func (w *worker) duplicate(b *bench) *effect {
	if cap(w.buf) < 1 {
		w.buf = make([]effect, 1)
	}
	e := &w.buf[0]
	e.msg.ID = b.pg.dupIDs[w.rng.IntN(len(b.pg.dupIDs))]
	w.fill(b, e)
	return e
}

func (w *worker) fill(b *bench, e *effect) {
	inPart := (b.cfg.Accounts - w.part + w.parts - 1) / w.parts
	e.account = int32(w.part + 1 + w.parts*w.rng.IntN(inPart))
	e.amount = 1 + w.rng.Int64N(100)
	if cap(e.msg.Payload) < 12 {
		e.msg.Payload = make([]byte, 12)
	}
	e.msg.Payload = e.msg.Payload[:12]
	binary.BigEndian.PutUint32(e.msg.Payload[0:4], uint32(e.account))
	binary.BigEndian.PutUint64(e.msg.Payload[4:12], uint64(e.amount))
}

// messages returns the inbox messages of es, in a buffer the worker reuses.
func (w *worker) messages(es []*effect) []inbox.Message {
	w.msgs = w.msgs[:0]
	for _, e := range es {
		w.msgs = append(w.msgs, e.msg)
	}
	return w.msgs
}

// decodeEffect reads the account and amount from a message's payload.
func decodeEffect(payload []byte) (account int32, amount int64, err error) {
	if len(payload) != 12 {
		return 0, 0, errors.New("payload is not 12 bytes")
	}
	return int32(binary.BigEndian.Uint32(payload[0:4])), int64(binary.BigEndian.Uint64(payload[4:12])), nil
}

// pipeline leaves wait, the wait for the batch this op sent, to the
// worker's next op, and waits for the batch the previous op sent: a broker
// row keeps two batches in flight per worker, so that its consumer finds
// the next batch waiting while it finishes one, as it does under a
// backlog. The first op of a measurement waits for none and does not
// count (drive); drive waits for the last one after the clock stopped.
func (w *worker) pipeline(ctx context.Context, wait func(ctx context.Context) error) error {
	prev := w.pending
	w.pending = wait
	if prev == nil {
		w.first = true
		return nil
	}
	return prev(ctx)
}

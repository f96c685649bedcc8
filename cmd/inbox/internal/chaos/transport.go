package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// transport is the broker of a run, as the coordinator sees it.
type transport interface {
	// send sends one event, once.
	send(ctx context.Context, e event) error
	// consumerArgs tell a consumer process where the broker is.
	consumerArgs() []string
	// injectFault makes the broker fail a request, where it can; it reports
	// whether it did.
	injectFault(r *rand.Rand) bool
	// calm drops the faults injected and not yet hit, before the drain.
	calm()
	// redelivery bounds how long a message can stay out of every
	// consumer's reach once the faults stop: held by a consumer that was
	// killed, or handed back with a backoff.
	redelivery() time.Duration
	close()
}

func newTransport(ctx context.Context, cfg *Config) (transport, error) {
	switch cfg.Transport {
	case "kafka":
		return newKafka(ctx, cfg)
	case "sqs":
		return newSQS(ctx, cfg)
	case "nats":
		return newNATS(ctx, cfg)
	case "rabbitmq":
		return newRabbit(ctx, cfg)
	default:
		return nil, fmt.Errorf("chaos: transport %q is not available", cfg.Transport)
	}
}

// send is one produce of an event at an offset from the start.
type send struct {
	e  event
	at time.Duration
}

// schedule spreads the events over about d, in order, and places the
// second copy of each event marked Twice at a random later time.
func schedule(events []event, d time.Duration, seed uint64) []send {
	r := rand.New(rand.NewPCG(seed, seed>>1))
	gap := d / time.Duration(max(len(events), 1))
	out := make([]send, 0, len(events)+len(events)/10)
	for i, e := range events {
		at := time.Duration(i) * gap
		out = append(out, send{e: e, at: at})
		if e.Twice {
			out = append(out, send{e: e, at: at + time.Duration(r.Int64N(int64(d-at)+1))})
		}
	}
	slices.SortStableFunc(out, func(a, b send) int { return cmp.Compare(a.at, b.at) })
	return out
}

// produce sends every event through tr, and a second copy of those marked
// Twice later, spread over about d.
func produce(ctx context.Context, tr transport, events []event, d time.Duration, seed uint64) error {
	start := time.Now()
	for _, s := range schedule(events, d, seed) {
		if wait := time.Until(start.Add(s.at)); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		if err := retrySend(ctx, func() error { return tr.send(ctx, s.e) }); err != nil {
			return err
		}
	}
	return nil
}

// retrySend retries a send that failed, as a producer's relay does: the
// event id stays the same, so a send that did go through becomes a
// duplicate, which is what the inbox is for.
func retrySend(ctx context.Context, send func() error) error {
	var err error
	for range 50 {
		if err = send(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return err
}

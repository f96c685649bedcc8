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
	// produce sends every event, and a second copy of those marked Twice
	// later, spread over about d.
	produce(ctx context.Context, events []event, d time.Duration, seed uint64) error
	// consumerArgs tell a consumer process where the broker is.
	consumerArgs() []string
	// injectFault makes the broker fail a request, where it can; it reports
	// whether it did.
	injectFault(r *rand.Rand) bool
	close()
}

func newTransport(ctx context.Context, cfg *Config) (transport, error) {
	switch cfg.Transport {
	case "kafka":
		return newKafka(ctx, cfg)
	case "sqs":
		return newSQS(ctx, cfg)
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

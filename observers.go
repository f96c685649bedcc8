package inbox

import "context"

// Observers returns an Observer that tells each of obs in turn, such as a
// tracer and a metrics exporter together. TxStart passes each the context
// the one before it returned; TxEnd gets the context the last returned.
// It is also a BreakerObserver, telling those of obs that are. Nil
// observers are left out.
func Observers(obs ...Observer) Observer {
	var m multiObserver
	for _, o := range obs {
		if o != nil {
			m = append(m, o)
		}
	}
	return m
}

type multiObserver []Observer

func (m multiObserver) TxStart(ctx context.Context, consumer string, msgs []Message) context.Context {
	for _, o := range m {
		ctx = o.TxStart(ctx, consumer, msgs)
	}
	return ctx
}

func (m multiObserver) TxEnd(ctx context.Context, e *TxEvent) {
	for _, o := range m {
		o.TxEnd(ctx, e)
	}
}

func (m multiObserver) DeadLettered(ctx context.Context, e *DeadLetterEvent) {
	for _, o := range m {
		o.DeadLettered(ctx, e)
	}
}

func (m multiObserver) Paused(ctx context.Context, e *PauseEvent) {
	for _, o := range m {
		if b, ok := o.(BreakerObserver); ok {
			b.Paused(ctx, e)
		}
	}
}

func (m multiObserver) Resumed(ctx context.Context, e *PauseEvent) {
	for _, o := range m {
		if b, ok := o.(BreakerObserver); ok {
			b.Resumed(ctx, e)
		}
	}
}

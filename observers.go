package inbox

import "context"

// Observers returns an Observer that tells each of obs in turn, such as a
// tracer and a metrics exporter together. TxStart passes each the context
// the one before it returned; TxEnd gets the context the last returned.
// The result has a method Unwrap() []Observer that returns obs, through
// which inboxtransport's breaker tells those of obs that are its
// BreakerObservers. Nil observers are left out.
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

// Unwrap returns the observers m tells, so that a package with events of its
// own (inboxtransport's breaker) can tell those of them that listen.
func (m multiObserver) Unwrap() []Observer { return m }

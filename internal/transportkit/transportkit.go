// Package transportkit is the plumbing that the transport adapters
// (inboxkafka, inboxnats, inboxrabbit, inboxsqs) and their shared loop
// (inboxtransport) use, and that a transport's user never sees. The lab's
// fault injectors share its Sleep.
package transportkit

import (
	"context"
	"fmt"
	"time"
)

// Sleep waits for d, or until ctx is done, and reports whether ctx is
// still not done.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Fill is the rest of a batch whose first value a receive has taken: it
// calls take with each value ch yields, up to n of them, taking what ch
// holds ready and, when wait is positive, what arrives within wait. It
// stops early when ch is closed, when nothing is ready and the wait is
// over (or zero), and, while waiting, when ctx is done or stop is closed
// (a nil stop never is).
func Fill[T any](ctx context.Context, ch <-chan T, n int, wait time.Duration, stop <-chan struct{}, take func(T)) {
	var over <-chan time.Time // the wait is over; nil waits for nothing
	if wait > 0 && n > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		over = t.C
	}
	for range n {
		var v T
		ok := false
		if over == nil {
			select {
			case v, ok = <-ch:
			default:
			}
		} else {
			select {
			case v, ok = <-ch:
			case <-over:
			case <-ctx.Done():
			case <-stop:
			}
		}
		if !ok {
			return
		}
		take(v)
	}
}

// Complete is the start of a transport's New: it returns *c with its
// defaults (withDefaults), checked (validate), or an error naming what is
// missing when c is nil. name prefixes that error, required lists the
// fields that have no default.
func Complete[C any](name string, c *C, required string, withDefaults func(*C) C, validate func(*C) error) (C, error) {
	if c == nil {
		var zero C
		return zero, fmt.Errorf("%s: New: config is nil: %s are required", name, required)
	}
	cfg := withDefaults(c)
	return cfg, validate(&cfg)
}

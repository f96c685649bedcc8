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

package inboxkafka

import (
	"math/rand/v2"
	"time"
)

// backoff is a capped exponential backoff with jitter.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

// next returns the wait before the next try: between half and all of a
// bound that starts at min and doubles on each call, up to max.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	if b.cur <= 0 {
		return 0
	}
	return b.cur/2 + rand.N(b.cur/2+1)
}

// reset starts again from min.
func (b *backoff) reset() { b.cur = 0 }

package outbox

import (
	"context"
	"maps"
	"slices"
	"sync"
)

// MemorySink keeps the records it is given in memory, in the order it
// confirmed them, for tests and benchmarks. Reject, if set, decides per
// record: a nil error confirms it. The zero value confirms everything.
//
// It is a KeyOrderSink that keeps order: within a call, once a record of a
// key in ordered mode (KeySeq above 0) fails, the later records of that key
// are answered ErrKeyStopped, without asking Reject.
type MemorySink struct {
	// Reject, if set, returns the error that the sink answers for rec;
	// wrap it with Unavailable to play an unreachable broker.
	Reject func(rec Record) error
	// Discard keeps only the count of confirmed records, for benchmarks.
	Discard bool

	mu        sync.Mutex
	records   []Record
	confirmed int
	calls     int
}

// Publish implements Sink.
func (s *MemorySink) Publish(ctx context.Context, recs []Record) []error {
	errs := make([]error, len(recs))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	var stopped map[string]bool
	for i, rec := range recs {
		if rec.KeySeq > 0 && stopped[string(rec.Key)] {
			errs[i] = ErrKeyStopped
			continue
		}
		if err := ctx.Err(); err != nil {
			errs[i] = err
		} else if s.Reject != nil {
			errs[i] = s.Reject(rec)
		}
		if errs[i] != nil {
			if rec.KeySeq > 0 {
				if stopped == nil {
					stopped = map[string]bool{}
				}
				stopped[string(rec.Key)] = true
			}
			continue
		}
		s.confirmed++
		if !s.Discard {
			rec.Key = slices.Clone(rec.Key)
			rec.Payload = slices.Clone(rec.Payload)
			rec.Headers = maps.Clone(rec.Headers)
			s.records = append(s.records, rec)
		}
	}
	return errs
}

// KeepsKeyOrder implements KeyOrderSink: it reports true.
func (s *MemorySink) KeepsKeyOrder() bool { return true }

// Records returns a copy of the confirmed records, in order.
func (s *MemorySink) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.records)
}

// Confirmed counts the confirmed records.
func (s *MemorySink) Confirmed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed
}

// Calls counts the calls of Publish.
func (s *MemorySink) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

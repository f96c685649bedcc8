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
	for i, rec := range recs {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if s.Reject != nil {
			if errs[i] = s.Reject(rec); errs[i] != nil {
				continue
			}
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

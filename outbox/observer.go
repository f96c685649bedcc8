package outbox

import (
	"context"
	"time"
)

// Observer watches a relay, for metrics, traces and logs. Set it in
// RelayConfig.Observer. It is called from the relay's goroutine: it must be
// quick, and safe for concurrent use when several relays share it.
type Observer interface {
	// Claimed is called after each claim, including those that found
	// nothing.
	Claimed(ctx context.Context, e *ClaimEvent)
	// Published is called after each batch was offered to the sink.
	Published(ctx context.Context, e *PublishEvent)
	// Parked is called after an event was parked for an operator.
	Parked(ctx context.Context, e *ParkEvent)
}

// ClaimEvent describes one claim.
type ClaimEvent struct {
	Rows     int
	Duration time.Duration
}

// PublishEvent describes the publishing of one claimed batch.
type PublishEvent struct {
	// Records is the batch's size; Confirmed, Rejected and Unavailable
	// count the records by outcome (Unavailable includes those not tried).
	Records     int
	Confirmed   int
	Rejected    int
	Unavailable int
	// MaxAge is the age at the claim of the oldest confirmed record: the
	// outbox's lag as this batch saw it.
	MaxAge   time.Duration
	Duration time.Duration
}

// ParkEvent describes an event parked after its rejections.
type ParkEvent struct {
	ID         string
	Topic      string
	Rejections int
	Err        error
}

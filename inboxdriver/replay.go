package inboxdriver

import (
	"context"
	"time"

	"github.com/txinbox/inbox/inboxtype"
)

// ReplayStore records requests to replay dead letters. Replaying runs the
// consumer's handler, which only the application has: an operator marks dead
// letters for replay ('inbox deadletters replay', or
// inbox.Admin.DeadLetterReplay), and the application replays the
// marked ones with its handler (inbox.Client.ProcessReplays).
//
// It is optional, as EffectStore is: a store that keeps the requests also
// implements ReplayStore, and the client finds it with a type assertion. Its
// statements use a column that a later migration adds (005), so the other
// dead-letter methods keep working on tables that lack it.
type ReplayStore interface {
	// DeadLetterMarkReplay marks dead letters for replay at p.Now: the one
	// with id p.ID, or, when p.ID is 0, every one of p.Consumer. It marks
	// only those that have a message id and are not marked yet, and
	// returns how many it marked. Two concurrent marks of one dead letter
	// mark it once. With p.DryRun it marks none, and returns how many it
	// would mark.
	DeadLetterMarkReplay(ctx context.Context, p *DeadLetterMarkParams) (int64, error)

	// DeadLetterListMarked lists p.Consumer's dead letters that are marked
	// for replay, oldest mark first, at most p.Limit.
	DeadLetterListMarked(ctx context.Context, p *inboxtype.DeadLetterListParams) ([]*inboxtype.DeadLetter, error)

	// DeadLetterUnmarkReplay clears the replay mark of one dead letter and
	// reports whether it was marked.
	DeadLetterUnmarkReplay(ctx context.Context, id int64) (bool, error)
}

// DeadLetterMarkParams select the dead letters a mark for replay applies to.
type DeadLetterMarkParams struct {
	// ID is one dead letter, or 0 for every one of Consumer.
	ID int64
	// Consumer is the consumer whose dead letters are marked when ID is 0.
	Consumer string
	// Now is the time of the request, recorded with the mark.
	Now time.Time
	// DryRun counts the dead letters the mark would apply to, and marks
	// none.
	DryRun bool
}

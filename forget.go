package inbox

import (
	"context"
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// Forget deletes consumer's inbox row for id, so that the next delivery of
// that message is applied again. It is for a deliberate replay, such as
// after fixing a handler that applied a message wrongly; the effect-ledger
// rows of the message go with it, so its remote calls are made again, with
// the same keys (a provider that honours them returns its first results).
// To settle one remote call whose outcome is unknown, use EffectResolve
// instead. It returns an error wrapping ErrNotFound when there is neither
// such a row nor a ledger entry of the message.
func (a *Admin) Forget(ctx context.Context, consumer, id string) error {
	canon, err := a.check(consumer, id)
	if err != nil {
		return err
	}
	ok, err := a.driver.Forget(ctx, &inboxdriver.ForgetParams{Consumer: consumer, ID: canon})
	if err != nil {
		return fmt.Errorf("inbox: forget %s/%s: %w", consumer, canon, a.classify(err))
	}
	if !ok {
		return fmt.Errorf("inbox: forget %s/%s: %w", consumer, canon, ErrNotFound)
	}
	a.logger.InfoContext(ctx, "inbox: forgot a message; its next delivery applies again", "consumer", consumer, "id", canon)
	return nil
}

// ForgetCount counts, deleting nothing, the rows that Forget(ctx,
// consumer, id) would delete now: the inbox row and the effect-ledger
// entries of the message, so that a tool says what it will delete before
// it does. It returns an error wrapping ErrNotFound, as Forget does, when
// there are none.
func (a *Admin) ForgetCount(ctx context.Context, consumer, id string) (inboxtype.ForgetCounts, error) {
	canon, err := a.check(consumer, id)
	if err != nil {
		return inboxtype.ForgetCounts{}, err
	}
	n, err := a.driver.ForgetCount(ctx, &inboxdriver.ForgetParams{Consumer: consumer, ID: canon})
	if err != nil {
		return inboxtype.ForgetCounts{}, fmt.Errorf("inbox: count the rows to forget of %s/%s: %w", consumer, canon, a.classify(err))
	}
	if n.InboxRows == 0 && n.Effects == 0 {
		return inboxtype.ForgetCounts{}, fmt.Errorf("inbox: forget %s/%s: %w", consumer, canon, ErrNotFound)
	}
	return n, nil
}

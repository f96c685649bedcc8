package inboxkafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ClientOpts returns the kgo options that a client needs to run a Consumer.
// Build the client with them, together with your own seed brokers, group
// and topics:
//
//	opts := append(inboxkafka.ClientOpts(),
//		kgo.SeedBrokers("localhost:9092"),
//		kgo.ConsumerGroup("billing"),
//		kgo.ConsumeTopics("orders"),
//	)
//	cl, err := kgo.NewClient(opts...)
//
// They are:
//   - kgo.DisableAutoCommit: offsets are committed by the consumer, and only
//     for records whose transaction committed;
//   - kgo.BlockRebalanceOnPoll: a rebalance waits until the polled records
//     are handed to their partitions' workers, so that the revoke below sees
//     all of them;
//   - kgo.OnPartitionsRevoked: stops the revoked partitions' workers, lets
//     their transactions in flight finish (or abandons them after
//     Config.ShutdownTimeout), commits the offsets of what the database
//     committed, and only then lets the rebalance go on;
//   - kgo.OnPartitionsLost: stops the lost partitions' workers and commits
//     nothing for them;
//   - kgo.WithHooks, with a hook that ties the client to the Consumer that New
//     makes for it.
//
// Each call returns options for one client. Do not set
// kgo.OnPartitionsRevoked or kgo.OnPartitionsLost yourself: the last option
// wins, and kgo wraps the callbacks, so New cannot tell that yours replaced
// these; the consumer would then neither commit before a rebalance nor stop
// the workers of partitions it no longer owns.
func ClientOpts() []kgo.Opt {
	b := &binding{}
	return []kgo.Opt{
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(b.onRevoked),
		kgo.OnPartitionsLost(b.onLost),
		kgo.WithHooks(b),
	}
}

// rebalancer is what a binding calls on a rebalance.
type rebalancer interface {
	revoked(ctx context.Context, partitions map[string][]int32)
	lost(ctx context.Context, partitions map[string][]int32)
	groupError(err error)
}

// binding ties a client built with one ClientOpts call to the Consumer that
// runs on it. It is the kgo hook through which New finds it.
type binding struct {
	mu       sync.Mutex
	clients  []*kgo.Client
	consumer rebalancer
}

// OnNewClient implements kgo.HookNewClient: it records the client, so that
// New can tell that the options were used for this client and no other.
func (b *binding) OnNewClient(cl *kgo.Client) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.clients = append(b.clients, cl)
}

// OnGroupManageError implements kgo.HookGroupManageError: it logs errors of
// the group management loop, which kgo otherwise only retries.
func (b *binding) OnGroupManageError(err error) {
	if r := b.target(); r != nil {
		r.groupError(err)
	}
}

func (b *binding) target() rebalancer {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.consumer
}

func (b *binding) onRevoked(ctx context.Context, _ *kgo.Client, partitions map[string][]int32) {
	if r := b.target(); r != nil {
		r.revoked(ctx, partitions)
	}
}

func (b *binding) onLost(ctx context.Context, _ *kgo.Client, partitions map[string][]int32) {
	if r := b.target(); r != nil {
		r.lost(ctx, partitions)
	}
}

// attach makes r the target of b's callbacks.
func (b *binding) attach(r rebalancer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.consumer != nil {
		return errors.New("inboxkafka: the client already runs a Consumer: make one client per Consumer")
	}
	b.consumer = r
	return nil
}

// checkClient checks that cl cannot commit an offset behind the consumer's
// back, and returns the binding of its ClientOpts. Each error names the
// option that is wrong. It cannot see whether the callbacks of ClientOpts
// were replaced: kgo wraps whichever is set last.
func checkClient(cl *kgo.Client, deadLetterTopic string) (*binding, error) {
	if group, _ := cl.OptValue(kgo.ConsumerGroup).(string); group == "" {
		return nil, errors.New("inboxkafka: the client has no kgo.ConsumerGroup: the consumer commits offsets to a group")
	}
	// kgo itself refuses kgo.GreedyAutoCommit with kgo.AutoCommitMarks.
	disabled, _ := cl.OptValue(kgo.DisableAutoCommit).(bool)
	marks, _ := cl.OptValue(kgo.AutoCommitMarks).(bool)
	if !disabled && !marks {
		return nil, errors.New("inboxkafka: the client auto-commits polled offsets: set kgo.DisableAutoCommit (ClientOpts does) or kgo.AutoCommitMarks; auto-commit would commit records whose transaction has not committed")
	}
	if block, _ := cl.OptValue(kgo.BlockRebalanceOnPoll).(bool); !block {
		return nil, errors.New("inboxkafka: the client lacks kgo.BlockRebalanceOnPoll (ClientOpts sets it): without it a rebalance can move a partition while its polled records are handed out")
	}
	hooks, _ := cl.OptValue(kgo.WithHooks).([]kgo.Hook)
	var found []*binding
	for _, h := range hooks {
		if b, ok := h.(*binding); ok {
			found = append(found, b)
		}
	}
	switch len(found) {
	case 0:
		return nil, errors.New("inboxkafka: the client was not built with inboxkafka.ClientOpts(): its kgo.OnPartitionsRevoked and kgo.OnPartitionsLost callbacks commit before a rebalance")
	case 1:
	default:
		return nil, errors.New("inboxkafka: the client was built with inboxkafka.ClientOpts() more than once: pass it once")
	}
	b := found[0]
	b.mu.Lock()
	clients := slices.Clone(b.clients)
	b.mu.Unlock()
	if len(clients) != 1 || clients[0] != cl {
		return nil, errors.New("inboxkafka: the options of one inboxkafka.ClientOpts() call were used for more than one client: call it once per client")
	}
	if deadLetterTopic != "" {
		topics, _ := cl.OptValue(kgo.ConsumeTopics).([]string)
		if slices.Contains(topics, deadLetterTopic) {
			return nil, fmt.Errorf("inboxkafka: Config.DeadLetterTopic %q is one of the client's kgo.ConsumeTopics: a dead letter would be consumed again", deadLetterTopic)
		}
	}
	return b, nil
}

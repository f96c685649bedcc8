// Package inboxcli is the inbox command: every subcommand, writing to the
// writers it is given, so that tests can run it in process. cmd/inbox is a
// thin main over Main.
package inboxcli

import (
	"context"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/internal/command"
)

// Env is what a command may touch of the outside world.
type Env = command.Env

// program is the inbox command: the operations on a deployment's tables.
// The demo, the chaos runs and the benchmarks are the lab's
// (cmd/inboxlab), which links in-process brokers that this one must not.
var program = &command.Program{
	Name:  "inbox",
	About: "inbox: exactly-once effects from at-least-once delivery, with a transactional inbox.",
	Commands: map[string]command.Command{
		"migrate":     {Summary: "create or upgrade the inbox tables: up, down, status, sql", Run: runMigrate},
		"purge":       {Summary: "delete inbox rows older than a window, in batches", Run: runPurge},
		"forget":      {Summary: "delete one inbox row, so that its message applies again", Run: runForget},
		"stats":       {Summary: "rows per consumer, the oldest row's age, the table size", Run: runStats},
		"deadletters": {Summary: "messages that will not be applied: list, show, replay, delete", Run: runDeadLetters},
		"partitions":  {Summary: "the day partitions of a partitioned inbox: list, premake, drop", Run: runPartitions},
		"admin":       {Summary: "serve the admin page: consumers, dead letters (replay), stuck effects, the outbox", Run: runAdmin, Service: true},
		"doctor":      {Summary: "check a deployment: schema, indexes, retention, clocks, grants, stuck work", Run: runDoctor},
		"outbox":      {Summary: "the producer's events not yet published: stats, list, show, retry, park, unpark", Run: runOutbox},
		"relay":       {Summary: "publish the outbox's events to Kafka, NATS or RabbitMQ", Run: runRelay, Service: true},
	},
}

// Main runs the command line args (without the program name) and returns
// the exit status: 0 on success, 1 when the command failed, 2 for a usage
// mistake. Errors are printed to e.Stderr as one line.
func Main(ctx context.Context, args []string, e *Env) int {
	return program.Main(ctx, args, e)
}

// checkConsumer validates a --consumer flag before it reaches a database,
// which would refuse a NUL byte or invalid UTF-8 with an SQL error.
func checkConsumer(name string) error {
	if err := inbox.ValidateConsumer(name); err != nil {
		return command.Usagef("--consumer: %v", err)
	}
	return nil
}

// Run runs the process's command line and exits with its status: SIGINT
// and SIGTERM end the command after its cleanup, with 130 or 143.
func Run() { program.Run() }

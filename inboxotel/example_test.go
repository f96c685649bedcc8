package inboxotel_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxotel"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/outbox"
)

// Trace an event from the producer's transaction, through the relay, to
// the consumer's transaction.
func Example() {
	ctx := context.Background()
	// The application sets up the SDK and its exporter; the library uses
	// the API only.
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(ctx)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})

	obs, err := inboxotel.New(nil) // the global providers and propagator
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	d, err := inboxpgx.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	// Producer: a create span per event, its context stored in the row.
	ob, err := outbox.New[pgx.Tx](d, &outbox.Config{Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	// Relay: a send span per publish, and the relay's metrics.
	var sink outbox.Sink = &outbox.MemorySink{} // inboxkafka's or inboxsqs's sink
	relay, err := ob.NewRelay(obs.Sink(sink), &outbox.RelayConfig{Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	go relay.Run(ctx)
	// Consumer: a process span per transaction, continuing the trace in
	// the message's headers.
	client, err := inbox.NewClient(d, &inbox.Config{Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	_ = client
}

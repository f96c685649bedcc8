package inboxprom_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxprom"
	"github.com/txinbox/inbox/outbox"
)

// Wire the metrics of a client and a relay into a registry of the
// application's, and serve them.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	d, err := inboxpgx.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	obs, err := inboxprom.New(inboxprom.Config{Registerer: reg})
	if err != nil {
		log.Fatal(err)
	}
	client, err := inbox.NewClient(d, &inbox.Config{Observer: obs, ReplayHorizon: 7 * 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	// Rows, coverage, headroom, stuck effects and the outbox, read from
	// the store at most once a minute.
	if _, err := inboxprom.NewStatsCollector(client.Admin(), inboxprom.StatsConfig{Registerer: reg}); err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New[pgx.Tx](d, nil)
	if err != nil {
		log.Fatal(err)
	}
	relay, err := ob.NewRelay(&outbox.MemorySink{}, &outbox.RelayConfig{Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	go relay.Run(ctx)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Fatal(http.ListenAndServe("127.0.0.1:9090", nil))
}

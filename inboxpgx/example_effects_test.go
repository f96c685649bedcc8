package inboxpgx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxhttp"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/testdb"
)

// A card capture through a provider that honours Idempotency-Key. The first
// delivery captures and then fails before its commit, as a process that
// dies there would; the redelivery finds the capture in the effects ledger
// and does not call the provider again; the third delivery is a duplicate.
func ExampleClient_Effect() {
	ctx := context.Background()
	pool, schema, cleanup, err := exampleSchema(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cleanup()
	driver, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	if err != nil {
		fmt.Println(err)
		return
	}
	client, err := inbox.NewClient(driver, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	// The provider: a repeated key gets the first response.
	captures := 0
	responses := map[string]string{}
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(inboxhttp.IdempotencyKeyHeader)
		if _, ok := responses[key]; !ok {
			captures++
			responses[key] = fmt.Sprintf("cap_%d", captures)
		}
		_, _ = io.WriteString(w, responses[key])
	}))
	defer provider.Close()

	// inboxhttp.Transport sets the header from the context Effect passes.
	httpClient := &http.Client{Transport: &inboxhttp.Transport{}}
	capture := func(ctx context.Context, key string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL+"/captures", strings.NewReader(`{"amount_cents":100}`))
		if err != nil {
			return nil, err
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}

	deliveries := 0
	billing := inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		captureID, err := client.Effect(ctx, msg, "capture", capture, nil)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "payments"}.Sanitize()+
			` (order_id, capture_id) VALUES ($1, $2)`, "order-1", string(captureID)); err != nil {
			return err
		}
		deliveries++
		if deliveries == 1 {
			return errors.New("connection lost before the commit")
		}
		fmt.Println("recorded capture", string(captureID))
		return nil
	})

	msg := inbox.Message{ID: "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b", Payload: []byte(`{"order_id":"order-1"}`)}
	for range 3 {
		outcome, err := client.Process(ctx, "billing", msg, billing)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(outcome)
	}
	fmt.Println("captures at the provider:", captures)
	fmt.Println("idempotency key:", inbox.EffectKey("billing", msg.ID, "capture"))
	// Output:
	// error: inbox: handler billing/0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b: connection lost before the commit
	// recorded capture cap_1
	// applied
	// duplicate
	// captures at the provider: 1
	// idempotency key: billing:0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b:capture
}

func ExampleEffectKey() {
	fmt.Println(inbox.EffectKey("billing", "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b", "capture"))
	fmt.Println(inbox.EffectKey("facturación", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "send receipt"))
	fmt.Println(inbox.EffectKey(strings.Repeat("consumer-", 14), strings.Repeat("i", 200), "capture"))
	// Output:
	// billing:0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b:capture
	// facturaci%C3%B3n:01ARZ3NDEKTSV4RRFFQ69G5FAV:send%20receipt
	// sha256:a0c3c6a9364c514eed6e34420fbb941dff984eea43113326437138ea048a0f8c
}

// exampleSchema connects to the test database and creates a migrated schema
// with a payments table, which cleanup drops.
func exampleSchema(ctx context.Context) (*pgxpool.Pool, string, func(), error) {
	url, err := testdb.URLOrError()
	if err != nil {
		return nil, "", nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, "", nil, err
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", nil, err
	}
	schema := "inbox_example_" + testdb.RandomSuffix()
	cleanup := func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		pool.Close()
	}
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	if err == nil {
		var m *inboxmigrate.Migrator
		if m, err = inboxmigrate.New(d); err == nil {
			_, err = m.Up(ctx)
		}
	}
	if err == nil {
		_, err = pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{schema, "payments"}.Sanitize()+
			` (order_id text PRIMARY KEY, capture_id text NOT NULL)`)
	}
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	return pool, schema, cleanup, nil
}

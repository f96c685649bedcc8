package inboxpgx_test

// Crash tests of Client.Effect, against the real Postgres store and two
// payment providers on httptest: one honours Idempotency-Key (a repeated
// key gets the first response and captures nothing), one ignores it (every
// request captures).
//
// # How a crash is simulated
//
// The process is not killed. A fault hook (fault.WithHook) fires at the
// named point and does what a dying process leaves behind: it rolls back the
// handler's transaction, as the server does when the client's connection
// drops, and then panics with a crash value, so that none of the code after
// the point runs. Everything committed before the point stays committed
// (the ledger's own short transactions, the provider's capture); nothing
// after it happens. The points inside the handler (EffectAfterStarted,
// EffectAfterCall) panic through the handler, and the client turns the
// panic into a PanicError after another (harmless) rollback; the point after
// the handler (AfterEffectBeforeCommit) panics out of Process, and the test
// recovers it. Either way the test treats the delivery as crashed and, as
// the broker would, delivers the message again, without the hook.
//
// A message whose delivery fails with a permanent error is dead-lettered,
// as the transport adapters do.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxhttp"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/internal/testdb"
)

// provider is a payment provider that captures on POST /captures.
type provider struct {
	honours bool
	srv     *httptest.Server

	mu       sync.Mutex
	captures []string          // capture ids, in order
	keys     []string          // the Idempotency-Key of each request
	byKey    map[string][]byte // first response per key, when it honours keys
}

func newProvider(t *testing.T, honoursKeys bool) *provider {
	p := &provider{honours: honoursKeys, byKey: map[string][]byte{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/captures" {
		http.NotFound(w, r)
		return
	}
	key := r.Header.Get(inboxhttp.IdempotencyKeyHeader)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, key)
	if p.honours {
		if key == "" {
			http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
			return
		}
		if resp, ok := p.byKey[key]; ok {
			w.Header().Set("Idempotent-Replayed", "true")
			_, _ = w.Write(resp)
			return
		}
	}
	id := fmt.Sprintf("cap_%d", len(p.captures)+1)
	p.captures = append(p.captures, id)
	if p.honours {
		p.byKey[key] = []byte(id)
	}
	_, _ = io.WriteString(w, id)
}

func (p *provider) state() (captures, keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.captures...), append([]string(nil), p.keys...)
}

// capture is the EffectFunc: it posts a capture with the key set by
// inboxhttp.Transport from ctx.
func (p *provider) capture(httpClient *http.Client) inbox.EffectFunc {
	return func(ctx context.Context, key string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.srv.URL+"/captures", strings.NewReader(`{"amount_cents":100}`))
		if err != nil {
			return nil, err
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("provider: %s: %s", resp.Status, body)
		}
		return body, nil
	}
}

// effectEnv is a migrated schema with a payments table, a client over it and
// one provider.
type effectEnv struct {
	t        *testing.T
	client   *inbox.Client[pgx.Tx]
	payments string
	provider *provider
	http     *http.Client
	// tx is the handler's transaction of the delivery in progress, for the
	// crash hook to roll back.
	tx pgx.Tx
}

const consumer = "billing"

func newEffectEnv(t *testing.T, honoursKeys bool) *effectEnv {
	t.Helper()
	pool := testPool(t)
	schema := testdb.Schema(t)
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: schema}})
	require.NoError(t, err)
	m, err := inboxmigrate.New(d)
	require.NoError(t, err)
	_, err = m.Up(context.Background())
	require.NoError(t, err)
	payments := pgx.Identifier{schema, "payments"}.Sanitize()
	_, err = pool.Exec(context.Background(), `CREATE TABLE `+payments+` (message_id uuid PRIMARY KEY, capture_id text NOT NULL)`)
	require.NoError(t, err)
	client, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	return &effectEnv{
		t:        t,
		client:   client,
		payments: payments,
		provider: newProvider(t, honoursKeys),
		http:     &http.Client{Transport: &inboxhttp.Transport{}},
	}
}

// handler captures with the provider, then records the payment in the
// message's transaction.
func (e *effectEnv) handler(opts *inbox.EffectOpts) inbox.Handler[pgx.Tx] {
	return inbox.HandlerFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		e.tx = tx
		captureID, err := e.client.Effect(ctx, msg, "capture", e.provider.capture(e.http), opts)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+e.payments+` (message_id, capture_id) VALUES ($1, $2)`, msg.ID, string(captureID))
		return err
	})
}

// crash is the panic value of a simulated crash.
type crash struct{ at fault.Point }

// crashAt returns a context under which a delivery dies at point.
func (e *effectEnv) crashAt(point fault.Point) context.Context {
	return fault.WithHook(context.Background(), func(p fault.Point) {
		if p != point {
			return
		}
		if e.tx != nil {
			_ = e.tx.Rollback(context.Background())
		}
		panic(crash{at: p})
	})
}

// delivery is the result of delivering a message once.
type delivery struct {
	outcome inbox.Outcome
	err     error
	crashed bool
}

// deliver processes msg once under ctx, as a transport adapter would, and
// dead-letters it when it fails permanently.
func (e *effectEnv) deliver(ctx context.Context, msg inbox.Message, h inbox.Handler[pgx.Tx]) (d delivery) {
	e.t.Helper()
	e.tx = nil
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(crash); !ok {
					panic(r)
				}
				d.crashed = true
			}
		}()
		d.outcome, d.err = e.client.Process(ctx, consumer, msg, h)
	}()
	var pe *inbox.PanicError
	if errors.As(d.err, &pe) {
		if _, ok := pe.Value.(crash); ok {
			d = delivery{crashed: true}
		}
	}
	if d.err != nil && inbox.IsPermanent(d.err) {
		require.NoError(e.t, e.client.DeadLetter(context.Background(), inbox.DeadLetterParams{
			Consumer: consumer, Message: msg, Err: d.err, Attempts: 1,
		}))
	}
	return d
}

// requireCaptures checks the provider's captures and that every request
// carried the step's key.
func (e *effectEnv) requireCaptures(msg inbox.Message, captures, requests int) []string {
	e.t.Helper()
	caps, keys := e.provider.state()
	require.Len(e.t, caps, captures, "captures at the provider")
	require.Len(e.t, keys, requests, "requests to the provider")
	want := inbox.EffectKey(consumer, msg.ID, "capture")
	for i, k := range keys {
		require.Equal(e.t, want, k, "Idempotency-Key of request %d", i+1)
	}
	return caps
}

func (e *effectEnv) requirePayment(msg inbox.Message, captureID string) {
	e.t.Helper()
	rows, err := testPool(e.t).Query(context.Background(), `SELECT capture_id FROM `+e.payments+` WHERE message_id = $1`, msg.ID)
	require.NoError(e.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(e.t, err)
	require.Equal(e.t, []string{captureID}, ids, "payments recorded for the message")
}

func (e *effectEnv) requireNoPayment(msg inbox.Message) {
	e.t.Helper()
	var n int
	require.NoError(e.t, testPool(e.t).QueryRow(context.Background(), `SELECT count(*) FROM `+e.payments+` WHERE message_id = $1`, msg.ID).Scan(&n))
	require.Zero(e.t, n, "payments recorded for the message")
}

func (e *effectEnv) ledger(msg inbox.Message) *inboxtype.EffectEntry {
	e.t.Helper()
	es, err := e.client.Admin().EffectList(context.Background(), inboxtype.EffectListParams{Consumer: consumer, MessageID: msg.ID})
	require.NoError(e.t, err)
	require.Len(e.t, es, 1, "ledger entries of the message")
	return es[0]
}

func (e *effectEnv) requireParked(msg inbox.Message) *inboxtype.DeadLetter {
	e.t.Helper()
	dls, err := e.client.Admin().DeadLetterList(context.Background(), inboxtype.DeadLetterListParams{Consumer: consumer, Limit: 10})
	require.NoError(e.t, err)
	require.Len(e.t, dls, 1, "dead letters")
	require.Equal(e.t, msg.ID, dls[0].MessageID)
	require.Equal(e.t, inbox.ReasonUnknownOutcome, dls[0].Reason)
	return dls[0]
}

func (e *effectEnv) requireNotParked() {
	e.t.Helper()
	dls, err := e.client.Admin().DeadLetterList(context.Background(), inboxtype.DeadLetterListParams{Consumer: consumer, Limit: 10})
	require.NoError(e.t, err)
	require.Empty(e.t, dls, "dead letters")
}

var crashPoints = []struct {
	name  string
	point fault.Point
}{
	{"BetweenStartedAndCall", fault.EffectAfterStarted},
	{"BetweenCallAndDone", fault.EffectAfterCall},
	{"AfterDoneBeforeCommit", fault.AfterEffectBeforeCommit},
}

// TestEffectCrash crashes a delivery at each of the three points of an
// effect's path and delivers the message again.
//
// With the provider that honours Idempotency-Key, and the step declared
// idempotent (the default), exactly one capture happens in every case.
//
// With the provider that ignores the key, and the step declared
// NonIdempotent, at most one capture ever happens: a step found started but
// not done parks the message in the dead-letter store with the reason
// unknown_outcome, and is never called again until an operator settles it.
func TestEffectCrash(t *testing.T) {
	t.Parallel()
	for _, cp := range crashPoints {
		t.Run(cp.name, func(t *testing.T) {
			t.Parallel()
			t.Run("HonouringProvider", func(t *testing.T) {
				t.Parallel()
				testCrashHonouring(t, cp.point)
			})
			t.Run("IgnoringProviderNonIdempotent", func(t *testing.T) {
				t.Parallel()
				testCrashIgnoringNonIdempotent(t, cp.point)
			})
		})
	}
}

func testCrashHonouring(t *testing.T, point fault.Point) {
	e := newEffectEnv(t, true)
	h := e.handler(nil)
	msg := inbox.Message{ID: inboxtest.NewID()}

	d := e.deliver(e.crashAt(point), msg, h)
	require.True(t, d.crashed, "the delivery should crash at %s: %+v", point, d)
	e.requireNoPayment(msg)
	capturedBeforeCrash := 1
	if point == fault.EffectAfterStarted {
		capturedBeforeCrash = 0
	}
	e.requireCaptures(msg, capturedBeforeCrash, capturedBeforeCrash)
	entry := e.ledger(msg)
	if point == fault.AfterEffectBeforeCommit {
		require.Equal(t, inboxtype.EffectDone, entry.State)
	} else {
		require.Equal(t, inboxtype.EffectStarted, entry.State)
	}

	// The redelivery: a started step is called again with the same key, a
	// done one returns its stored result without a call.
	inboxtest.RequireApplied(t)(e.client.Process(context.Background(), consumer, msg, h))
	wantRequests := map[fault.Point]int{
		fault.EffectAfterStarted:      1, // the first call happens now
		fault.EffectAfterCall:         2, // called again; the provider replays
		fault.AfterEffectBeforeCommit: 1, // not called again
	}[point]
	caps := e.requireCaptures(msg, 1, wantRequests)
	e.requirePayment(msg, caps[0])
	entry = e.ledger(msg)
	require.Equal(t, inboxtype.EffectDone, entry.State)
	require.Equal(t, caps[0], string(entry.Result))

	inboxtest.RequireDuplicate(t)(e.client.Process(context.Background(), consumer, msg, h))
	e.requireCaptures(msg, 1, wantRequests)
	e.requireNotParked()
}

func testCrashIgnoringNonIdempotent(t *testing.T, point fault.Point) {
	e := newEffectEnv(t, false)
	h := e.handler(&inbox.EffectOpts{NonIdempotent: true})
	msg := inbox.Message{ID: inboxtest.NewID()}
	ctx := context.Background()

	d := e.deliver(e.crashAt(point), msg, h)
	require.True(t, d.crashed, "the delivery should crash at %s: %+v", point, d)
	captured := 1
	if point == fault.EffectAfterStarted {
		captured = 0
	}
	e.requireCaptures(msg, captured, captured)

	if point == fault.AfterEffectBeforeCommit {
		// The step was recorded done before the crash: its outcome is
		// known, and the redelivery uses the stored result.
		inboxtest.RequireApplied(t)(e.client.Process(ctx, consumer, msg, h))
		caps := e.requireCaptures(msg, 1, 1)
		e.requirePayment(msg, caps[0])
		inboxtest.RequireDuplicate(t)(e.client.Process(ctx, consumer, msg, h))
		e.requireCaptures(msg, 1, 1)
		e.requireNotParked()
		return
	}

	// The step was started and never recorded done: the outcome is
	// unknown, and the message is parked, however often it comes back.
	for range 3 {
		d = e.deliver(ctx, msg, h)
		require.ErrorIs(t, d.err, inbox.ErrUnknownOutcome)
		require.True(t, inbox.IsPermanent(d.err), "an unknown outcome is permanent: %v", d.err)
		require.Equal(t, inbox.ReasonUnknownOutcome, inbox.DeadLetterReason(d.err))
		e.requireCaptures(msg, captured, captured)
	}
	e.requireNoPayment(msg)
	dl := e.requireParked(msg)
	stuck, err := e.client.Admin().EffectList(ctx, inboxtype.EffectListParams{State: inboxtype.EffectStarted})
	require.NoError(t, err)
	require.Len(t, stuck, 1, "stuck steps")
	require.Equal(t, "capture", stuck[0].Step)

	// An operator checks with the provider and settles the step, then
	// replays the dead letter.
	caps, _ := e.provider.state()
	if len(caps) == 0 {
		require.NoError(t, e.client.Admin().EffectResolve(ctx, inbox.EffectResolveParams{
			Consumer: consumer, MessageID: msg.ID, Step: "capture", State: inboxtype.EffectFailed}))
	} else {
		require.NoError(t, e.client.Admin().EffectResolve(ctx, inbox.EffectResolveParams{
			Consumer: consumer, MessageID: msg.ID, Step: "capture", State: inboxtype.EffectDone, Result: []byte(caps[0])}))
	}
	inboxtest.RequireApplied(t)(e.client.ProcessDeadLetter(ctx, dl.ID, h))
	caps = e.requireCaptures(msg, 1, 1)
	e.requirePayment(msg, caps[0])
	inboxtest.RequireDuplicate(t)(e.client.Process(ctx, consumer, msg, h))
	e.requireCaptures(msg, 1, 1)
}

// TestEffectCrashWrongDeclarationCapturesTwice is the control of
// TestEffectCrash: the provider ignores the key but the step is declared
// idempotent, and a crash between the call and done captures twice. It
// shows that the harness sees a double capture, and why the declaration
// matters.
func TestEffectCrashWrongDeclarationCapturesTwice(t *testing.T) {
	t.Parallel()
	e := newEffectEnv(t, false)
	h := e.handler(nil)
	msg := inbox.Message{ID: inboxtest.NewID()}
	d := e.deliver(e.crashAt(fault.EffectAfterCall), msg, h)
	require.True(t, d.crashed)
	inboxtest.RequireApplied(t)(e.client.Process(context.Background(), consumer, msg, h))
	e.requireCaptures(msg, 2, 2)
}

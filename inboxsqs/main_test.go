// The tests of inboxsqs run the adapter against goaws v0.5.4, an SQS
// emulator, in this process (aws-sdk-go-v2 over HTTP, JSON protocol), with
// the real Postgres store (inboxpgx over internal/testdb). Each case counts
// the effect rows per event id to check that it was applied exactly once.
//
// goaws keeps its queues in global state, so the tests that use it do not
// call t.Parallel: they run one at a time, each on queues with random
// names. The unit tests of the adapter's logic run in parallel.
//
// # What goaws lacks, and where it is covered instead
//
//   - ApproximateReceiveCount is always 1. The end-to-end tests reach the
//     max-receives branch with MaxDeliveries 1; TestDecide covers the
//     decision for every receive count, and TestRetryDelay the backoff
//     that grows with it.
//   - It never returns MessageGroupId, and its group locking is broken (it
//     hands out a group's next message while an earlier one is in flight).
//     TestFIFOGroupOrder checks on goaws that order holds while goaws is
//     that eager; without group ids the adapter treats its messages as one
//     group. The sequencer's per-group behaviour (groups in parallel, order
//     within a group whatever the receive a message came in, a retried
//     message blocking its group) is covered by the TestSequencer tests.
//   - ChangeMessageVisibilityBatch is unsupported, so the adapter extends
//     and backs off visibility one message at a time.
//
// # Simulated crashes
//
// A consumer "crashes" at a fault point (internal/fault's hook) by losing
// its network to SQS for good, from inside the hook, before it can delete
// or change the visibility of the message: its test SQS client fails every
// later call and drops every later answer. A crash before commit also
// terminates the transaction's Postgres backend, so the commit fails as it
// would if the process had died. The crashed consumer is then stopped; the
// message comes back when its visibility timeout expires and a second
// consumer gets it. The chaos tests kill real processes at the same points.
package inboxsqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/models"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxpgx/inboxpgxtest"
	"github.com/txinbox/inbox/inboxsqs"
	"github.com/txinbox/inbox/inboxtransport/transporttest"
	"github.com/txinbox/inbox/internal/sqscount"
	"github.com/txinbox/inbox/internal/testdb"
)

func TestMain(m *testing.M) { transporttest.Main(m, transport) }

// Test timings. The visibility timeout is short so that redeliveries come
// quickly; every wait on it polls a condition with a deadline.
const (
	testVisibility = 2 * time.Second
	testWait       = time.Second
	waitDeadline   = 60 * time.Second
)

var (
	goawsOnce sync.Once
	goawsURL  string
	goawsRec  *recorder
)

// startGoaws starts the one goaws of this test binary: an httptest server
// over its router, behind a recorder, with its periodic tasks running so
// that visibility timeouts expire.
func startGoaws() (string, *recorder) {
	goawsOnce.Do(func() {
		logrus.SetLevel(logrus.ErrorLevel)
		// The outage matrix's queues (named outage-…) and those named
		// counted-… get the receive count that goaws does not keep: the
		// matrix checks that a poison message is dead-lettered after
		// exactly MaxDeliveries attempts, whatever receives an outage
		// cost it.
		goawsRec = newRecorder(sqscount.Handler(router.New(), func(u string) bool {
			return strings.Contains(u, "/outage-") || strings.Contains(u, "/counted-")
		}))
		srv := httptest.NewServer(goawsRec)
		u, err := url.Parse(srv.URL)
		if err != nil {
			panic(err)
		}
		models.CurrentEnvironment = models.Environment{
			Host:      u.Hostname(),
			Port:      u.Port(),
			Region:    "us-east-1",
			AccountID: "100010001000",
			QueueAttributeDefaults: models.EnvQueueAttributes{
				VisibilityTimeout:  30,
				MaximumMessageSize: 262144,
			},
		}
		go gosqs.PeriodicTasks(100*time.Millisecond, make(chan bool))
		goawsURL = srv.URL
	})
	return goawsURL, goawsRec
}

// recorder sits in front of goaws and records what the broker did: which
// messages it handed out, which visibility changes and deletes succeeded.
type recorder struct {
	next     http.Handler
	inflight atomic.Int64

	mu         sync.Mutex
	handles    map[string]string  // receipt handle → MessageId
	bodies     map[string]string  // receipt handle → body
	deliveries map[string]int     // MessageId → times handed out
	visibility map[string][]int32 // MessageId → visibility timeouts set
	deleted    map[string]int     // MessageId → deletes that succeeded
	// beforeDelete, if set, is called with the bodies of the messages of
	// each DeleteMessageBatch, before goaws deletes them.
	beforeDelete func(bodies []string)
}

func newRecorder(next http.Handler) *recorder {
	return &recorder{
		next:       next,
		handles:    map[string]string{},
		bodies:     map[string]string{},
		deliveries: map[string]int{},
		visibility: map[string][]int32{},
		deleted:    map[string]int{},
	}
}

type captureWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *captureWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *captureWriter) Write(b []byte) (int, error) {
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	action := strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "AmazonSQS.")
	reqBody, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	if action == "DeleteMessageBatch" {
		r.guardDelete(reqBody)
	}
	cw := &captureWriter{ResponseWriter: w, status: http.StatusOK}
	r.next.ServeHTTP(cw, req)
	if cw.status != http.StatusOK {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch action {
	case "ReceiveMessage":
		var out struct {
			Messages []struct{ MessageId, ReceiptHandle, Body string }
		}
		_ = json.Unmarshal(cw.body.Bytes(), &out)
		for _, m := range out.Messages {
			r.handles[m.ReceiptHandle] = m.MessageId
			r.bodies[m.ReceiptHandle] = m.Body
			r.deliveries[m.MessageId]++
		}
	case "ChangeMessageVisibility":
		var in struct {
			ReceiptHandle     string
			VisibilityTimeout int32
		}
		_ = json.Unmarshal(reqBody, &in)
		id := r.handles[in.ReceiptHandle]
		r.visibility[id] = append(r.visibility[id], in.VisibilityTimeout)
	case "DeleteMessageBatch":
		var in struct {
			Entries []struct{ Id, ReceiptHandle string }
		}
		var out struct {
			Successful []struct{ Id string }
		}
		_ = json.Unmarshal(reqBody, &in)
		_ = json.Unmarshal(cw.body.Bytes(), &out)
		for _, s := range out.Successful {
			for _, e := range in.Entries {
				if e.Id == s.Id {
					r.deleted[r.handles[e.ReceiptHandle]]++
				}
			}
		}
	}
}

// guardDelete calls beforeDelete with the bodies of a DeleteMessageBatch.
func (r *recorder) guardDelete(reqBody []byte) {
	var in struct {
		Entries []struct{ ReceiptHandle string }
	}
	_ = json.Unmarshal(reqBody, &in)
	r.mu.Lock()
	guard := r.beforeDelete
	bodies := make([]string, 0, len(in.Entries))
	for _, e := range in.Entries {
		bodies = append(bodies, r.bodies[e.ReceiptHandle])
	}
	r.mu.Unlock()
	if guard != nil {
		guard(bodies)
	}
}

// guardDeletes makes fn check every DeleteMessageBatch, until t ends.
func (r *recorder) guardDeletes(t *testing.T, fn func(bodies []string)) {
	r.mu.Lock()
	r.beforeDelete = fn
	r.mu.Unlock()
	t.Cleanup(func() {
		r.mu.Lock()
		r.beforeDelete = nil
		r.mu.Unlock()
	})
}

func (r *recorder) delivered(messageID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deliveries[messageID]
}

func (r *recorder) deletes(messageID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deleted[messageID]
}

func (r *recorder) visibilities(messageID string) []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int32(nil), r.visibility[messageID]...)
}

// heartbeats counts the visibility extensions of a message to the full
// test timeout.
func (r *recorder) heartbeats(messageID string) int {
	n := 0
	for _, v := range r.visibilities(messageID) {
		if v == int32(testVisibility/time.Second) {
			n++
		}
	}
	return n
}

// harness is one test's world: goaws, an admin SQS client, a migrated
// schema, an inbox client and an effects table.
type harness struct {
	t        *testing.T
	endpoint string
	rec      *recorder
	admin    *sqs.Client
	pool     *pgxpool.Pool
	client   *inbox.Client[pgx.Tx]
	fx       *inboxpgxtest.Effects
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	endpoint, rec := startGoaws()
	st := inboxpgxtest.NewStore(t)
	return &harness{
		t:        t,
		endpoint: endpoint,
		rec:      rec,
		admin:    newSQSClient(endpoint, http.DefaultClient),
		pool:     st.Pool,
		client:   st.Client,
		fx:       st.Effects,
	}
}

func newSQSClient(endpoint string, hc sqs.HTTPClient) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   hc,
		Retryer:      aws.NopRetryer{},
	})
}

// createQueue creates a queue with a random name; fifo adds ".fifo".
func (h *harness) createQueue(name string, fifo bool) string {
	h.t.Helper()
	name = name + "-" + testdb.RandomSuffix()
	if fifo {
		name += ".fifo"
	}
	out, err := h.admin.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name)})
	require.NoError(h.t, err)
	return aws.ToString(out.QueueUrl)
}

// event is a test message body.
type event = inboxpgxtest.Event

// send sends body and returns its MessageId. group is required on a FIFO
// queue; each send gets its own deduplication id.
func (h *harness) send(queueURL, body, group string) string {
	h.t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(body)}
	if group != "" {
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(testdb.RandomSuffix())
	}
	out, err := h.admin.SendMessage(context.Background(), in)
	require.NoError(h.t, err)
	return aws.ToString(out.MessageId)
}

// queued is how many messages the queue holds, visible or in flight.
func (h *harness) queued(queueURL string) int {
	h.t.Helper()
	out, err := h.admin.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	require.NoError(h.t, err)
	n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	require.NoError(h.t, err)
	return n
}

// waitDrained waits until the queue shows no message. A message in flight
// is not shown either: when the test needs a message's delete, it waits
// for it with waitDeleted.
func (h *harness) waitDrained(queueURL string) {
	h.t.Helper()
	eventually(h.t, "queue drained", func() bool { return h.queued(queueURL) == 0 })
}

// waitDeleted waits until each of the messages was deleted at least once.
func (h *harness) waitDeleted(messageIDs ...string) {
	h.t.Helper()
	for _, id := range messageIDs {
		eventually(h.t, "message "+id+" deleted", func() bool { return h.rec.deletes(id) > 0 })
	}
}

// config is the test consumer configuration for queueURL.
func (h *harness) config(queueURL string) *inboxsqs.Config {
	return &inboxsqs.Config{
		QueueURL:          queueURL,
		Consumer:          "billing",
		Key:               inbox.JSONKey("event_id"),
		WaitTime:          testWait,
		VisibilityTimeout: testVisibility,
		Settings:          transporttest.Settings(h.t),
	}
}

// running is a consumer started by start.
type running struct {
	t         *testing.T
	h         *harness
	cut       atomic.Bool
	transport *http.Transport
	cancel    context.CancelFunc
	done      chan error
	leakOpts  []goleak.Option
	stopped   bool

	mu sync.Mutex
	// read holds the messages of the receives whose answers the SDK read
	// whole: from then on the consumer holds them. The recorder's
	// deliveries count a message once goaws answered, which can be before
	// a shutdown cuts the consumer's receive short.
	read map[string]bool
}

// hasRead reports whether the consumer's SDK read a receive's answer that
// held messageID.
func (r *running) hasRead(messageID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read[messageID]
}

// readBody records the messages of a receive's answer when the SDK closes
// it after reading it whole.
type readBody struct {
	io.ReadCloser
	r   *running
	buf bytes.Buffer
}

func (b *readBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.buf.Write(p[:n])
	return n, err
}

func (b *readBody) Close() error {
	var out struct{ Messages []struct{ MessageId string } }
	if json.Unmarshal(b.buf.Bytes(), &out) == nil {
		b.r.mu.Lock()
		for _, m := range out.Messages {
			b.r.read[m.MessageId] = true
		}
		b.r.mu.Unlock()
	}
	return b.ReadCloser.Close()
}

// cutNetwork makes every later SQS call of the consumer fail and drops
// every later answer: from then on it can neither delete nor change the
// visibility of anything, as if its process had died.
func (r *running) cutNetwork() { r.cut.Store(true) }

func (r *running) Do(req *http.Request) (*http.Response, error) {
	if r.cut.Load() {
		return nil, errors.New("simulated crash: network cut")
	}
	resp, err := (&http.Client{Transport: r.transport}).Do(req)
	if err == nil && r.cut.Load() {
		resp.Body.Close()
		return nil, errors.New("simulated crash: network cut")
	}
	if err == nil && req.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage" {
		resp.Body = &readBody{ReadCloser: resp.Body, r: r}
	}
	return resp, err
}

// start runs a consumer of cfg with its own SQS client. wrap, if not nil,
// wraps Run's context (to arm fault hooks); it gets the consumer before Run
// starts. The consumer is stopped at the
// end of the test if the test has not stopped it.
func (h *harness) start(cfg *inboxsqs.Config, handler inbox.Handler[pgx.Tx], wrap func(*running, context.Context) context.Context) *running {
	h.t.Helper()
	r := &running{
		t:         h.t,
		h:         h,
		transport: &http.Transport{},
		done:      make(chan error, 1),
		read:      map[string]bool{},
		leakOpts: []goleak.Option{
			goleak.IgnoreCurrent(),
			// Keep-alive connections of other clients of the test
			// server (the admin client) and the server's side of them.
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		},
	}
	consumer, err := inboxsqs.New(newSQSClient(h.endpoint, r), h.client, handler, cfg)
	require.NoError(h.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	if wrap != nil {
		ctx = wrap(r, ctx)
	}
	r.cancel = cancel
	go func() { r.done <- consumer.Run(ctx) }()
	h.t.Cleanup(r.stop)
	return r
}

// stop cancels the consumer, waits for Run to return nil, and checks that
// it left no goroutine behind.
func (r *running) stop() {
	r.t.Helper()
	if r.stopped {
		return
	}
	r.stopped = true
	r.cancel()
	select {
	case err := <-r.done:
		require.NoError(r.t, err)
	case <-time.After(waitDeadline):
		r.t.Fatalf("Run did not return within %v of its context's cancellation", waitDeadline)
	}
	r.transport.CloseIdleConnections()
	// goaws serves a cancelled long poll until its next 100ms check.
	eventually(r.t, "goaws idle", func() bool { return r.h.rec.inflight.Load() == 0 })
	goleak.VerifyNone(r.t, r.leakOpts...)
}

var (
	eventually = transporttest.Eventually
	waitClosed = transporttest.WaitClosed
)

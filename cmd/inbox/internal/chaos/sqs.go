package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/models"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/sirupsen/logrus"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxsqs"
	"github.com/txinbox/inbox/internal/testdb"
)

// The SQS timings of a run: a short visibility timeout so that the messages
// a killed consumer held come back quickly, and a backoff after a failure
// that grows no longer than it. (The adapter doubles the backoff with each
// receive of a message; on real SQS, where chaos receives a message many
// times, the default cap of 5 minutes would hide one past any drain.)
const (
	sqsVisibility      = 4 * time.Second
	sqsWait            = time.Second
	sqsRetryBackoff    = time.Second
	sqsMaxRetryBackoff = sqsVisibility
)

// sqsTransport is goaws in this process, or a real SQS endpoint, with a
// proxy in front that fails requests on demand.
type sqsTransport struct {
	endpoint string
	queueURL string
	client   *sqs.Client
	// faults fails requests to the in-process goaws; nil for a real
	// endpoint.
	faults *failer
}

// goaws keeps its queues in global state, so one in-process server serves
// every run of the process, each on a queue of its own.
var (
	goawsOnce   sync.Once
	goawsURL    string
	goawsFaults *failer
)

func startGoaws() {
	goawsOnce.Do(func() {
		logrus.SetLevel(logrus.ErrorLevel)
		goawsFaults = &failer{}
		srv := httptest.NewServer(goawsFaults.wrap(router.New()))
		u, _ := url.Parse(srv.URL)
		models.CurrentEnvironment = models.Environment{
			Host: u.Hostname(), Port: u.Port(), Region: "us-east-1", AccountID: "100010001000",
			QueueAttributeDefaults: models.EnvQueueAttributes{
				VisibilityTimeout: int(sqsVisibility / time.Second), MaximumMessageSize: 262144,
			},
		}
		go gosqs.PeriodicTasks(100*time.Millisecond, make(chan bool))
		goawsURL = srv.URL
	})
}

func newSQS(ctx context.Context, cfg *Config) (*sqsTransport, error) {
	t := &sqsTransport{endpoint: cfg.SQSEndpoint}
	if t.endpoint == "" {
		startGoaws()
		t.endpoint, t.faults = goawsURL, goawsFaults
	}
	t.client = sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(t.endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("chaos", "chaos", ""),
	})
	out, err := t.client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String("inbox-chaos-" + testdb.RandomSuffix()),
		Attributes: map[string]string{"VisibilityTimeout": fmt.Sprint(int(sqsVisibility / time.Second))},
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: create queue at %s: %w", t.endpoint, err)
	}
	t.queueURL = aws.ToString(out.QueueUrl)
	return t, nil
}

// send sends e once.
func (t *sqsTransport) send(ctx context.Context, e event) error {
	_, err := t.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(t.queueURL), MessageBody: aws.String(string(e.body()))})
	return err
}

func (t *sqsTransport) consumerArgs() []string {
	return []string{"--transport", "sqs", "--endpoint", t.endpoint, "--queue-url", t.queueURL}
}

// injectFault fails the next few deletes or receives, as a flaky network
// to SQS would.
func (t *sqsTransport) injectFault(r *rand.Rand) bool {
	if t.faults == nil {
		return false
	}
	action := "DeleteMessageBatch"
	if r.IntN(2) == 0 {
		action = "ReceiveMessage"
	}
	t.faults.arm(action, 1+r.IntN(3))
	return true
}

func (t *sqsTransport) calm() {
	if t.faults != nil {
		t.faults.disarm()
	}
}

// redelivery: a message that a killed consumer held comes back when its
// visibility timeout expires, one handed back after a failure when its
// backoff does, and a consumer receives it within one long poll.
func (t *sqsTransport) redelivery() time.Duration {
	return max(sqsVisibility, sqsMaxRetryBackoff) + sqsWait
}

func (t *sqsTransport) close() {
	if t.queueURL != "" {
		_, _ = t.client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(t.queueURL)})
	}
}

// failer fails the next n requests of an SQS action with a 500.
type failer struct {
	mu      sync.Mutex
	pending map[string]int
	failed  atomic.Int64
}

func (f *failer) arm(action string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending == nil {
		f.pending = map[string]int{}
	}
	f.pending[action] += n
}

// disarm drops the failures armed and not yet served.
func (f *failer) disarm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.pending)
}

func (f *failer) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		action := r.Header.Get("X-Amz-Target")
		if i := strings.LastIndexByte(action, '.'); i >= 0 {
			action = action[i+1:]
		}
		f.mu.Lock()
		fail := f.pending[action] > 0
		if fail {
			f.pending[action]--
		}
		f.mu.Unlock()
		if fail {
			f.failed.Add(1)
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.sqs#InternalError","message":"chaos: injected failure"}`))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// runSQSConsumer runs the inboxsqs adapter in a consumer process.
func runSQSConsumer(ctx context.Context, f *consumerFlags, client *inbox.Client[pgx.Tx], h inbox.Handler[pgx.Tx]) error {
	sc := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(f.endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("chaos", "chaos", ""),
	})
	c, err := inboxsqs.New(sc, client, h, &inboxsqs.Config{
		QueueURL:          f.queueURL,
		Consumer:          f.consumer,
		Key:               inbox.JSONKey("event_id"),
		Workers:           2,
		WaitTime:          sqsWait,
		VisibilityTimeout: sqsVisibility,
		// Chaos makes messages come back often; none of that is the
		// message's fault.
		MaxReceives:     1000,
		RetryBackoff:    sqsRetryBackoff,
		MaxRetryBackoff: sqsMaxRetryBackoff,
		ShutdownTimeout: 5 * time.Second,
		Logger:          consumerLogger(),
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

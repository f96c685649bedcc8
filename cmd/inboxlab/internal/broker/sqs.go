package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/models"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/sirupsen/logrus"

	"github.com/txinbox/inbox/inboxsqs"
	"github.com/txinbox/inbox/internal/sqscount"
	"github.com/txinbox/inbox/outbox"
)

// SQS is goaws in this process, or a real SQS endpoint.
type SQS struct {
	endpoint string
	client   *sqs.Client
	// faults fails requests to the in-process goaws; nil for a real
	// endpoint.
	faults *failer

	// queues are the URLs of those created.
	queues created
}

// goaws keeps its queues in global state, so one in-process server serves
// every SQS of the process, each run on queues of its own.
var (
	goawsOnce   sync.Once
	goawsURL    string
	goawsFaults *failer
)

// startGoaws starts the process's goaws, once: its queues' visibility
// timeout defaults to 30 seconds (goaws's own default, 0, would deliver a
// message again on every tick), its periodic tasks make what was not
// deleted visible again, and its messages carry their receive count.
func startGoaws() {
	goawsOnce.Do(func() {
		logrus.SetLevel(logrus.ErrorLevel)
		goawsFaults = &failer{}
		// goaws keeps no receive count: sqscount does, so that a consumer
		// tells a redelivery as it would on SQS.
		srv := httptest.NewServer(goawsFaults.wrap(sqscount.Handler(router.New(), nil)))
		u, _ := url.Parse(srv.URL)
		models.CurrentEnvironment = models.Environment{
			Host: u.Hostname(), Port: u.Port(), Region: "us-east-1", AccountID: "100010001000",
			QueueAttributeDefaults: models.EnvQueueAttributes{VisibilityTimeout: 30, MaximumMessageSize: 262144},
		}
		go gosqs.PeriodicTasks(100*time.Millisecond, make(chan bool))
		goawsURL = srv.URL
	})
}

// OpenSQS starts goaws in this process, once for the process, or uses the
// SQS endpoint.
func OpenSQS(endpoint string) *SQS {
	s := &SQS{endpoint: endpoint}
	if endpoint == "" {
		startGoaws()
		s.endpoint, s.faults = goawsURL, goawsFaults
	}
	s.client = SQSClient(s.endpoint)
	return s
}

// SQSClient is a client of the SQS endpoint, with static credentials: what
// goaws and the SQS-compatible servers take.
func SQSClient(endpoint string) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("inboxlab", "inboxlab", ""),
	})
}

// Transport is TransportSQS.
func (s *SQS) Transport() string { return TransportSQS }

// Kind says which SQS it is.
func (s *SQS) Kind() string {
	if s.faults != nil {
		return "in-process SQS (goaws)"
	}
	return "SQS at " + s.endpoint
}

// NewTopic creates the queue name, with c.Redelivery as its visibility
// timeout (whole seconds).
func (s *SQS) NewTopic(ctx context.Context, name string, c *TopicConfig) (Topic, error) {
	in := &sqs.CreateQueueInput{QueueName: aws.String(name)}
	if c != nil && c.Redelivery > 0 {
		in.Attributes = map[string]string{"VisibilityTimeout": strconv.Itoa(int(c.Redelivery / time.Second))}
	}
	out, err := s.client.CreateQueue(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("create queue %s at %s: %w", name, s.endpoint, err)
	}
	t := &sqsTopic{s: s, url: aws.ToString(out.QueueUrl)}
	s.queues.add(t.url)
	return t, nil
}

// FailNext fails the next n requests of the SQS action (ReceiveMessage,
// DeleteMessageBatch, …) with a server error, as a flaky network to SQS
// would. It reports false, and does nothing, on a real endpoint.
func (s *SQS) FailNext(action string, n int) bool {
	if s.faults == nil {
		return false
	}
	s.faults.arm(action, n)
	return true
}

// Calm drops the failures not yet served.
func (s *SQS) Calm() {
	if s.faults != nil {
		s.faults.disarm()
	}
}

// Close deletes the queues created.
func (s *SQS) Close() { s.Cleanup() }

// Cleanup is Close, and says what it deleted.
func (s *SQS) Cleanup() []string {
	var said []string
	for _, q := range s.queues.take() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := s.client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q)})
		cancel()
		said = append(said, deleted("queue", q, err))
	}
	return said
}

// sqsTopic is a queue: SQS has no subscriptions, so every consumer of
// the topic shares its messages.
type sqsTopic struct {
	s   *SQS
	url string
}

func (t *sqsTopic) Name() string { return t.url }

// Send sends each message, its id as a message attribute.
func (t *sqsTopic) Send(ctx context.Context, msgs ...Message) error {
	for _, m := range msgs {
		attrs := map[string]types.MessageAttributeValue{HeaderEventID: stringAttribute(m.ID)}
		for k, v := range m.Headers {
			attrs[k] = stringAttribute(v)
		}
		_, err := t.s.client.SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl: aws.String(t.url), MessageBody: aws.String(string(m.Body)), MessageAttributes: attrs,
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func stringAttribute(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// Subscribe is not offered: the lab consumes SQS only through inboxsqs.
func (t *sqsTopic) Subscribe(context.Context, string, *PollConfig) (Poller, error) {
	return nil, errSQSInboxOnly
}

func (t *sqsTopic) Address(string) Address {
	return Address{Transport: TransportSQS, SQSEndpoint: t.s.endpoint, QueueURL: t.url}
}

// Stored is not offered: the lab consumes SQS only through inboxsqs.
func (t *sqsTopic) Stored(context.Context) (int, error) { return 0, errSQSInboxOnly }

// errSQSInboxOnly is what SQS does not offer.
var errSQSInboxOnly = errors.New("SQS: the lab consumes it only through inboxsqs")

func (t *sqsTopic) OutboxSink() (outbox.Sink, error) { return inboxsqs.NewOutboxSink(t.s.client, nil) }

// failer fails the next n requests of an SQS action with a 500.
type failer struct {
	mu      sync.Mutex
	pending map[string]int
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
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.sqs#InternalError","message":"inboxlab: injected failure"}`))
			return
		}
		h.ServeHTTP(w, r)
	})
}

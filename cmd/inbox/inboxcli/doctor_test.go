package inboxcli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/models"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/sirupsen/logrus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtest"
	"github.com/txinbox/inbox/internal/testdb"
)

// doctorReport is the JSON of 'inbox doctor --json'.
type doctorReport struct {
	OK     bool `json:"ok"`
	Checks []struct {
		Name    string `json:"name"`
		Status  string `json:"status"`
		Message string `json:"message"`
		Fix     string `json:"fix"`
	} `json:"checks"`
}

func (r doctorReport) status(t *testing.T, name string) (string, string) {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c.Status, c.Message
		}
	}
	t.Fatalf("no check %q in %+v", name, r)
	return "", ""
}

// everyCheck is every check the doctor reports, in order.
var everyCheck = []string{"schema", "purge_index", "kafka_retention", "sqs_retention", "coverage",
	"clock_skew", "grants", "stuck_effects", "dead_letters", "outbox_lag", "xmin", "pooler", "replication"}

func doctor(t *testing.T, env map[string]string, args ...string) (int, doctorReport, string) {
	t.Helper()
	code, stdout, stderr := run(t, env, append([]string{"doctor", "--json"}, args...)...)
	var r doctorReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &r), "stdout %q, stderr %q", stdout, stderr)
	var names []string
	for _, c := range r.Checks {
		names = append(names, c.Name)
		require.Contains(t, []string{"ok", "warn", "fail", "skip"}, c.Status, c.Name)
		require.NotEmpty(t, c.Message, c.Name)
	}
	require.Equal(t, everyCheck, names)
	return code, r, stderr
}

// TestDoctorFresh runs the doctor on a fresh Postgres schema, before and
// after 'inbox migrate up', and on a fresh SQLite file: every check is
// reported each time.
func TestDoctorFresh(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	db := []string{"--schema", schema}

	code, r, stderr := doctor(t, env, db...)
	require.Equal(t, 1, code)
	require.False(t, r.OK)
	st, msg := r.status(t, "schema")
	require.Equal(t, "fail", st)
	require.Contains(t, msg, "not migrated")
	requireOneLine(t, stderr)
	require.Contains(t, stderr, "checks failed")

	code, _, stderr = run(t, env, append([]string{"migrate", "up"}, db...)...)
	require.Equal(t, 0, code, stderr)
	code, r, stderr = doctor(t, env, db...)
	require.Equal(t, 0, code, "%+v %s", r, stderr)
	require.True(t, r.OK)
	for name, want := range map[string]string{"schema": "ok", "purge_index": "ok", "kafka_retention": "skip", "sqs_retention": "skip",
		"coverage": "ok", "grants": "ok", "stuck_effects": "ok", "dead_letters": "ok", "outbox_lag": "ok"} {
		st, msg := r.status(t, name)
		require.Equal(t, want, st, "%s: %s", name, msg)
	}
	// The clocks and other sessions' transactions belong to the machine:
	// they may warn, never fail.
	for _, name := range []string{"clock_skew", "xmin", "replication"} {
		st, msg := r.status(t, name)
		require.Contains(t, []string{"ok", "warn"}, st, "%s: %s", name, msg)
	}

	// The text form: a line per check.
	code, stdout, _ := run(t, env, append([]string{"doctor"}, db...)...)
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^ok\s+schema\s+the inbox is at migration \d+, the latest$`, stdout)
	require.Regexp(t, `(?m)^skip\s+kafka_retention\s+`, stdout)

	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "inbox.db")
	senv := map[string]string{"DATABASE_URL": sqlite}
	code, _, stderr = run(t, senv, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	code, r, _ = doctor(t, senv)
	require.Equal(t, 0, code)
	for name, want := range map[string]string{"schema": "ok", "purge_index": "ok", "clock_skew": "skip", "grants": "skip", "xmin": "skip", "replication": "skip"} {
		st, msg := r.status(t, name)
		require.Equal(t, want, st, "%s: %s", name, msg)
	}
}

// TestDoctorFindings makes each check that reads the store find something.
func TestDoctorFindings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, schema := migratedPgx(t)
	env := map[string]string{"DATABASE_URL": testdb.URL(t)}
	db := []string{"--schema", schema}
	c, err := inbox.NewClient(d, nil)
	require.NoError(t, err)
	require.NoError(t, c.DeadLetter(ctx, inbox.DeadLetterParams{Consumer: "billing", Message: inbox.Message{ID: inboxtest.NewID()}, Err: inbox.Permanent(errors.New("no")), Attempts: 1}))
	_, err = c.Process(ctx, "billing", inbox.Message{ID: inboxtest.NewID()}, inbox.HandlerFunc[pgx.Tx](func(context.Context, pgx.Tx, inbox.Message) error { return nil }))
	require.NoError(t, err)

	// The purge index dropped.
	testdb.Exec(t, `DROP INDEX `+testdb.QuoteIdent(schema)+`.`+testdb.QuoteIdent(inboxdriver.IndexName("inbox", inboxdriver.IndexInboxProcessedAt)))
	// A transaction that holds a snapshot.
	tx, err := d.Pool().Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)

	code, r, _ := doctor(t, env, append(db, "--max-xmin-age", "0s")...)
	require.Equal(t, 1, code)
	st, msg := r.status(t, "purge_index")
	require.Equal(t, "fail", st)
	require.Contains(t, msg, "no valid index")
	st, msg = r.status(t, "dead_letters")
	require.Equal(t, "warn", st)
	require.Contains(t, msg, "1 dead letters")
	st, msg = r.status(t, "coverage")
	require.Equal(t, "warn", st, msg)
	require.Contains(t, msg, "billing")
	st, msg = r.status(t, "xmin")
	require.Equal(t, "warn", st, msg)
	require.Contains(t, msg, "holds a snapshot")

	// A consumer role with the inbox's grants only.
	role, _ := testdb.Role(t)
	testdb.Exec(t, `GRANT USAGE ON SCHEMA `+testdb.QuoteIdent(schema)+` TO `+testdb.QuoteIdent(role),
		`GRANT SELECT, INSERT ON `+testdb.QuoteIdent(schema)+`.inbox TO `+testdb.QuoteIdent(role))
	_, r, _ = doctor(t, env, append(db, "--role", role)...)
	st, msg = r.status(t, "grants")
	require.Equal(t, "fail", st)
	require.Contains(t, msg, "SELECT on inbox_dead_letters")
	require.NotContains(t, msg, "on inbox,")
	testdb.Exec(t, `GRANT SELECT, INSERT, UPDATE (reason, error_text, attempts, last_seen_at) ON `+testdb.QuoteIdent(schema)+`.inbox_dead_letters TO `+testdb.QuoteIdent(role))
	_, r, _ = doctor(t, env, append(db, "--role", role)...)
	st, msg = r.status(t, "grants")
	require.Equal(t, "warn", st, msg)
	require.Contains(t, msg, "only handlers that call Client.Effect need it")
	_, r, _ = doctor(t, env, append(db, "--role", "no_such_role_"+testdb.RandomSuffix())...)
	st, _ = r.status(t, "grants")
	require.Equal(t, "fail", st)
}

// TestDoctorKafka reads the topics' retention.ms from an in-process Kafka.
func TestDoctorKafka(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	brokers := strings.Join(cluster.ListenAddrs(), ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	for topic, ms := range map[string]string{"week": fmt.Sprint((7 * 24 * time.Hour).Milliseconds()), "month": fmt.Sprint((30 * 24 * time.Hour).Milliseconds()), "forever": "-1"} {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
		cfg := kmsg.NewCreateTopicsRequestTopicConfig()
		cfg.Name, cfg.Value = "retention.ms", kmsg.StringPtr(ms)
		rt.Configs = append(rt.Configs, cfg)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		require.Equal(t, int16(0), resp.Topics[0].ErrorCode)
	}
	env := map[string]string{"DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "inbox.db")}
	code, _, stderr := run(t, env, "migrate", "up")
	require.Equal(t, 0, code, stderr)

	for _, tc := range []struct{ topics, status, msg string }{
		{"week", "ok", "keeps messages for 7d, within the replay horizon 14d"},
		{"week,month", "warn", "Kafka topic month keeps messages for 30d, longer than the replay horizon 14d"},
		{"forever", "warn", "keeps messages for ever"},
		{"missing", "fail", "topic missing"},
	} {
		code, r, _ := doctor(t, env, "--kafka-brokers", brokers, "--kafka-topic", tc.topics)
		st, msg := r.status(t, "kafka_retention")
		require.Equal(t, tc.status, st, "%s: %s", tc.topics, msg)
		require.Contains(t, msg, tc.msg)
		require.Equal(t, map[bool]int{true: 1, false: 0}[tc.status == "fail"], code)
	}
	code, _, stderr = run(t, env, "doctor", "--kafka-brokers", brokers)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "go together")
}

var (
	goawsOnce sync.Once
	goawsURL  string
)

// startGoaws starts goaws in this process, once: its state is global.
func startGoaws() string {
	goawsOnce.Do(func() {
		logrus.SetLevel(logrus.ErrorLevel)
		srv := httptest.NewServer(router.New())
		u, _ := url.Parse(srv.URL)
		models.CurrentEnvironment = models.Environment{
			Host: u.Hostname(), Port: u.Port(), Region: "us-east-1", AccountID: "100010001000",
			QueueAttributeDefaults: models.EnvQueueAttributes{VisibilityTimeout: 30, MaximumMessageSize: 262144, MessageRetentionPeriod: 345600},
		}
		go gosqs.PeriodicTasks(100*time.Millisecond, make(chan bool))
		goawsURL = srv.URL
	})
	return goawsURL
}

// TestDoctorSQS reads a queue's MessageRetentionPeriod from an in-process
// SQS (goaws).
func TestDoctorSQS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	endpoint := startGoaws()
	cl := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")})
	out, err := cl.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("doctor-" + testdb.RandomSuffix()),
		Attributes: map[string]string{"MessageRetentionPeriod": fmt.Sprint(int((4 * 24 * time.Hour).Seconds()))}})
	require.NoError(t, err)
	env := map[string]string{"DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "inbox.db"), "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}
	code, _, stderr := run(t, env, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	sqsArgs := []string{"--sqs-queue-url", aws.ToString(out.QueueUrl), "--sqs-endpoint", endpoint}

	_, r, _ := doctor(t, env, sqsArgs...)
	st, msg := r.status(t, "sqs_retention")
	require.Equal(t, "ok", st, msg)
	require.Contains(t, msg, "keeps messages for 4d, within the replay horizon 14d")
	_, r, _ = doctor(t, env, append(sqsArgs, "--replay-horizon", "1d")...)
	st, msg = r.status(t, "sqs_retention")
	require.Equal(t, "warn", st, msg)
	require.Contains(t, msg, "longer than the replay horizon 1d")
	code, r, _ = doctor(t, env, "--sqs-queue-url", endpoint+"/100010001000/no-such-queue", "--sqs-endpoint", endpoint)
	require.Equal(t, 1, code)
	st, _ = r.status(t, "sqs_retention")
	require.Equal(t, "fail", st)
}

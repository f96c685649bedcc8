package inboxcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/duration"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
)

// checkStatus is the outcome of a doctor's check. Its text is part of the
// contract of 'inbox doctor --json'.
type checkStatus string

// The statuses of a doctor's check.
const (
	checkOK   checkStatus = "ok"
	checkWarn checkStatus = "warn"
	checkFail checkStatus = "fail"
	checkSkip checkStatus = "skip"
)

// The checks, in the order they are reported. Every run reports each of
// them, as ok, warn, fail or skip.
var doctorChecks = []string{
	"schema", "purge_index", "kafka_retention", "sqs_retention", "coverage",
	"clock_skew", "grants", "stuck_effects", "dead_letters", "outbox_lag", "xmin",
	"pooler", "replication",
}

// checkJSON is one check of 'inbox doctor --json'.
type checkJSON struct {
	Name   string      `json:"name"`
	Status checkStatus `json:"status"`
	// Message says what was found; Fix, when set, what to do.
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// doctorJSON is the contract of 'inbox doctor --json'.
type doctorJSON struct {
	// OK is false when any check failed.
	OK     bool        `json:"ok"`
	Checks []checkJSON `json:"checks"`
}

// doctor holds one run's settings and findings.
type doctor struct {
	s        *store
	c        *inbox.Admin
	horizon  time.Duration
	opts     doctorOpts
	checks   map[string]checkJSON
	migrated bool
	// noTables is true when the store was never migrated: the checks of
	// the tables' contents are skipped.
	noTables bool
}

type doctorOpts struct {
	kafkaBrokers, kafkaTopics           string
	sqsQueueURL, sqsEndpoint, sqsRegion string
	role                                string
	stuckAfter, maxLag, maxSkew, maxTx  time.Duration
}

func runDoctor(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "doctor", "doctor [--json] [--kafka-brokers B --kafka-topic T] [--sqs-queue-url URL] [--role R] [flags]\n\n"+
		"Checks a deployment, one line per check (ok, warn, fail or skip), and exits 1 when\na check fails: the schema, the purge index, the replay horizon against the broker's\n"+
		"retention and the oldest row, the clocks, the consumer role's grants, stuck effects,\ndead letters, the outbox's lag, a transaction that holds back vacuum, a transaction\npooler in front of the database with an exec mode that fails behind it, and replication\n(a standby, asynchronous or single synchronous standbys).")
	var sf storeFlags
	outboxFlags(fs, &sf)
	var o doctorOpts
	asJSON := fs.Bool("json", false, "print one JSON object")
	horizon := command.Duration{Value: inbox.DefaultReplayHorizon}
	fs.Var(&horizon, "replay-horizon", "the longest you replay over: inbox.Config.ReplayHorizon (default 14d)")
	fs.StringVar(&o.kafkaBrokers, "kafka-brokers", "", "check the retention of --kafka-topic on these brokers (HOST:PORT,…)")
	fs.StringVar(&o.kafkaTopics, "kafka-topic", "", "the topics the consumers read, comma-separated")
	fs.StringVar(&o.sqsQueueURL, "sqs-queue-url", "", "check the retention of this SQS queue")
	fs.StringVar(&o.sqsEndpoint, "sqs-endpoint", "", "the SQS endpoint (default: AWS's, from the region)")
	fs.StringVar(&o.sqsRegion, "sqs-region", "", "the SQS region (default: $AWS_REGION)")
	fs.StringVar(&o.role, "role", "", "Postgres: the consumer's role, whose grants are checked (default: the connecting user)")
	stuck := command.Duration{Value: defaultStuckAfter}
	fs.Var(&stuck, "stuck-after", "effect steps started longer ago than this are stuck (default 5m)")
	maxLag := command.Duration{Value: 5 * time.Minute}
	fs.Var(&maxLag, "max-lag", "warn when the outbox's oldest pending event is older (default 5m)")
	maxSkew := command.Duration{Value: 2 * time.Second}
	fs.Var(&maxSkew, "max-skew", "warn when the host's and the database's clocks differ by more (default 2s)")
	maxTx := command.Duration{Value: time.Hour}
	fs.Var(&maxTx, "max-xmin-age", "warn when a transaction has held back vacuum for longer (default 1h)")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	o.stuckAfter, o.maxLag, o.maxSkew, o.maxTx = stuck.Value, maxLag.Value, maxSkew.Value, maxTx.Value
	if (o.kafkaBrokers == "") != (o.kafkaTopics == "") {
		return command.Usagef("--kafka-brokers and --kafka-topic go together")
	}
	if o.sqsRegion == "" {
		o.sqsRegion = e.Getenv("AWS_REGION")
	}
	s, err := sf.open(ctx, e)
	if err != nil {
		return err
	}
	defer s.close()
	cfg := s.config(&inbox.Config{ReplayHorizon: horizon.Value, Retention: max(horizon.Value, inbox.DefaultRetention)})
	c, err := inbox.NewAdmin(s.admin, cfg)
	if err != nil {
		return err
	}
	d := &doctor{s: s, c: c, horizon: horizon.Value, opts: o, checks: map[string]checkJSON{}}
	d.run(ctx, e)

	out := doctorJSON{OK: true}
	failed := 0
	for _, name := range doctorChecks {
		ch, ok := d.checks[name]
		if !ok {
			ch = checkJSON{Name: name, Status: checkSkip, Message: "not run"}
		}
		if ch.Status == checkFail {
			out.OK = false
			failed++
		}
		out.Checks = append(out.Checks, ch)
	}
	if *asJSON {
		if err := json.NewEncoder(e.Stdout).Encode(out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
		for _, ch := range out.Checks {
			// A message quotes what the database holds (consumer names,
			// steps) and says: it is escaped for the terminal.
			fmt.Fprintf(tw, "%s\t%s\t%s\n", ch.Status, ch.Name, command.Text(ch.Message))
			if ch.Fix != "" {
				fmt.Fprintf(tw, "\t\t→ %s\n", command.Text(ch.Fix))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks failed", failed, len(out.Checks))
	}
	return nil
}

func (d *doctor) set(name string, status checkStatus, msg, fix string) {
	d.checks[name] = checkJSON{Name: name, Status: status, Message: msg, Fix: fix}
}

// dialect is the store's dialect.
func (d *doctor) dialect() inboxdriver.Dialect { return d.s.admin.Dialect() }

// tables are the store's tables, with defaults.
func (d *doctor) tables() inboxdriver.Tables { return d.s.admin.Tables().WithDefaults() }

func (d *doctor) run(ctx context.Context, e *Env) {
	d.checkPooler(ctx)
	d.checkSchema(ctx)
	d.checkPurgeIndex(ctx)
	if d.noTables {
		for _, name := range []string{"coverage", "grants", "stuck_effects", "dead_letters", "outbox_lag"} {
			d.set(name, checkSkip, notMigratedSkip, "")
		}
		d.checkKafka(ctx, -1)
		d.checkSQS(ctx, e, -1)
		d.checkClock(ctx)
		d.checkXmin(ctx)
		d.checkReplication(ctx)
		return
	}
	coverage := d.checkCoverage(ctx)
	d.checkKafka(ctx, coverage)
	d.checkSQS(ctx, e, coverage)
	d.checkClock(ctx)
	d.checkGrants(ctx)
	d.checkStuck(ctx)
	d.checkDeadLetters(ctx)
	d.checkOutbox(ctx)
	d.checkXmin(ctx)
	d.checkReplication(ctx)
}

func errText(err error) string {
	return command.Message(err)
}

const migrateFix = "run 'inbox migrate up' with the same flags"

// notMigratedSkip is the message of a check skipped because the schema
// check found the tables missing.
const notMigratedSkip = "the store is not migrated (see schema)"

func (d *doctor) checkSchema(ctx context.Context) {
	latest := inboxmigrate.Latest()
	stores := []struct {
		what string
		a    inboxdriver.Admin
	}{{"the inbox", d.s.admin}}
	if d.s.ledger != nil {
		stores = append(stores, struct {
			what string
			a    inboxdriver.Admin
		}{"the effects database", d.s.ledger})
	}
	var msgs []string
	status := checkOK
	for _, st := range stores {
		t := st.a.Tables()
		m, err := inboxmigrate.New(st.a)
		if err != nil {
			d.set("schema", checkFail, err.Error(), "")
			return
		}
		vs, err := m.Applied(ctx)
		if err != nil && st.a.Classify(err) == inboxdriver.ClassNotMigrated {
			d.set("schema", checkFail, fmt.Sprintf("%s is not migrated: no table %s", st.what, t.Migrations), migrateFix)
			d.noTables = true
			return
		}
		if err != nil {
			d.set("schema", checkFail, fmt.Sprintf("cannot read the migrations of %s: %s", st.what, errText(err)), "")
			return
		}
		cur := 0
		if len(vs) > 0 {
			cur = vs[len(vs)-1]
		}
		switch err := m.CheckTables(ctx); {
		case errors.Is(err, inboxmigrate.ErrTablesMissing):
			// The migrator's own words, which 'inbox migrate' and the
			// other commands say.
			d.set("schema", checkFail, fmt.Sprintf("%s: %s", st.what, errText(err)),
				"migrate these table names in a schema of their own (--schema), or give the names the tables have")
			d.noTables = true
			return
		case err != nil:
			d.set("schema", checkFail, fmt.Sprintf("cannot look for the tables of %s: %s", st.what, errText(err)), "")
			return
		}
		switch {
		case cur < latest:
			status = checkFail
			msgs = append(msgs, fmt.Sprintf("%s is at migration %d of %d", st.what, cur, latest))
		case cur > latest:
			if status == checkOK {
				status = checkWarn
			}
			msgs = append(msgs, fmt.Sprintf("%s is at migration %d, newer than this binary knows (%d): upgrade the CLI", st.what, cur, latest))
		default:
			msgs = append(msgs, fmt.Sprintf("%s is at migration %d, the latest", st.what, cur))
		}
	}
	fix := ""
	if status == checkFail {
		fix = migrateFix
	}
	d.migrated = status != checkFail
	d.set("schema", status, strings.Join(msgs, "; "), fix)
}

func (d *doctor) checkPurgeIndex(ctx context.Context) {
	t := d.tables()
	if d.noTables {
		// The schema check says what to do; an index of a table that was
		// never migrated here is no finding of its own.
		d.set("purge_index", checkSkip, notMigratedSkip, "")
		return
	}
	if t.Layout == inboxdriver.LayoutPartitioned {
		d.set("purge_index", checkSkip, "the inbox is partitioned: retention drops whole partitions, with no index", "")
		return
	}
	name := inboxdriver.IndexName(t.Inbox, inboxdriver.IndexInboxProcessedAt)
	ok, err := d.s.catalog.IndexValid(ctx, t.Inbox, name)
	switch {
	case err != nil:
		d.set("purge_index", checkFail, "cannot read the indexes: "+errText(err), "")
	case !ok:
		d.set("purge_index", checkFail, fmt.Sprintf("no valid index %s on processed_at: each purge batch scans the whole inbox", name), migrateFix+" (or recreate the index)")
	default:
		d.set("purge_index", checkOK, fmt.Sprintf("index %s is present", name), "")
	}
}

// checkCoverage compares the oldest retained row of each consumer with the
// replay horizon, and returns the smallest coverage (-1 when unknown).
func (d *doctor) checkCoverage(ctx context.Context) time.Duration {
	st, err := d.c.Stats(ctx)
	if err != nil {
		d.set("coverage", checkFail, "cannot read the inbox: "+errText(d.s.explain(ctx, err)), "")
		return -1
	}
	if len(st.Consumers) == 0 {
		d.set("coverage", checkOK, "no rows yet: nothing to compare with the replay horizon of "+duration.Format(d.horizon), "")
		return -1
	}
	now := time.Now()
	var short []string
	least := time.Duration(-1)
	for _, cs := range st.Consumers {
		cov := now.Sub(cs.Oldest)
		if least < 0 || cov < least {
			least = cov
		}
		if cov < d.horizon {
			short = append(short, fmt.Sprintf("%s %s", cs.Consumer, duration.Format(cov.Round(time.Second))))
		}
	}
	if len(short) > 0 {
		d.set("coverage", checkWarn, fmt.Sprintf("the oldest row is younger than the replay horizon %s for %s: a replay over the whole horizon would apply what was purged again, unless those consumers are younger than that",
			duration.Format(d.horizon), strings.Join(short, ", ")),
			"keep rows at least as long as the horizon (inbox.Config.Retention, 'inbox purge --older-than')")
		return least
	}
	d.set("coverage", checkOK, fmt.Sprintf("every consumer's oldest row is older than the replay horizon %s", duration.Format(d.horizon)), "")
	return least
}

// compareRetention judges a broker's retention against the horizon.
func (d *doctor) compareRetention(name, what string, retention time.Duration, infinite bool) {
	h := duration.Format(d.horizon)
	switch {
	case infinite:
		d.set(name, checkWarn, fmt.Sprintf("%s keeps messages for ever: a rewind to the start replays beyond the replay horizon %s", what, h),
			"never rewind past the horizon, or raise --replay-horizon and the inbox's retention to what you rewind over")
	case retention > d.horizon:
		d.set(name, checkWarn, fmt.Sprintf("%s keeps messages for %s, longer than the replay horizon %s: a rewind to the oldest message may reach ids the inbox purged, and apply them again",
			what, duration.Format(retention), h), fmt.Sprintf("raise the replay horizon and the inbox's retention to %s, or never rewind further than %s", duration.Format(retention), h))
	default:
		d.set(name, checkOK, fmt.Sprintf("%s keeps messages for %s, within the replay horizon %s", what, duration.Format(retention), h), "")
	}
}

func (d *doctor) checkKafka(ctx context.Context, _ time.Duration) {
	if d.opts.kafkaBrokers == "" {
		d.set("kafka_retention", checkSkip, "no --kafka-brokers and --kafka-topic given", "")
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(d.opts.kafkaBrokers, ",")...))
	if err != nil {
		d.set("kafka_retention", checkFail, "--kafka-brokers: "+err.Error(), "")
		return
	}
	defer cl.Close()
	kctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, topic := range strings.Split(d.opts.kafkaTopics, ",") {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType = kmsg.ConfigResourceTypeTopic
		r.ResourceName = strings.TrimSpace(topic)
		r.ConfigNames = []string{"retention.ms"}
		req.Resources = append(req.Resources, r)
	}
	resp, err := req.RequestWith(kctx, cl)
	if err != nil {
		d.set("kafka_retention", checkFail, fmt.Sprintf("cannot describe the topics at %s: %v", d.opts.kafkaBrokers, err), "")
		return
	}
	var longest time.Duration
	var longestTopic string
	infinite := false
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			d.set("kafka_retention", checkFail, fmt.Sprintf("topic %s: %v", r.ResourceName, err), "")
			return
		}
		for _, c := range r.Configs {
			if c.Name != "retention.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				d.set("kafka_retention", checkFail, fmt.Sprintf("topic %s: retention.ms %q is not a number", r.ResourceName, *c.Value), "")
				return
			}
			if ms < 0 {
				infinite, longestTopic = true, r.ResourceName
				continue
			}
			if ret := time.Duration(ms) * time.Millisecond; ret > longest {
				longest, longestTopic = ret, r.ResourceName
			}
		}
	}
	if longestTopic == "" && !infinite {
		d.set("kafka_retention", checkFail, "the brokers reported no retention.ms for "+d.opts.kafkaTopics, "")
		return
	}
	d.compareRetention("kafka_retention", "Kafka topic "+longestTopic, longest, infinite)
}

func (d *doctor) checkSQS(ctx context.Context, e *Env, _ time.Duration) {
	if d.opts.sqsQueueURL == "" {
		d.set("sqs_retention", checkSkip, "no --sqs-queue-url given", "")
		return
	}
	region := d.opts.sqsRegion
	if region == "" {
		region = "us-east-1"
	}
	o := sqs.Options{Region: region}
	if d.opts.sqsEndpoint != "" {
		o.BaseEndpoint = aws.String(d.opts.sqsEndpoint)
	}
	if id, secret := e.Getenv("AWS_ACCESS_KEY_ID"), e.Getenv("AWS_SECRET_ACCESS_KEY"); id != "" {
		o.Credentials = credentials.NewStaticCredentialsProvider(id, secret, e.Getenv("AWS_SESSION_TOKEN"))
	}
	cl := sqs.New(o)
	qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := cl.GetQueueAttributes(qctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(d.opts.sqsQueueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameMessageRetentionPeriod},
	})
	if err != nil {
		d.set("sqs_retention", checkFail, fmt.Sprintf("cannot read the attributes of %s: %s", d.opts.sqsQueueURL, command.OneLine(err.Error())), "")
		return
	}
	secs, err := strconv.ParseInt(out.Attributes[string(sqstypes.QueueAttributeNameMessageRetentionPeriod)], 10, 64)
	if err != nil {
		d.set("sqs_retention", checkFail, "the queue reported no MessageRetentionPeriod", "")
		return
	}
	d.compareRetention("sqs_retention", "SQS queue "+d.opts.sqsQueueURL, time.Duration(secs)*time.Second, false)
}

func (d *doctor) checkClock(ctx context.Context) {
	t0 := time.Now()
	now, err := d.s.catalog.Now(ctx)
	t1 := time.Now()
	if errors.Is(err, errors.ErrUnsupported) {
		d.set("clock_skew", checkSkip, "SQLite runs in this process, on this host's clock", "")
		return
	}
	if err != nil {
		d.set("clock_skew", checkFail, "cannot read the database's clock: "+errText(err), "")
		return
	}
	mid := t0.Add(t1.Sub(t0) / 2)
	skew := now.Sub(mid)
	abs := max(skew, -skew)
	msg := fmt.Sprintf("the database's clock is %s %s this host's (±%s round trip)", abs.Round(time.Millisecond), map[bool]string{true: "behind", false: "ahead of"}[skew < 0], t1.Sub(t0).Round(time.Millisecond))
	if abs > d.opts.maxSkew {
		d.set("clock_skew", checkWarn, msg+": purges and partitions use the database's clock, but the effects ledger, dead letters and the outbox's backoff use the hosts'",
			"run NTP (chrony, systemd-timesyncd) on the hosts and the database server")
		return
	}
	d.set("clock_skew", checkOK, msg, "")
}

// consumerGrant is one grant a consumer needs, or may need: optional says
// why it may be missing.
type consumerGrant struct {
	inboxdriver.Grant
	optional string
}

func (d *doctor) checkGrants(ctx context.Context) {
	if d.dialect() == inboxdriver.DialectMySQL {
		d.set("grants", checkSkip, "not checked on MySQL yet: see docs/GRANTS.md", "")
		return
	}
	if !d.migrated {
		d.set("grants", checkSkip, "the schema is not at the latest migration", "")
		return
	}
	t := d.tables()
	const effects, kafka = "only handlers that call Client.Effect need it", "only Kafka consumers need it"
	need := []consumerGrant{
		{inboxdriver.Grant{Table: t.Inbox, Privilege: "SELECT"}, ""},
		{inboxdriver.Grant{Table: t.Inbox, Privilege: "INSERT"}, ""},
		{inboxdriver.Grant{Table: t.DeadLetters, Privilege: "SELECT"}, ""},
		{inboxdriver.Grant{Table: t.DeadLetters, Privilege: "INSERT"}, ""},
		{inboxdriver.Grant{Table: t.DeadLetters, Privilege: "UPDATE", Columns: []string{"reason", "error_text", "attempts", "last_seen_at"}}, ""},
		{inboxdriver.Grant{Table: t.Effects, Privilege: "SELECT"}, effects},
		{inboxdriver.Grant{Table: t.Effects, Privilege: "INSERT"}, effects},
		{inboxdriver.Grant{Table: t.Effects, Privilege: "UPDATE"}, effects},
		{inboxdriver.Grant{Table: t.Takeovers, Privilege: "SELECT"}, kafka},
		{inboxdriver.Grant{Table: t.Takeovers, Privilege: "INSERT"}, kafka},
		{inboxdriver.Grant{Table: t.Takeovers, Privilege: "UPDATE"}, kafka},
		{inboxdriver.Grant{Table: t.Takeovers, Privilege: "DELETE"}, kafka},
	}
	want := make([]inboxdriver.Grant, len(need))
	for i, g := range need {
		want[i] = g.Grant
	}
	lacking, err := d.s.catalog.MissingGrants(ctx, d.opts.role, want)
	if errors.Is(err, errors.ErrUnsupported) {
		d.set("grants", checkSkip, "SQLite has no grants", "")
		return
	}
	if err != nil {
		d.set("grants", checkFail, "cannot check the grants: "+errText(err), "")
		return
	}
	var missing, optional []string
	for _, g := range need {
		if !slices.ContainsFunc(lacking, func(l inboxdriver.Grant) bool {
			return l.Table == g.Table && l.Privilege == g.Privilege
		}) {
			continue
		}
		name := g.Privilege + " on " + g.Table
		if len(g.Columns) > 0 {
			name = fmt.Sprintf("%s (%s) on %s", g.Privilege, strings.Join(g.Columns, ", "), g.Table)
		}
		if g.optional != "" {
			optional = append(optional, name+" ("+g.optional+")")
		} else {
			missing = append(missing, name)
		}
	}
	who := "the connecting user"
	if d.opts.role != "" {
		who = "role " + d.opts.role
	}
	switch {
	case len(missing) > 0:
		d.set("grants", checkFail, fmt.Sprintf("%s lacks %s: its consumers cannot claim or dead-letter", who, strings.Join(missing, ", ")), "grant them as docs/GRANTS.md shows")
	case len(optional) > 0:
		d.set("grants", checkWarn, fmt.Sprintf("%s has the consumer's grants, but lacks %s", who, strings.Join(optional, ", ")), "grant them if it needs them: docs/GRANTS.md")
	default:
		d.set("grants", checkOK, who+" has every grant a consumer needs", "")
	}
}

func (d *doctor) checkStuck(ctx context.Context) {
	es, err := d.c.EffectList(ctx, inboxtype.EffectListParams{State: inboxtype.EffectStarted, StartedBefore: time.Now().Add(-d.opts.stuckAfter), Limit: 1000})
	switch {
	case errors.Is(err, inbox.ErrEffectsUnsupported):
		d.set("stuck_effects", checkSkip, "the store keeps no effects ledger", "")
	case err != nil:
		d.set("stuck_effects", checkFail, "cannot read the effects ledger: "+errText(d.s.explain(ctx, err)), "")
	case len(es) > 0:
		n := strconv.Itoa(len(es))
		if len(es) == 1000 {
			n = "1000 or more"
		}
		d.set("stuck_effects", checkWarn, fmt.Sprintf("%s remote-effect steps started more than %s ago were never recorded done; the oldest is %s/%s/%s",
			n, duration.Format(d.opts.stuckAfter), es[0].Consumer, es[0].MessageID, es[0].Step),
			"check each with its provider, then resolve it ('inbox stats', the admin page's Stuck effects)")
	default:
		d.set("stuck_effects", checkOK, "no stuck remote-effect steps", "")
	}
}

func (d *doctor) checkDeadLetters(ctx context.Context) {
	ds, err := d.c.DeadLetterList(ctx, inboxtype.DeadLetterListParams{Limit: 1000})
	switch {
	case err != nil:
		d.set("dead_letters", checkFail, "cannot read the dead letters: "+errText(d.s.explain(ctx, err)), "")
	case len(ds) > 0:
		n := strconv.Itoa(len(ds))
		if len(ds) == 1000 {
			n = "1000 or more"
		}
		d.set("dead_letters", checkWarn, n+" dead letters wait for an operator", "inspect them: 'inbox deadletters list', or the admin page")
	default:
		d.set("dead_letters", checkOK, "no dead letters", "")
	}
}

func (d *doctor) checkOutbox(ctx context.Context) {
	if _, ok := d.s.admin.(inboxdriver.OutboxAdmin); !ok {
		d.set("outbox_lag", checkSkip, "the store keeps no outbox", "")
		return
	}
	st, err := d.c.OutboxStats(ctx)
	switch {
	case err != nil:
		if d.s.notMigrated(err) {
			d.set("outbox_lag", checkFail, "no outbox table", migrateFix)
			return
		}
		d.set("outbox_lag", checkFail, "cannot read the outbox: "+errText(err), "")
	case st.Pending == 0 && st.Parked == 0:
		d.set("outbox_lag", checkOK, "nothing pending", "")
	case st.Lag > d.opts.maxLag:
		d.set("outbox_lag", checkWarn, fmt.Sprintf("%d events pending; the oldest waits for %s, more than %s", st.Pending, duration.Format(st.Lag.Round(time.Second)), duration.Format(d.opts.maxLag)),
			"check that a relay runs and reaches the broker ('inbox relay', 'inbox outbox list')")
	case st.Parked > 0:
		d.set("outbox_lag", checkWarn, fmt.Sprintf("%d events parked after the broker rejected them; %d pending, lag %s", st.Parked, st.Pending, duration.Format(st.Lag.Round(time.Second))),
			"fix the cause, then 'inbox outbox unpark ID'")
	default:
		d.set("outbox_lag", checkOK, fmt.Sprintf("%d events pending, lag %s", st.Pending, duration.Format(st.Lag.Round(time.Millisecond))), "")
	}
}

func (d *doctor) checkXmin(ctx context.Context) {
	h, err := d.s.catalog.VacuumHorizon(ctx)
	if errors.Is(err, errors.ErrUnsupported) {
		d.set("xmin", checkSkip, "only Postgres holds back vacuum with a transaction's snapshot", "")
		return
	}
	if err != nil {
		d.set("xmin", checkFail, "cannot read pg_stat_activity: "+errText(err), "")
		return
	}
	switch {
	case h.OldestSnapshot > d.opts.maxTx:
		d.set("xmin", checkWarn, fmt.Sprintf("a transaction open for %s holds a snapshot %d transactions old: vacuum cannot remove the inbox's purged rows behind it", duration.Format(h.OldestSnapshot.Round(time.Second)), h.OldestSnapshotXIDs),
			"find it in pg_stat_activity (ORDER BY xact_start) and end it; set idle_in_transaction_session_timeout")
	case h.Prepared > 0:
		d.set("xmin", checkWarn, fmt.Sprintf("%d prepared transactions hold back vacuum", h.Prepared), "COMMIT PREPARED or ROLLBACK PREPARED them (pg_prepared_xacts)")
	case h.SlotXIDs > 100_000_000:
		d.set("xmin", checkWarn, fmt.Sprintf("a replication slot holds a snapshot %d transactions old", h.SlotXIDs), "drop or advance the slot (pg_replication_slots)")
	default:
		d.set("xmin", checkOK, fmt.Sprintf("no transaction has held back vacuum for over %s", duration.Format(d.opts.maxTx)), "")
	}
}

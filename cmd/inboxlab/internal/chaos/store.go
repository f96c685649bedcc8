package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/internal/command"
	"github.com/txinbox/inbox/internal/pgexec"
	"github.com/txinbox/inbox/internal/testdb"
)

// store is the database of a run, as the coordinator sees it.
type store interface {
	kind() string
	// setup creates the inbox tables, the accounts and the effects log.
	setup(ctx context.Context, accounts int) error
	// consumerArgs tell a consumer process where the store is.
	consumerArgs() []string
	// applied returns how many distinct events have been applied.
	applied(ctx context.Context) (int, error)
	// deadLetters returns the reason of each dead-lettered event, by id.
	deadLetters(ctx context.Context) (map[string]string, error)
	// killConnections terminates some of the consumers' connections.
	killConnections(ctx context.Context, r *rand.Rand) (int, error)
	// check fills in res from what the store holds.
	check(ctx context.Context, events []event, res *Result) error
	// close drops what setup created, and says what it dropped.
	close() []string
}

func openStore(ctx context.Context, cfg *Config) (store, error) {
	switch {
	case strings.HasPrefix(cfg.DatabaseURL, "postgres://"), strings.HasPrefix(cfg.DatabaseURL, "postgresql://"):
		return openPostgres(ctx, cfg.DatabaseURL)
	default:
		return nil, fmt.Errorf("unsupported --database-url %q: want postgres://…", cfg.DatabaseURL)
	}
}

// pgStore keeps a run's tables in a schema of their own, dropped at the end.
type pgStore struct {
	url    string
	pool   *pgxpool.Pool
	schema string
	// With database faults, the consumers log in as role, through
	// consumerURL, to database (see consumerRole).
	role, consumerURL, database string
}

// appName tags the consumers' connections, so that the coordinator
// terminates only theirs.
func (s *pgStore) appName() string { return "inbox-chaos-" + s.schema }

func openPostgres(ctx context.Context, url string) (*pgStore, error) {
	// A pooler-safe exec mode unless the URL names one, for every
	// connection of the run: the consumers are given this URL.
	url = pgexec.WithPoolerSafe(url)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach the database: %w", err)
	}
	return &pgStore{url: url, pool: pool, schema: "inbox_chaos_" + testdb.RandomSuffix()}, nil
}

func (s *pgStore) kind() string { return "postgres" }

func (s *pgStore) table(name string) string { return pgx.Identifier{s.schema, name}.Sanitize() }

func (s *pgStore) setup(ctx context.Context, accounts int) error {
	if _, err := s.pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	d, err := inboxpgx.New(s.pool, &inboxpgx.Config{Tables: inboxdriver.Tables{Schema: s.schema}})
	if err != nil {
		return err
	}
	if _, err := inboxmigrate.Up(ctx, d); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	_, err = s.pool.Exec(ctx, `CREATE TABLE `+s.table("accounts")+` (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
CREATE TABLE `+s.table("effects")+` (consumer text NOT NULL, event_id uuid NOT NULL, account int NOT NULL, amount bigint NOT NULL, slot int NOT NULL);
INSERT INTO `+s.table("accounts")+` (id) SELECT generate_series(1, `+fmt.Sprint(accounts)+`)`)
	if err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	return nil
}

func (s *pgStore) consumerArgs() []string {
	url := s.url
	if s.consumerURL != "" {
		url = s.consumerURL
	}
	return []string{"--database-url", url, "--schema", s.schema}
}

func (s *pgStore) applied(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM `+s.table("effects")).Scan(&n)
	return n, err
}

func (s *pgStore) deadLetters(ctx context.Context) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT coalesce(message_id, dedup_key), reason FROM `+s.table("inbox_dead_letters")+` WHERE consumer_name = $1`, DefaultConsumerName)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for rows.Next() {
		var id, reason string
		if err := rows.Scan(&id, &reason); err != nil {
			return nil, err
		}
		out[id] = reason
	}
	return out, rows.Err()
}

// killConnections terminates between one and all of the consumers'
// connections, chosen with r.
func (s *pgStore) killConnections(ctx context.Context, r *rand.Rand) (int, error) {
	rows, err := s.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, s.appName())
	if err != nil {
		return 0, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(pids) == 0 {
		return 0, err
	}
	r.Shuffle(len(pids), func(i, j int) { pids[i], pids[j] = pids[j], pids[i] })
	var n int
	for _, pid := range pids[:1+r.IntN(len(pids))] {
		var ok bool
		if err := s.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

func (s *pgStore) check(ctx context.Context, events []event, res *Result) error {
	applied := map[string]int{}
	rows, err := s.pool.Query(ctx, `SELECT event_id::text, count(*) FROM `+s.table("effects")+` WHERE consumer = $1 GROUP BY event_id`, DefaultConsumerName)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return err
		}
		applied[id] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	balances := map[int]int64{}
	rows, err = s.pool.Query(ctx, `SELECT id, balance FROM `+s.table("accounts"))
	if err != nil {
		return err
	}
	for rows.Next() {
		var id int
		var b int64
		if err := rows.Scan(&id, &b); err != nil {
			return err
		}
		balances[id] = b
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.table("inbox")+` WHERE consumer_name = $1`, DefaultConsumerName).Scan(&res.InboxRows); err != nil {
		return err
	}
	dead, err := s.deadLetters(ctx)
	if err != nil {
		return err
	}
	tally(events, applied, balances, dead, res)
	return nil
}

func (s *pgStore) close() []string {
	_, err := s.pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{s.schema}.Sanitize()+` CASCADE`)
	said := []string{dropped("schema", s.schema, err)}
	if s.role != "" {
		said = append(said, dropped("role", s.role, s.dropRole(context.Background())))
	}
	s.pool.Close()
	return said
}

// dropped says that close dropped the kind of thing name, or why it could
// not.
func dropped(kind, name string, err error) string {
	if err != nil {
		return fmt.Sprintf("could not drop %s %s (%s)", kind, name, command.Message(err))
	}
	return fmt.Sprintf("dropped %s %s", kind, name)
}

// tally compares what was applied, and dead-lettered, with what was
// produced. A crash-poison event must be dead-lettered as crashed_consumer
// and never applied; any other event applied once, and never dead-lettered.
func tally(events []event, applied map[string]int, balances map[int]int64, dead map[string]string, res *Result) {
	want := map[int]int64{}
	sent := make(map[string]bool, len(events))
	for _, e := range events {
		sent[e.ID] = true
		if e.Crash != "" {
			if dead[e.ID] == inbox.ReasonCrashedConsumer {
				res.CrashPoisonDeadLettered++
			}
			if applied[e.ID] > 0 {
				res.DoubleApplied += applied[e.ID]
				res.Problems = append(res.Problems, fmt.Sprintf("crash-poison event %s was applied", e.ID))
			}
			continue
		}
		if reason, ok := dead[e.ID]; ok {
			// Every event but crash poison is healthy: a dead letter is a
			// misjudged failure.
			res.DeadLetteredHealthy++
			res.Problems = append(res.Problems, fmt.Sprintf("healthy event %s was dead-lettered (%s)", e.ID, reason))
		}
		want[e.Account] += e.Amount
		switch n := applied[e.ID]; {
		case n == 0:
			res.Lost++
		case n > 1:
			res.DoubleApplied += n - 1
		}
	}
	for id, reason := range dead {
		if !sent[id] {
			res.DeadLetteredHealthy++
			res.Problems = append(res.Problems, fmt.Sprintf("dead letter %s (%s) is no event of the run", id, reason))
		}
	}
	for acct, w := range want {
		if balances[acct] != w {
			res.BalancesWrong++
		}
	}
	for acct, b := range balances {
		if _, ok := want[acct]; !ok && b != 0 {
			res.BalancesWrong++
		}
	}
	res.DuplicatesDelivered = res.DuplicatesSkipped + res.DoubleApplied
}

package inboxcli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxpgx"
)

// storeFlags are the flags that say which store and tables a command uses.
type storeFlags struct {
	databaseURL string
	tables      inboxdriver.Tables
	idType      string
}

func (f *storeFlags) register(fs *flagSet) {
	fs.StringVar(&f.databaseURL, "database-url", "", "the database (postgres://…); defaults to $DATABASE_URL, then the PG* variables")
	fs.StringVar(&f.tables.Schema, "schema", "", "the schema that holds the inbox tables (default: the search_path)")
	fs.StringVar(&f.tables.Inbox, "table", inboxdriver.DefaultInboxTable, "the inbox table")
	fs.StringVar(&f.idType, "id-type", string(inboxdriver.IDTypeUUID), "the type of the message_id column: uuid or text")
}

// ops is what commands use of an inbox.Client, whatever its store's
// transaction type.
type ops interface {
	Purge(ctx context.Context, p inbox.PurgeParams) (int64, error)
	Forget(ctx context.Context, consumer, id string) error
	Stats(ctx context.Context) (*inbox.Stats, error)
	ListEffects(ctx context.Context, p inbox.ListEffectsParams) ([]*inbox.EffectEntry, error)
	Config() inbox.Config
}

// store is an open store.
type store struct {
	admin inboxdriver.Admin
	close func()
	// newOps returns a client over the store with cfg.
	newOps func(cfg *inbox.Config) (ops, error)
	// where names the database for messages, without a password.
	where string
}

// open connects to the store the flags name and checks that it answers.
func (f *storeFlags) open(ctx context.Context, e *Env) (*store, error) {
	raw := f.databaseURL
	if raw == "" {
		raw = e.Getenv("DATABASE_URL")
	}
	switch f.idType {
	case string(inboxdriver.IDTypeUUID), string(inboxdriver.IDTypeText):
		f.tables.IDType = inboxdriver.IDType(f.idType)
	default:
		return nil, usagef("--id-type %q: want uuid or text", f.idType)
	}
	scheme := ""
	if i := strings.Index(raw, ":"); i > 0 {
		scheme = raw[:i]
	}
	switch scheme {
	case "", "postgres", "postgresql":
		return f.openPostgres(ctx, raw)
	default:
		return nil, usagef("--database-url: unsupported scheme %q: want postgres://", scheme)
	}
}

func (f *storeFlags) openPostgres(ctx context.Context, raw string) (*store, error) {
	// An empty string makes pgx read the PG* variables, as libpq does.
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, usagef("--database-url: %v", redactErr(err, raw))
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(pctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the database at %s: %w", where, redactErr(err, raw))
	}
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach the database at %s: %w", where, redactErr(err, raw))
	}
	d, err := inboxpgx.New(pool, &inboxpgx.Config{Tables: f.tables})
	if err != nil {
		pool.Close()
		return nil, usagef("%v", err)
	}
	return &store{
		admin: d,
		close: pool.Close,
		where: where,
		newOps: func(cfg *inbox.Config) (ops, error) {
			return inbox.NewClient(d, cfg)
		},
	}, nil
}

// redactErr removes a URL's password from err's message.
func redactErr(err error, raw string) error {
	u, perr := url.Parse(raw)
	if perr != nil || u.User == nil {
		return err
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}

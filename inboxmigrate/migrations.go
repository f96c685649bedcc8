package inboxmigrate

import (
	"context"
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
)

// migration is one version of the schema. Its statements are written by
// hand for each dialect; only quoted identifiers are filled in.
type migration struct {
	version int
	name    string
	up      func(s *schema) []string
	down    func(s *schema) []string
	// applied, if set, returns a query whose one integer is nonzero when
	// the change is already in the store, or "" where the dialect needs no
	// such check. MySQL commits each DDL statement at once, so a crash can
	// leave a change made without its version row; where a statement cannot
	// say IF NOT EXISTS, up and down then skip their statements by it.
	applied func(s *schema) (query string, args []any)
}

// schema renders identifiers and column types for one dialect and one set
// of table names.
type schema struct {
	d inboxdriver.Dialect
	t inboxdriver.Tables
}

func (s *schema) table(name string) string { return s.t.Qualify(s.d, name) }
func (s *schema) ident(name string) string { return inboxdriver.Quote(s.d, name) }

// index names an index after its table (inboxdriver.IndexName). Postgres
// and SQLite keep index names per schema, so they must not collide between
// tables, and every dialect limits their length.
func (s *schema) index(table, suffix string) string {
	return s.ident(inboxdriver.IndexName(table, suffix))
}

// idType is the column type of message_id in the inbox and the effects
// ledger, on Postgres and MySQL.
func (s *schema) idType() string {
	text := s.t.IDType == inboxdriver.IDTypeText
	switch {
	case s.d == inboxdriver.DialectPostgres && text:
		return fmt.Sprintf(`text COLLATE "C" CHECK (octet_length(message_id) BETWEEN 1 AND %d)`, inboxdriver.MaxTextIDLen)
	case s.d == inboxdriver.DialectPostgres:
		return "uuid"
	case text:
		return fmt.Sprintf("VARCHAR(%d) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", inboxdriver.MaxTextIDLen)
	default:
		return "CHAR(36) CHARACTER SET ascii COLLATE ascii_bin"
	}
}

// The migrations, in version order. Never edit one that has been released:
// add another.
var migrations = []migration{
	{
		version: 1,
		name:    "inbox",
		up: func(s *schema) []string {
			inbox := s.table(s.t.Inbox)
			switch {
			case s.t.Layout == inboxdriver.LayoutPartitioned:
				return s.partitionedInbox()
			case s.d == inboxdriver.DialectPostgres:
				return []string{
					`CREATE TABLE IF NOT EXISTS ` + inbox + ` (
    consumer_name text COLLATE "C" NOT NULL,
    message_id    ` + s.idType() + ` NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, message_id)
)`,
					// BRIN: rows arrive in processed_at order, so a block-range
					// index finds the old ones for purge at almost no cost to
					// each claim, unlike a b-tree.
					`CREATE INDEX IF NOT EXISTS ` + s.index(s.t.Inbox, inboxdriver.IndexInboxProcessedAt) + ` ON ` + inbox + ` USING brin (processed_at)`,
				}
			case s.d == inboxdriver.DialectMySQL:
				return []string{
					`CREATE TABLE IF NOT EXISTS ` + inbox + ` (
    consumer_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    message_id    ` + s.idType() + ` NOT NULL,
    processed_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (consumer_name, message_id),
    KEY ` + s.index(s.t.Inbox, inboxdriver.IndexInboxProcessedAt) + ` (processed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
				}
			default: // SQLite: processed_at is Unix time in microseconds.
				return []string{
					`CREATE TABLE IF NOT EXISTS ` + inbox + ` (
    consumer_name TEXT    NOT NULL,
    message_id    TEXT    NOT NULL,
    processed_at  INTEGER NOT NULL,
    PRIMARY KEY (consumer_name, message_id)
) WITHOUT ROWID`,
					`CREATE INDEX IF NOT EXISTS ` + s.index(s.t.Inbox, inboxdriver.IndexInboxProcessedAt) + ` ON ` + s.ident(s.t.Inbox) + ` (processed_at)`,
				}
			}
		},
		down: func(s *schema) []string {
			return []string{`DROP TABLE IF EXISTS ` + s.table(s.t.Inbox)}
		},
	},
	{
		version: 2,
		name:    "dead_letters",
		up: func(s *schema) []string {
			dl := s.table(s.t.DeadLetters)
			switch s.d {
			case inboxdriver.DialectPostgres:
				return []string{
					`CREATE TABLE IF NOT EXISTS ` + dl + ` (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer_name    text        NOT NULL,
    dedup_key        text        NOT NULL,
    message_id       text,
    transport        text        NOT NULL DEFAULT '',
    queue            text        NOT NULL DEFAULT '',
    source_partition integer     NOT NULL DEFAULT 0,
    source_offset    bigint      NOT NULL DEFAULT 0,
    broker_id        text        NOT NULL DEFAULT '',
    record_key       bytea,
    headers          jsonb       NOT NULL DEFAULT '{}',
    payload          bytea,
    reason           text        NOT NULL,
    error_text       text        NOT NULL DEFAULT '',
    attempts         integer     NOT NULL DEFAULT 0,
    first_seen_at    timestamptz NOT NULL,
    last_seen_at     timestamptz NOT NULL,
    UNIQUE (consumer_name, dedup_key)
)`,
				}
			case inboxdriver.DialectMySQL:
				return []string{
					`CREATE TABLE IF NOT EXISTS ` + dl + ` (
    id               BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer_name    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    dedup_key        VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    message_id       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    transport        VARCHAR(32)  NOT NULL DEFAULT '',
    queue            TEXT         NOT NULL,
    source_partition INT          NOT NULL DEFAULT 0,
    source_offset    BIGINT       NOT NULL DEFAULT 0,
    broker_id        TEXT         NOT NULL,
    record_key       MEDIUMBLOB   NULL,
    headers          LONGTEXT     NOT NULL,
    payload          LONGBLOB     NULL,
    reason           VARCHAR(64)  NOT NULL,
    error_text       MEDIUMTEXT   NOT NULL,
    attempts         INT          NOT NULL DEFAULT 0,
    first_seen_at    DATETIME(6)  NOT NULL,
    last_seen_at     DATETIME(6)  NOT NULL,
    UNIQUE KEY ` + s.index(s.t.DeadLetters, inboxdriver.IndexDeadLettersDedupKey) + ` (consumer_name, dedup_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
				}
			default:
				return []string{
					`CREATE TABLE IF NOT EXISTS ` + dl + ` (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer_name    TEXT    NOT NULL,
    dedup_key        TEXT    NOT NULL,
    message_id       TEXT,
    transport        TEXT    NOT NULL DEFAULT '',
    queue            TEXT    NOT NULL DEFAULT '',
    source_partition INTEGER NOT NULL DEFAULT 0,
    source_offset    INTEGER NOT NULL DEFAULT 0,
    broker_id        TEXT    NOT NULL DEFAULT '',
    record_key       BLOB,
    headers          TEXT    NOT NULL DEFAULT '{}',
    payload          BLOB,
    reason           TEXT    NOT NULL,
    error_text       TEXT    NOT NULL DEFAULT '',
    attempts         INTEGER NOT NULL DEFAULT 0,
    first_seen_at    INTEGER NOT NULL,
    last_seen_at     INTEGER NOT NULL,
    UNIQUE (consumer_name, dedup_key)
)`,
				}
			}
		},
		down: func(s *schema) []string {
			return []string{`DROP TABLE IF EXISTS ` + s.table(s.t.DeadLetters)}
		},
	},
	{
		// The ledger of remote side effects (inbox.Client.Effect). The
		// primary key serves every lookup; the second index finds stuck
		// steps for 'inbox stats'.
		version: 3,
		name:    "effects",
		up: func(s *schema) []string {
			effects := s.table(s.t.Effects)
			switch s.d {
			case inboxdriver.DialectPostgres:
				return []string{
					`CREATE TABLE IF NOT EXISTS ` + effects + ` (
    consumer_name text COLLATE "C" NOT NULL,
    message_id    ` + s.idType() + ` NOT NULL,
    step          text        NOT NULL CHECK (octet_length(step) BETWEEN 1 AND ` + fmt.Sprint(inboxdriver.MaxStepLen) + `),
    state         text        NOT NULL DEFAULT 'started' CHECK (state IN ('started', 'failed', 'done')),
    result        bytea,
    attempts      integer     NOT NULL DEFAULT 1,
    started_at    timestamptz NOT NULL,
    done_at       timestamptz,
    PRIMARY KEY (consumer_name, message_id, step)
)`,
					`CREATE INDEX IF NOT EXISTS ` + s.index(s.t.Effects, inboxdriver.IndexEffectsStarted) + ` ON ` + effects + ` (started_at) WHERE state = 'started'`,
				}
			case inboxdriver.DialectMySQL:
				return []string{
					`CREATE TABLE IF NOT EXISTS ` + effects + ` (
    consumer_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    message_id    ` + s.idType() + ` NOT NULL,
    step          VARCHAR(` + fmt.Sprint(inboxdriver.MaxStepLen) + `) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    state         VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'started',
    result        LONGBLOB     NULL,
    attempts      INT          NOT NULL DEFAULT 1,
    started_at    DATETIME(6)  NOT NULL,
    done_at       DATETIME(6)  NULL,
    PRIMARY KEY (consumer_name, message_id, step),
    KEY ` + s.index(s.t.Effects, inboxdriver.IndexEffectsStateStarted) + ` (state, started_at)
) ENGINE=InnoDB`,
				}
			default: // SQLite: started_at and done_at are Unix time in microseconds.
				return []string{
					`CREATE TABLE IF NOT EXISTS ` + effects + ` (
    consumer_name TEXT    NOT NULL,
    message_id    TEXT    NOT NULL,
    step          TEXT    NOT NULL,
    state         TEXT    NOT NULL DEFAULT 'started' CHECK (state IN ('started', 'failed', 'done')),
    result        BLOB,
    attempts      INTEGER NOT NULL DEFAULT 1,
    started_at    INTEGER NOT NULL,
    done_at       INTEGER,
    PRIMARY KEY (consumer_name, message_id, step)
) WITHOUT ROWID`,
					`CREATE INDEX IF NOT EXISTS ` + s.index(s.t.Effects, inboxdriver.IndexEffectsStateStarted) + ` ON ` + s.ident(s.t.Effects) + ` (state, started_at)`,
				}
			}
		},
		down: func(s *schema) []string {
			return []string{`DROP TABLE IF EXISTS ` + s.table(s.t.Effects)}
		},
	},
	{
		// The takeover ledger: per consumer and source (a Kafka partition),
		// the position of the first message after the last takeover, how
		// many takeovers in a row found it first after it had started, and
		// whether it has started since. One row per source; written at a
		// takeover, when its first message starts, and at a clean stop,
		// never per message.
		version: 4,
		name:    "takeovers",
		up: func(s *schema) []string {
			tk := s.table(s.t.Takeovers)
			switch s.d {
			case inboxdriver.DialectPostgres:
				return []string{`CREATE TABLE IF NOT EXISTS ` + tk + ` (
    consumer_name text COLLATE "C" NOT NULL,
    source        text COLLATE "C" NOT NULL,
    position      bigint      NOT NULL,
    takeovers     integer     NOT NULL,
    started       boolean     NOT NULL DEFAULT false,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, source)
)`}
			case inboxdriver.DialectMySQL:
				return []string{`CREATE TABLE IF NOT EXISTS ` + tk + ` (
    consumer_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    source        VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    position      BIGINT      NOT NULL,
    takeovers     INT         NOT NULL,
    started       BOOLEAN     NOT NULL DEFAULT FALSE,
    updated_at    DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (consumer_name, source)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`}
			default:
				return []string{`CREATE TABLE IF NOT EXISTS ` + tk + ` (
    consumer_name TEXT    NOT NULL,
    source        TEXT    NOT NULL,
    position      INTEGER NOT NULL,
    takeovers     INTEGER NOT NULL,
    started       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (consumer_name, source)
) WITHOUT ROWID`}
			}
		},
		down: func(s *schema) []string {
			return []string{`DROP TABLE IF EXISTS ` + s.table(s.t.Takeovers)}
		},
	},
	{
		// When an operator asked for a dead letter to be replayed
		// (inboxdriver.ReplayStore): the application replays the marked
		// ones with its handler. No index: the dead letters of a consumer
		// are found by the unique key's first column.
		version: 5,
		name:    "dead_letter_replay",
		up: func(s *schema) []string {
			dl := s.table(s.t.DeadLetters)
			switch s.d {
			case inboxdriver.DialectPostgres:
				return []string{`ALTER TABLE ` + dl + ` ADD COLUMN IF NOT EXISTS replay_requested_at timestamptz`}
			case inboxdriver.DialectMySQL:
				return []string{`ALTER TABLE ` + dl + ` ADD COLUMN replay_requested_at DATETIME(6) NULL`}
			default: // SQLite: Unix time in microseconds.
				return []string{`ALTER TABLE ` + dl + ` ADD COLUMN replay_requested_at INTEGER`}
			}
		},
		down: func(s *schema) []string {
			dl := s.table(s.t.DeadLetters)
			if s.d == inboxdriver.DialectPostgres {
				return []string{`ALTER TABLE ` + dl + ` DROP COLUMN IF EXISTS replay_requested_at`}
			}
			return []string{`ALTER TABLE ` + dl + ` DROP COLUMN replay_requested_at`}
		},
		applied: func(s *schema) (string, []any) {
			if s.d != inboxdriver.DialectMySQL {
				return "", nil // Postgres says IF NOT EXISTS; SQLite's DDL is transactional
			}
			return `SELECT COUNT(*) FROM information_schema.COLUMNS
 WHERE table_schema = COALESCE(NULLIF(?, ''), DATABASE()) AND table_name = ? AND column_name = 'replay_requested_at'`,
				[]any{s.t.Schema, s.t.DeadLetters}
		},
	},
	outboxMigration,
	outboxHeadsMigration,
}

// inStore runs mg's applied query, if it has one for the dialect: checked
// is false when it has none.
func (s *schema) inStore(ctx context.Context, q inboxdriver.Querier, mg migration) (present, checked bool, err error) {
	if mg.applied == nil {
		return false, false, nil
	}
	query, args := mg.applied(s)
	if query == "" {
		return false, false, nil
	}
	n, err := q.QueryInts(ctx, query, args...)
	if err != nil {
		return false, true, err
	}
	return len(n) == 1 && n[0] > 0, true, nil
}

// versionTable renders the statements that create the table of applied
// migrations, and the schema that holds the tables.
func (s *schema) versionTable() []string {
	var stmts []string
	if s.t.Schema != "" {
		switch s.d {
		case inboxdriver.DialectPostgres:
			stmts = append(stmts, `CREATE SCHEMA IF NOT EXISTS `+s.ident(s.t.Schema))
		case inboxdriver.DialectMySQL:
			stmts = append(stmts, `CREATE DATABASE IF NOT EXISTS `+s.ident(s.t.Schema))
		}
	}
	vt := s.table(s.t.Migrations)
	switch s.d {
	case inboxdriver.DialectPostgres:
		stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+vt+` (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`)
	case inboxdriver.DialectMySQL:
		stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+vt+` (
    version    INT          NOT NULL PRIMARY KEY,
    name       VARCHAR(128) NOT NULL,
    applied_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`)
	default:
		stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+vt+` (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP
)`)
	}
	return stmts
}

// placeholder returns the dialect's n-th bind parameter, counting from 1.
func (s *schema) placeholder(n int) string {
	if s.d == inboxdriver.DialectPostgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

package inboxmigrate

import (
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
)

// outboxMigration creates the outbox (package outbox): the producer's
// events, written in the business transaction and deleted once a relay has
// published them, and the per-key sequences of its ordered mode.
//
// The ready indexes serve the relay's claims of unordered and of ordered
// rows (on MySQL, which has no partial indexes, one index serves both);
// the unique index on (msg_key, key_seq) serves the ordered claim's look-up
// of a key's earlier rows, and holds each key's sequence unique.
var outboxMigration = migration{
	version: 6,
	name:    "outbox",
	up: func(s *schema) []string {
		ob := s.table(s.t.Outbox)
		keys := s.table(s.t.OutboxKeys)
		text := s.t.IDType == inboxdriver.IDTypeText
		switch s.d {
		case inboxdriver.DialectPostgres:
			idType := "uuid"
			if text {
				idType = fmt.Sprintf(`text COLLATE "C" CHECK (octet_length(id) BETWEEN 1 AND %d)`, inboxdriver.MaxTextIDLen)
			}
			return []string{
				`CREATE TABLE IF NOT EXISTS ` + ob + ` (
    id           ` + idType + ` NOT NULL PRIMARY KEY,
    topic        text        NOT NULL CHECK (octet_length(topic) BETWEEN 1 AND ` + fmt.Sprint(inboxdriver.MaxOutboxTopicLen) + `),
    msg_key      bytea       CHECK (octet_length(msg_key) <= ` + fmt.Sprint(inboxdriver.MaxOutboxKeyLen) + `),
    key_seq      bigint      CHECK (key_seq IS NULL OR msg_key IS NOT NULL),
    headers      jsonb       NOT NULL DEFAULT '{}',
    payload      bytea       NOT NULL,
    causation_id text,
    created_at   timestamptz NOT NULL,
    available_at timestamptz NOT NULL,
    claim_token  text,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    published_at timestamptz,
    parked_at    timestamptz
)`,
				`CREATE INDEX IF NOT EXISTS ` + s.index(s.t.Outbox, "ready_idx") + ` ON ` + ob + ` (available_at) WHERE published_at IS NULL AND parked_at IS NULL AND key_seq IS NULL`,
				`CREATE INDEX IF NOT EXISTS ` + s.index(s.t.Outbox, "ordered_ready_idx") + ` ON ` + ob + ` (available_at) WHERE published_at IS NULL AND parked_at IS NULL AND key_seq IS NOT NULL`,
				`CREATE UNIQUE INDEX IF NOT EXISTS ` + s.index(s.t.Outbox, "key_seq_idx") + ` ON ` + ob + ` (msg_key, key_seq) WHERE key_seq IS NOT NULL`,
				`CREATE TABLE IF NOT EXISTS ` + keys + ` (
    msg_key  bytea  NOT NULL PRIMARY KEY,
    last_seq bigint NOT NULL
)`,
			}
		case inboxdriver.DialectMySQL:
			idType := "CHAR(36) CHARACTER SET ascii COLLATE ascii_bin"
			if text {
				idType = fmt.Sprintf("VARCHAR(%d) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", inboxdriver.MaxTextIDLen)
			}
			return []string{
				`CREATE TABLE IF NOT EXISTS ` + ob + ` (
    id           ` + idType + ` NOT NULL PRIMARY KEY,
    topic        VARCHAR(` + fmt.Sprint(inboxdriver.MaxOutboxTopicLen) + `) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    msg_key      VARBINARY(` + fmt.Sprint(inboxdriver.MaxOutboxKeyLen) + `) NULL,
    key_seq      BIGINT       NULL,
    headers      LONGTEXT     NOT NULL,
    payload      LONGBLOB     NOT NULL,
    causation_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    created_at   DATETIME(6)  NOT NULL,
    available_at DATETIME(6)  NOT NULL,
    claim_token  VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    attempts     INT          NOT NULL DEFAULT 0,
    last_error   MEDIUMTEXT   NULL,
    published_at DATETIME(6)  NULL,
    parked_at    DATETIME(6)  NULL,
    KEY ` + s.index(s.t.Outbox, "ready_idx") + ` (published_at, parked_at, key_seq, available_at),
    UNIQUE KEY ` + s.index(s.t.Outbox, "key_seq_idx") + ` (msg_key, key_seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
				`CREATE TABLE IF NOT EXISTS ` + keys + ` (
    msg_key  VARBINARY(` + fmt.Sprint(inboxdriver.MaxOutboxKeyLen) + `) NOT NULL PRIMARY KEY,
    last_seq BIGINT NOT NULL
) ENGINE=InnoDB`,
			}
		default: // SQLite: times are Unix time in microseconds.
			return []string{
				`CREATE TABLE IF NOT EXISTS ` + ob + ` (
    id           TEXT    NOT NULL PRIMARY KEY,
    topic        TEXT    NOT NULL,
    msg_key      BLOB,
    key_seq      INTEGER,
    headers      TEXT    NOT NULL DEFAULT '{}',
    payload      BLOB    NOT NULL,
    causation_id TEXT,
    created_at   INTEGER NOT NULL,
    available_at INTEGER NOT NULL,
    claim_token  TEXT,
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    published_at INTEGER,
    parked_at    INTEGER
)`,
				`CREATE INDEX IF NOT EXISTS ` + s.index(s.t.Outbox, "ready_idx") + ` ON ` + s.ident(s.t.Outbox) + ` (available_at) WHERE published_at IS NULL AND parked_at IS NULL AND key_seq IS NULL`,
				`CREATE INDEX IF NOT EXISTS ` + s.index(s.t.Outbox, "ordered_ready_idx") + ` ON ` + s.ident(s.t.Outbox) + ` (available_at) WHERE published_at IS NULL AND parked_at IS NULL AND key_seq IS NOT NULL`,
				`CREATE UNIQUE INDEX IF NOT EXISTS ` + s.index(s.t.Outbox, "key_seq_idx") + ` ON ` + s.ident(s.t.Outbox) + ` (msg_key, key_seq) WHERE key_seq IS NOT NULL`,
				`CREATE TABLE IF NOT EXISTS ` + keys + ` (
    msg_key  BLOB    NOT NULL PRIMARY KEY,
    last_seq INTEGER NOT NULL
) WITHOUT ROWID`,
			}
		}
	},
	down: func(s *schema) []string {
		return []string{
			`DROP TABLE IF EXISTS ` + s.table(s.t.OutboxKeys),
			`DROP TABLE IF EXISTS ` + s.table(s.t.Outbox),
		}
	},
}

// outboxHeadsMigration indexes each key's pending ordered events by
// (msg_key, key_seq), for the ordered claim to read the keys that have
// pending events, and each one's head, with one index descent per key (a
// skip scan) instead of a scan of the backlog. On Postgres and SQLite the
// index holds only the pending ordered events; MySQL, which has no partial
// indexes, leads it with published_at, so that the pending events come
// first, in (msg_key, key_seq) order. The index on the available_at of
// ordered rows, which the claim no longer reads, goes.
var outboxHeadsMigration = migration{
	version: 7,
	name:    "outbox_key_heads",
	up: func(s *schema) []string {
		ob := s.table(s.t.Outbox)
		idx := s.index(s.t.Outbox, "pending_key_idx")
		switch s.d {
		case inboxdriver.DialectMySQL:
			return []string{`CREATE INDEX ` + idx + ` ON ` + ob + ` (published_at, msg_key, key_seq)`}
		case inboxdriver.DialectPostgres:
			return []string{
				`CREATE INDEX IF NOT EXISTS ` + idx + ` ON ` + ob + ` (msg_key, key_seq) WHERE published_at IS NULL AND key_seq IS NOT NULL`,
				`DROP INDEX IF EXISTS ` + s.table(inboxdriver.IndexName(s.t.Outbox, "ordered_ready_idx")),
			}
		default: // SQLite, as in outboxMigration
			return []string{
				`CREATE INDEX IF NOT EXISTS ` + idx + ` ON ` + s.ident(s.t.Outbox) + ` (msg_key, key_seq) WHERE published_at IS NULL AND key_seq IS NOT NULL`,
				`DROP INDEX IF EXISTS ` + s.table(inboxdriver.IndexName(s.t.Outbox, "ordered_ready_idx")),
			}
		}
	},
	down: func(s *schema) []string {
		name := inboxdriver.IndexName(s.t.Outbox, "pending_key_idx")
		switch s.d {
		case inboxdriver.DialectMySQL:
			return []string{`DROP INDEX ` + s.ident(name) + ` ON ` + s.table(s.t.Outbox)}
		case inboxdriver.DialectPostgres:
			return []string{
				`CREATE INDEX IF NOT EXISTS ` + s.index(s.t.Outbox, "ordered_ready_idx") + ` ON ` + s.table(s.t.Outbox) + ` (available_at) WHERE published_at IS NULL AND parked_at IS NULL AND key_seq IS NOT NULL`,
				`DROP INDEX IF EXISTS ` + s.table(name),
			}
		default:
			return []string{
				`CREATE INDEX IF NOT EXISTS ` + s.index(s.t.Outbox, "ordered_ready_idx") + ` ON ` + s.ident(s.t.Outbox) + ` (available_at) WHERE published_at IS NULL AND parked_at IS NULL AND key_seq IS NOT NULL`,
				`DROP INDEX IF EXISTS ` + s.table(name),
			}
		}
	},
	applied: func(s *schema) (string, []any) {
		if s.d != inboxdriver.DialectMySQL {
			return "", nil // Postgres and SQLite say IF NOT EXISTS
		}
		return `SELECT COUNT(*) FROM information_schema.STATISTICS
 WHERE table_schema = COALESCE(NULLIF(?, ''), DATABASE()) AND table_name = ? AND index_name = ?`,
			[]any{s.t.Schema, s.t.Outbox, inboxdriver.IndexName(s.t.Outbox, "pending_key_idx")}
	},
}

package inboxmigrate

import (
	"context"
	"fmt"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
)

// partitionedInbox renders the inbox of inboxdriver.LayoutPartitioned: the
// same columns and key as the plain table, partitioned by range over
// message_id. The primary key holds the partition key, so (consumer_name,
// message_id) stays unique across partitions. The partitions themselves
// depend on the day, so they are not part of the migration: Up makes the
// first ones (see premake), and so does 'inbox partitions premake' after
// a migration applied with another tool.
func (s *schema) partitionedInbox() []string {
	inbox := s.table(s.t.Inbox)
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + inbox + ` (
    consumer_name text COLLATE "C" NOT NULL,
    message_id    uuid        NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, message_id)
) PARTITION BY RANGE (message_id)`,
		// Each partition gets its own copy when it is attached; Purge
		// still deletes by processed_at.
		`CREATE INDEX IF NOT EXISTS ` + s.index(s.t.Inbox, "processed_at_idx") + ` ON ` + inbox + ` USING brin (processed_at)`,
	}
}

// premake makes the first partitions of a partitioned inbox, and any
// missing ahead, so that an inbox fresh from Up takes claims at once.
func (m *Migrator) premake(ctx context.Context) error {
	if m.s.t.Layout != inboxdriver.LayoutPartitioned {
		return nil
	}
	p, ok := m.admin.(inboxdriver.Partitioner)
	if !ok {
		return fmt.Errorf("inbox: migrate: Tables.Layout is %q, but the store (%T) cannot make partitions", m.s.t.Layout, m.admin)
	}
	if _, err := p.PartitionMaintain(ctx, &inboxtype.PartitionMaintainParams{Premake: true}); err != nil {
		return fmt.Errorf("inbox: migrate: make the inbox's partitions: %w", err)
	}
	return nil
}

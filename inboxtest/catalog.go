package inboxtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txinbox/inbox/inboxdriver"
)

// catalogCases check what a store reads of its catalog (inboxdriver.Catalog)
// and that it reports a missing table as ClassNotMigrated.
func catalogCases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"CatalogTablesAndIndexes", testCatalogTablesAndIndexes[TTx]},
		{"CatalogGrantsClockVacuum", testCatalogGrantsClockVacuum[TTx]},
		{"MissingTableIsNotMigrated", testMissingTableIsNotMigrated[TTx]},
	}
}

func (x *suite[TTx]) catalog() inboxdriver.Catalog {
	x.t.Helper()
	c, ok := x.s.Driver.(inboxdriver.Catalog)
	if !ok {
		x.t.Fatalf("%T does not implement inboxdriver.Catalog", x.s.Driver)
	}
	return c
}

func testCatalogTablesAndIndexes[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	c := x.catalog()
	tables := x.s.Driver.Tables()
	for _, name := range []string{tables.Inbox, tables.DeadLetters, tables.Migrations, tables.Outbox} {
		ok, err := c.TableExists(ctx, name)
		if err != nil || !ok {
			t.Fatalf("TableExists(%q) = %v, %v; want true: the store is migrated", name, ok, err)
		}
	}
	ok, err := c.TableExists(ctx, "inbox_no_such_table")
	if err != nil || ok {
		t.Fatalf("TableExists of a table that was never made = %v, %v; want false", ok, err)
	}

	idType, err := c.InboxIDType(ctx)
	if err != nil && !errors.Is(err, errors.ErrUnsupported) || err == nil && idType != tables.IDType {
		t.Fatalf("InboxIDType = %q, %v; want %q, the type the store was migrated with", idType, err, tables.IDType)
	}

	layout, err := c.InboxLayout(ctx)
	if err != nil || layout != tables.Layout {
		t.Fatalf("InboxLayout = %q, %v; want %q, the layout the store was migrated with", layout, err, tables.Layout)
	}
	if tables.Layout == inboxdriver.LayoutPlain {
		name := inboxdriver.IndexName(tables.Inbox, inboxdriver.IndexInboxProcessedAt)
		ok, err := c.IndexValid(ctx, tables.Inbox, name)
		if err != nil || !ok {
			t.Fatalf("IndexValid(%q) = %v, %v; want true: the migrations make it", name, ok, err)
		}
	}
	ok, err = c.IndexValid(ctx, tables.Inbox, "inbox_no_such_idx")
	if err != nil || ok {
		t.Fatalf("IndexValid of an index that was never made = %v, %v; want false", ok, err)
	}
}

func testCatalogGrantsClockVacuum[TTx any](t *testing.T, x *suite[TTx]) {
	ctx := context.Background()
	c := x.catalog()
	tables := x.s.Driver.Tables()

	// The user that migrated the tables owns them: it lacks nothing.
	want := []inboxdriver.Grant{
		{Table: tables.Inbox, Privilege: "INSERT"},
		{Table: tables.DeadLetters, Privilege: "UPDATE", Columns: []string{"reason", "attempts"}},
	}
	missing, err := c.MissingGrants(ctx, "", want)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
	case err != nil:
		t.Fatalf("MissingGrants: %v", err)
	case len(missing) != 0:
		t.Fatalf("the owner of the tables lacks %v", missing)
	}

	before := time.Now()
	now, err := c.Now(ctx)
	after := time.Now()
	switch {
	case errors.Is(err, errors.ErrUnsupported):
	case err != nil:
		t.Fatalf("Now: %v", err)
	case now.Before(before.Add(-time.Hour)) || now.After(after.Add(time.Hour)):
		// A test machine's clock and its database's are one clock, or
		// close: an hour apart means the value was misread (a unit).
		t.Fatalf("the database's clock reads %v, between %v and %v on this host", now, before, after)
	}

	h, err := c.VacuumHorizon(ctx)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
	case err != nil:
		t.Fatalf("VacuumHorizon: %v", err)
	case h == nil || h.OldestSnapshot < 0 || h.Prepared < 0:
		t.Fatalf("VacuumHorizon = %+v", h)
	}

	// The test server is a primary: it accepts the suite's writes.
	r, err := c.Replication(ctx)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
	case err != nil:
		t.Fatalf("Replication: %v", err)
	case r == nil || r.InRecovery || r.SynchronousCommit == "":
		t.Fatalf("Replication = %+v", r)
	}
}

// A statement on a table that does not exist is ClassNotMigrated, which
// the root package reports as inbox.ErrNotMigrated: the CLI's hint to run
// 'inbox migrate up' rests on it.
func testMissingTableIsNotMigrated[TTx any](t *testing.T, x *suite[TTx]) {
	d := x.s.Driver
	t0 := d.Tables()
	missing := t0.Qualify(d.Dialect(), "inbox_no_such_table")
	err := d.MigrationTx(context.Background(), func(ctx context.Context, q inboxdriver.Querier) error {
		_, err := q.QueryInts(ctx, `SELECT count(*) FROM `+missing)
		return err
	})
	if err == nil {
		t.Fatal("a query of a table that does not exist succeeded")
	}
	if got := d.Classify(err); got != inboxdriver.ClassNotMigrated {
		t.Fatalf("Classify(%v) = %v, want ClassNotMigrated", err, got)
	}
	if got := d.Classify(errors.New("relation does not exist")); got == inboxdriver.ClassNotMigrated {
		t.Fatal("an error that is not the store's own is ClassNotMigrated")
	}
}

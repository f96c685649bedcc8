package inboxcli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
	"github.com/txinbox/inbox/internal/command"
)

func runMigrate(ctx context.Context, e *Env, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprintln(e.Stdout, "Usage: inbox migrate up|down|status|sql [flags]\n\nRun 'inbox migrate <subcommand> -h' for its flags.")
			return nil
		}
		return command.Usagef("want a subcommand: up, down, status or sql")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "up":
		return runMigrateUp(ctx, e, args)
	case "down":
		return runMigrateDown(ctx, e, args)
	case "status":
		return runMigrateStatus(ctx, e, args)
	case "sql":
		return runMigrateSQL(e, args)
	default:
		return command.Usagef("unknown subcommand %q: want up, down, status or sql", sub)
	}
}

// runMigrateUp is 'inbox migrate up': it applies the pending migrations.
func runMigrateUp(ctx context.Context, e *Env, args []string) error {
	var sf storeFlags
	fs := command.NewFlags(e, "migrate up", "migrate up [--partitioned] [flags]")
	sf.register(fs)
	partitioned := fs.Bool("partitioned", false, "Postgres 14+: create the inbox partitioned by day over time-ordered ids (UUIDv7), and its first partitions")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	if *partitioned {
		sf.tables.Layout = inboxdriver.LayoutPartitioned
	}
	return withMigrator(ctx, e, &sf, func(m *inboxmigrate.Migrator) error {
		done, err := m.Up(ctx)
		for _, i := range done {
			fmt.Fprintf(e.Stdout, "applied %03d_%s\n", i.Version, i.Name)
		}
		if err != nil {
			return err
		}
		if len(done) == 0 {
			fmt.Fprintf(e.Stdout, "up to date at version %03d\n", inboxmigrate.Latest())
		}
		return nil
	})
}

// runMigrateDown is 'inbox migrate down': it reverts one step, or down to
// --to.
func runMigrateDown(ctx context.Context, e *Env, args []string) error {
	var sf storeFlags
	fs := command.NewFlags(e, "migrate down", "migrate down [--to VERSION] [--dry-run] [--force] [flags]")
	sf.register(fs)
	to := fs.Int("to", 0, fmt.Sprintf("revert down to this version, 0 to %d; 0 reverts all (default: one step)", inboxmigrate.Latest()))
	dryRun := fs.Bool("dry-run", false, "print what would be reverted and the rows each dropped table holds, and change nothing")
	force := fs.Bool("force", false, "revert even when it drops tables that hold rows (they are lost)")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	oneStep := !fs.Set("to")
	if !oneStep && (*to < 0 || *to > inboxmigrate.Latest()) {
		return command.Usagef("--to %d: want a version between 0 and %d", *to, inboxmigrate.Latest())
	}
	return withMigrator(ctx, e, &sf, func(m *inboxmigrate.Migrator) error {
		target := *to
		if oneStep {
			cur, err := m.Current(ctx)
			if err != nil {
				return err
			}
			target = max(cur-1, 0)
		}
		return migrateDown(ctx, e, m, target, *dryRun, *force)
	})
}

// runMigrateStatus is 'inbox migrate status': each migration, applied or
// pending.
func runMigrateStatus(ctx context.Context, e *Env, args []string) error {
	var sf storeFlags
	fs := command.NewFlags(e, "migrate status", "migrate status [flags]")
	sf.register(fs)
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	return withMigrator(ctx, e, &sf, func(m *inboxmigrate.Migrator) error {
		st, err := m.Status(ctx)
		if err != nil {
			return err
		}
		for _, i := range st {
			state := "pending"
			if i.Applied {
				state = "applied"
			}
			fmt.Fprintf(e.Stdout, "%03d_%-20s %s\n", i.Version, i.Name, state)
		}
		return nil
	})
}

// runMigrateSQL is 'inbox migrate sql': the migrations as SQL, printed or
// written one file each into --out, without a store.
func runMigrateSQL(e *Env, args []string) error {
	var tables inboxdriver.Tables
	fs := command.NewFlags(e, "migrate sql", "migrate sql [--dialect D] [--format F] [--out DIR] [flags]")
	dialect := fs.String("dialect", string(inboxdriver.DialectPostgres), "postgres, mysql or sqlite")
	format := fs.String("format", string(inboxmigrate.FormatPlain), "plain (one script), goose, or golang-migrate")
	out := fs.String("out", "", "write one file per migration into this directory instead of printing")
	fs.StringVar(&tables.Schema, "schema", "", "the schema that holds the inbox tables")
	fs.StringVar(&tables.Inbox, "table", inboxdriver.DefaultInboxTable, "the inbox table")
	idType := fs.String("id-type", string(inboxdriver.IDTypeUUID), "the type of the message_id column: uuid or text")
	partitioned := fs.Bool("partitioned", false, "postgres: the inbox partitioned by day; make its partitions with 'inbox partitions premake'")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	tables.IDType = inboxdriver.IDType(*idType)
	if *partitioned {
		tables.Layout = inboxdriver.LayoutPartitioned
	}
	files, err := inboxmigrate.Render(inboxdriver.Dialect(*dialect), tables, inboxmigrate.Format(*format))
	if err != nil {
		return command.Usagef("%v", err)
	}
	if *out == "" {
		for i, f := range files {
			if len(files) > 1 {
				if i > 0 {
					fmt.Fprintln(e.Stdout)
				}
				fmt.Fprintf(e.Stdout, "-- file: %s\n", f.Name)
			}
			fmt.Fprint(e.Stdout, f.Content)
		}
		return nil
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		path := filepath.Join(*out, f.Name)
		if err := os.WriteFile(path, []byte(f.Content), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(e.Stdout, "wrote %s\n", path)
	}
	return nil
}

func withMigrator(ctx context.Context, e *Env, sf *storeFlags, fn func(m *inboxmigrate.Migrator) error) error {
	s, err := sf.open(ctx, e)
	if err != nil {
		return err
	}
	defer s.close()
	m, err := inboxmigrate.New(s.admin)
	if err != nil {
		return command.Usagef("%v", err)
	}
	if err := fn(m); err != nil || s.ledger == nil {
		return err
	}
	// The effects ledger's own file gets the same migrations.
	lm, err := inboxmigrate.New(s.ledger)
	if err != nil {
		return command.Usagef("%v", err)
	}
	fmt.Fprintf(e.Stdout, "effects ledger %s:\n", sf.effectsDB)
	return fn(lm)
}

// migrateDown reverts m's store to version target, after saying what it
// drops. It refuses to drop a table that holds rows unless force is set,
// and with dryRun only says.
func migrateDown(ctx context.Context, e *Env, m *inboxmigrate.Migrator, target int, dryRun, force bool) error {
	plan, err := m.Plan(ctx, target)
	if err != nil {
		return err
	}
	if len(plan) == 0 {
		fmt.Fprintln(e.Stdout, "nothing to revert")
		return nil
	}
	verb := "reverting"
	if dryRun {
		verb = "would revert"
	}
	var rows int64
	var holding []string
	for _, st := range plan {
		var drops []string
		for _, d := range st.Drops {
			drops = append(drops, fmt.Sprintf("%s (%s)", d.Table, command.Count(d.Rows, "row", "rows")))
			if d.Rows > 0 {
				rows += d.Rows
				holding = append(holding, d.Table)
			}
		}
		line := fmt.Sprintf("%s %03d_%s", verb, st.Version, st.Name)
		if len(drops) > 0 {
			line += ": drops " + strings.Join(drops, ", ")
		}
		fmt.Fprintln(e.Stdout, line)
	}
	if dryRun {
		return nil
	}
	if rows > 0 && !force {
		return fmt.Errorf("refusing to drop %s that %s %s: add --force to drop the rows too, or --dry-run to see the plan",
			strings.Join(holding, ", "), map[bool]string{true: "holds", false: "hold"}[len(holding) == 1], command.Count(rows, "row", "rows"))
	}
	done, err := m.Down(ctx, target)
	for _, i := range done {
		fmt.Fprintf(e.Stdout, "reverted %03d_%s\n", i.Version, i.Name)
	}
	return err
}

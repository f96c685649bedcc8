package inboxcli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxmigrate"
)

func runMigrate(ctx context.Context, e *Env, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprintln(e.Stdout, "Usage: inbox migrate up|down|status|sql [flags]\n\nRun 'inbox migrate <subcommand> -h' for its flags.")
			return nil
		}
		return usagef("want a subcommand: up, down, status or sql")
	}
	sub, args := args[0], args[1:]
	var sf storeFlags
	switch sub {
	case "up":
		fs := newFlags(e, "migrate up", "migrate up [--partitioned] [flags]")
		sf.register(fs)
		partitioned := fs.Bool("partitioned", false, "Postgres 14+: create the inbox partitioned by day over time-ordered ids (UUIDv7), and its first partitions")
		if err := parseFlags(fs, args, 0); err != nil {
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
	case "down":
		fs := newFlags(e, "migrate down", "migrate down [--to VERSION] [flags]")
		sf.register(fs)
		to := fs.Int("to", -1, "revert down to this version, 0 for all (default: one step)")
		if err := parseFlags(fs, args, 0); err != nil {
			return err
		}
		if *to < -1 || *to > inboxmigrate.Latest() {
			return usagef("--to %d: want a version between 0 and %d", *to, inboxmigrate.Latest())
		}
		return withMigrator(ctx, e, &sf, func(m *inboxmigrate.Migrator) error {
			target := *to
			if target < 0 {
				cur, err := m.Current(ctx)
				if err != nil {
					return err
				}
				target = max(cur-1, 0)
			}
			done, err := m.Down(ctx, target)
			for _, i := range done {
				fmt.Fprintf(e.Stdout, "reverted %03d_%s\n", i.Version, i.Name)
			}
			if err != nil {
				return err
			}
			if len(done) == 0 {
				fmt.Fprintln(e.Stdout, "nothing to revert")
			}
			return nil
		})
	case "status":
		fs := newFlags(e, "migrate status", "migrate status [flags]")
		sf.register(fs)
		if err := parseFlags(fs, args, 0); err != nil {
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
	case "sql":
		fs := newFlags(e, "migrate sql", "migrate sql [--dialect D] [--format F] [--out DIR] [flags]")
		dialect := fs.String("dialect", string(inboxdriver.DialectPostgres), "postgres, mysql or sqlite")
		format := fs.String("format", string(inboxmigrate.FormatPlain), "plain (one script), goose, or golang-migrate")
		out := fs.String("out", "", "write one file per migration into this directory instead of printing")
		fs.StringVar(&sf.tables.Schema, "schema", "", "the schema that holds the inbox tables")
		fs.StringVar(&sf.tables.Inbox, "table", inboxdriver.DefaultInboxTable, "the inbox table")
		idType := fs.String("id-type", string(inboxdriver.IDTypeUUID), "the type of the message_id column: uuid or text")
		partitioned := fs.Bool("partitioned", false, "postgres: the inbox partitioned by day; make its partitions with 'inbox partitions premake'")
		if err := parseFlags(fs, args, 0); err != nil {
			return err
		}
		sf.tables.IDType = inboxdriver.IDType(*idType)
		if *partitioned {
			sf.tables.Layout = inboxdriver.LayoutPartitioned
		}
		files, err := inboxmigrate.Render(inboxdriver.Dialect(*dialect), sf.tables, inboxmigrate.Format(*format))
		if err != nil {
			return usagef("%v", err)
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
	default:
		return usagef("unknown subcommand %q: want up, down, status or sql", sub)
	}
}

func withMigrator(ctx context.Context, e *Env, sf *storeFlags, fn func(m *inboxmigrate.Migrator) error) error {
	s, err := sf.open(ctx, e)
	if err != nil {
		return err
	}
	defer s.close()
	m, err := inboxmigrate.New(s.admin)
	if err != nil {
		return usagef("%v", err)
	}
	if err := fn(m); err != nil || s.ledger == nil {
		return err
	}
	// The effects ledger's own file gets the same migrations.
	lm, err := inboxmigrate.New(s.ledger)
	if err != nil {
		return usagef("%v", err)
	}
	fmt.Fprintf(e.Stdout, "effects ledger %s:\n", sf.effectsDB)
	return fn(lm)
}

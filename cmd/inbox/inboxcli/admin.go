package inboxcli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxadmin"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/internal/command"
)

// remoteNote says why the admin page binds loopback unless told otherwise.
const remoteNote = `The admin page has no login of its own: anyone who reaches it reads the
dead letters and, with --allow-writes, replays and deletes them. Keep it on
loopback and reach it through an SSH tunnel, or put an authenticating proxy
in front of it (and mount inboxadmin in your own server, with an Authorize
hook, to check users).`

func runAdmin(ctx context.Context, e *Env, args []string) error {
	fs := command.NewFlags(e, "admin", "admin [--addr 127.0.0.1:8080] [--read-only | --allow-writes] [--show-payloads] [--allowed-host H] [flags]\n\n"+
		"Serves the admin page: consumers with their coverage and headroom, dead letters\n(replay, delete), stuck effects (resolve) and the outbox (retry, park, unpark).\n"+
		"Writes are off unless --allow-writes. A replay marks dead letters: the application\nreplays them with inbox.Client.ProcessReplays.\n"+
		"The page answers only requests that name it by a loopback name or address, by\n--addr's host, or by an --allowed-host: a site in your browser cannot reach it\nthrough a name of its own pointed at this machine (DNS rebinding).\n\n"+remoteNote)
	var sf storeFlags
	outboxFlags(fs, &sf)
	addr := fs.String("addr", "127.0.0.1:8080", "the address to listen on; a non-loopback address needs --allow-remote")
	allowRemote := fs.Bool("allow-remote", false, "allow a non-loopback --addr (put authentication in front of it)")
	readOnly := fs.Bool("read-only", false, "refuse every write, and show no action buttons")
	allowWrites := fs.Bool("allow-writes", false, "allow replays, deletes, resolutions and outbox changes from the page")
	showPayloads := fs.Bool("show-payloads", false, "show payloads and header values (redacted by default)")
	prefix := fs.String("prefix", "", "serve the page under this path, such as /admin")
	var allowedHosts []string
	fs.Func("allowed-host", "a `host` name or address the page is reached by, beyond loopback and --addr's host, such as the name a proxy forwards (repeat it, or separate with commas; * answers any host)", func(v string) error {
		for h := range strings.SplitSeq(v, ",") {
			if h = strings.TrimSpace(h); h == "" {
				return errors.New("want a host name or address")
			}
			allowedHosts = append(allowedHosts, h)
		}
		return nil
	})
	stuckAfter := command.Duration{Value: inboxadmin.DefaultStuckAfter}
	fs.Var(&stuckAfter, "stuck-after", "count effect steps started longer ago than this as stuck (default 5m)")
	horizon := command.Duration{Value: inbox.DefaultReplayHorizon}
	fs.Var(&horizon, "replay-horizon", "the longest you replay over, for the headroom (default 14d)")
	if err := fs.Parse(args, 0); err != nil {
		return err
	}
	if *readOnly && *allowWrites {
		return command.Usagef("--read-only and --allow-writes contradict each other: pick one")
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return command.Usagef("--addr %q: want HOST:PORT, such as 127.0.0.1:8080", *addr)
	}
	if !loopback(host) && !*allowRemote {
		return command.Usagef("--addr %s is not a loopback address: add --allow-remote to serve it there. %s", *addr, strings.Join(strings.Fields(remoteNote), " "))
	}
	s, err := sf.open(ctx, e)
	if err != nil {
		return err
	}
	defer s.close()
	cfg := s.config(&inbox.Config{ReplayHorizon: horizon.Value, Retention: max(horizon.Value, inbox.DefaultRetention)})
	a, err := inbox.NewAdmin(s.admin, cfg)
	if err != nil {
		return err
	}
	acfg := &inboxadmin.Config{
		Prefix: *prefix, ReadOnly: *readOnly, ShowPayloads: *showPayloads, StuckAfter: stuckAfter.Value,
		Logger:       slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		AllowedHosts: append(listenHosts(host), allowedHosts...),
	}
	if *allowWrites {
		acfg.Authorize = func(*http.Request, inboxadmin.Action) error { return nil }
	}
	if oa, ok := s.admin.(inboxdriver.OutboxAdmin); ok {
		acfg.Outbox = inboxadmin.OutboxOf(a, oa)
	}
	h, err := inboxadmin.NewHandler(inboxadmin.FromAdmin(a, s.admin.Tables().Layout == inboxdriver.LayoutPartitioned), acfg)
	if err != nil {
		return command.Usagef("%v", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if !loopback(host) {
		fmt.Fprintf(e.Stderr, "warning: serving on %s, beyond this machine.\n%s\n", *addr, remoteNote)
	}
	mode := "writes off (--allow-writes turns them on)"
	switch {
	case *readOnly:
		mode = "read-only"
	case *allowWrites:
		mode = "writes allowed"
	}
	fmt.Fprintf(e.Stdout, "inbox admin: serving http://%s%s/ for the database at %s; %s; stop with Ctrl-C\n", ln.Addr(), strings.TrimRight(*prefix, "/"), s.where, mode)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// listenHosts are the hosts a page listening on host is reached by: host
// itself, or every address of this machine when host is unspecified (such
// as 0.0.0.0 or an empty host).
func listenHosts(host string) []string {
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return []string{host}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var hosts []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			hosts = append(hosts, n.IP.String())
		}
	}
	return hosts
}

// loopback reports whether host names this machine only.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

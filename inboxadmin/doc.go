// Package inboxadmin is the admin page of an inbox: an http.Handler to
// mount in an application's own server, and what 'inbox admin' serves.
//
// It shows, per consumer, the inbox's rows, how far back it still
// deduplicates (coverage) against the replay horizon (headroom), the dead
// letters and the stuck remote effects; it lists, shows, replays and
// deletes dead letters, resolves stuck effects, and shows the outbox with
// its lag, retrying, parking and unparking events. The pages are
// server-rendered HTML with no JavaScript, and every page also answers
// JSON (Accept: application/json, or ?format=json).
//
// It is safe by default: pages are readable, every write is refused until
// Config.Authorize allows it, Config.ReadOnly refuses them all, writes
// from another origin are refused (http.CrossOriginProtection), a request
// naming a host the page does not serve is refused, reads included (a
// guard against DNS rebinding: Config.AllowedHosts, loopback by default),
// payloads are hidden unless Config.ShowPayloads, no control character of
// stored text reaches an answer raw, and every answer forbids framing and
// carries a strict Content-Security-Policy. Authentication is the
// application's: check the user in Authorize, or put the page behind the
// application's own middleware.
//
// Every action acts on exactly what the page showed: a list's filter
// travels through every link and form opened from it, a parameter a page
// does not take is refused rather than ignored, and a bulk replay marks the
// dead letters its confirmation listed, by id, and no other.
//
//	h, err := inboxadmin.New(client, &inboxadmin.Config{
//		Prefix:       "/admin",
//		Authorize:    func(r *http.Request, a inboxadmin.Action) error { return checkAdmin(r) },
//		AllowedHosts: []string{"ops.example.com"}, // the name the page is reached by
//	})
//	mux.Handle("/admin/", h)
//
// A replay from the page marks the dead letter; the application replays
// the marked ones with its handler (inbox.Client.ProcessReplays), so
// that each is applied at most once.
package inboxadmin

package inboxadmin

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/txinbox/inbox"
)

// Defaults of the Config fields.
const (
	DefaultStuckAfter = 5 * time.Minute
	// DefaultLimit is how many rows a list shows unless ?limit= asks for
	// another number, up to MaxLimit.
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Action names a change the page makes, for Config.Authorize.
type Action string

// The actions. ActionRead is every GET.
const (
	ActionRead             Action = "read"
	ActionDeadLetterReplay Action = "deadletter.replay"
	ActionDeadLetterDelete Action = "deadletter.delete"
	ActionEffectResolve    Action = "effect.resolve"
	ActionOutboxRetry      Action = "outbox.retry"
	ActionOutboxPark       Action = "outbox.park"
	ActionOutboxUnpark     Action = "outbox.unpark"
)

// Write reports whether a changes something.
func (a Action) Write() bool { return a != ActionRead }

// DuplicateCounter tells the duplicates of each consumer by reason
// (redelivery, republish, concurrent), as a telemetry observer counts
// them. The overview shows them when Config.Duplicates is set.
type DuplicateCounter interface {
	DuplicatesByReason(consumer string) map[string]int64
}

// Config configures the handler. The zero value is valid, and safe: the
// pages are readable, every write is refused, and payloads are hidden.
type Config struct {
	// Prefix is the path the handler is mounted under, such as "/admin":
	// mount it with mux.Handle("/admin/", h), without http.StripPrefix.
	// Every link and form is built from it. Defaults to "" (the root).
	Prefix string

	// ReadOnly refuses every write with 403 and renders no action
	// buttons, whatever Authorize says. Defaults to false.
	ReadOnly bool

	// Authorize decides each request: it is called with ActionRead for a
	// page and with the action for a write, and a non-nil error refuses
	// it with 403 and the error's text. Check the request's user here (a
	// session, a header your auth proxy sets). Defaults to nil: pages are
	// readable and every write is refused, so that mounting the handler
	// never opens writes by accident.
	Authorize func(r *http.Request, a Action) error

	// ShowPayloads shows the payloads and header values of dead letters
	// and outbox events. Defaults to false: they are redacted, and only
	// their size is shown.
	ShowPayloads bool

	// StuckAfter is the age after which a started remote-effect step that
	// was never recorded done counts as stuck. Defaults to
	// DefaultStuckAfter (5m).
	StuckAfter time.Duration

	// Outbox is the store's outbox, for the outbox page. Defaults to nil:
	// no outbox page (New sets it from the client's store).
	Outbox Outbox

	// Duplicates, if set, gives the overview's duplicates by reason.
	// Defaults to nil: the column is not shown.
	Duplicates DuplicateCounter

	// Logger receives the errors the pages hit. Defaults to nil, which is
	// silent.
	Logger *slog.Logger

	// Now returns the current time, for ages, coverage and headroom.
	// Defaults to time.Now.
	Now func() time.Time

	// AllowedHosts are the hosts the page answers for, besides the loopback
	// names and addresses (localhost, 127.0.0.0/8, ::1), which it always
	// answers. A request that names another in its Host header is refused
	// with 421 Misdirected Request, reads included: a site the operator
	// visits could otherwise point a name of its own at this machine (DNS
	// rebinding) and read or change the page from its own origin. List the
	// names and addresses the page is reached by, such as
	// "admin.example.com" or "10.0.0.5"; an entry matches any port, unless
	// it names one ("10.0.0.5:8080"). "*" answers every host: only behind
	// a reverse proxy that checks the Host itself. Defaults to nil: the
	// loopback names and addresses only.
	AllowedHosts []string
}

//go:embed templates/*.html static/*
var assets embed.FS

// Handler serves the admin pages. Create it with New or NewHandler.
type Handler struct {
	store Store
	cfg   Config
	base  string // Prefix without a trailing slash
	hosts hosts
	pages map[string]*template.Template
	log   *slog.Logger
	root  http.Handler
}

// New returns the admin page of c's store: NewHandler over FromClient(c),
// with the store's outbox unless cfg names one.
func New[TTx any](c *inbox.Client[TTx], cfg *Config) (*Handler, error) {
	s, ob := FromClient(c)
	var conf Config
	if cfg != nil {
		conf = *cfg
	}
	if conf.Outbox == nil {
		conf.Outbox = ob
	}
	return NewHandler(s, &conf)
}

// NewHandler returns the admin page of s. cfg may be nil.
func NewHandler(s Store, cfg *Config) (*Handler, error) {
	if s == nil {
		return nil, errors.New("inboxadmin: NewHandler: the store is nil")
	}
	h := &Handler{store: s}
	if cfg != nil {
		h.cfg = *cfg
	}
	if h.cfg.StuckAfter < 0 {
		return nil, fmt.Errorf("inboxadmin: Config.StuckAfter %s: must not be negative", h.cfg.StuckAfter)
	}
	if h.cfg.StuckAfter == 0 {
		h.cfg.StuckAfter = DefaultStuckAfter
	}
	if h.cfg.Now == nil {
		h.cfg.Now = time.Now
	}
	h.log = h.cfg.Logger
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	p := strings.TrimRight(h.cfg.Prefix, "/")
	if p != "" && !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("inboxadmin: Config.Prefix %q: want a path starting with /", h.cfg.Prefix)
	}
	if strings.ContainsAny(p, "?#\"'<> ") {
		return nil, fmt.Errorf("inboxadmin: Config.Prefix %q: want a plain path", h.cfg.Prefix)
	}
	h.base = p
	hs, err := newHosts(h.cfg.AllowedHosts)
	if err != nil {
		return nil, err
	}
	h.hosts = hs
	if err := h.parse(); err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.overview)
	mux.HandleFunc("GET /deadletters", h.deadLetters)
	mux.HandleFunc("GET /deadletters/bulk-replay", h.bulkReplayConfirm)
	mux.HandleFunc("POST /deadletters/bulk-replay", h.bulkReplay)
	mux.HandleFunc("GET /deadletters/{id}", h.deadLetter)
	mux.HandleFunc("GET /deadletters/{id}/replay", h.replayConfirm)
	mux.HandleFunc("POST /deadletters/{id}/replay", h.replay)
	mux.HandleFunc("GET /deadletters/{id}/delete", h.deleteConfirm)
	mux.HandleFunc("POST /deadletters/{id}/delete", h.deleteDeadLetter)
	mux.HandleFunc("GET /effects", h.effects)
	mux.HandleFunc("GET /effects/resolve", h.resolveConfirm)
	mux.HandleFunc("POST /effects/resolve", h.resolve)
	mux.HandleFunc("GET /outbox", h.outbox)
	mux.HandleFunc("GET /outbox/{id}", h.outboxEvent)
	mux.HandleFunc("POST /outbox/{id}/{action}", h.outboxAction)
	static, _ := fs.Sub(assets, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /robots.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "User-agent: *\nDisallow: /\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, errors.New("no such page"))
	})

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, errors.New("cross-origin request refused: writes must come from this page"))
	}))
	inner := cop.Handler(h.gate(mux))
	if p != "" {
		inner = http.StripPrefix(p, inner)
	}
	h.root = inner
	return h, nil
}

// ServeHTTP serves the pages, with the security headers on every answer.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	if !h.checkHost(w, r) {
		return
	}
	if h.base != "" && r.URL.Path == h.base {
		http.Redirect(w, r, h.base+"/", http.StatusMovedPermanently)
		return
	}
	if h.base != "" && !strings.HasPrefix(r.URL.Path, h.base+"/") {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no such page: the admin page is under %s/", h.base))
		return
	}
	h.root.ServeHTTP(w, r)
}

// gate authorizes reads; writes are authorized by their handlers, which
// know their action.
func (h *Handler) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			if h.cfg.Authorize != nil {
				if err := h.cfg.Authorize(r, ActionRead); err != nil {
					h.fail(w, r, http.StatusForbidden, err)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// allow decides a write: it answers 403 and returns false when the write
// is refused.
func (h *Handler) allow(w http.ResponseWriter, r *http.Request, a Action) bool {
	switch {
	case h.cfg.ReadOnly:
		h.fail(w, r, http.StatusForbidden, errors.New("the admin page is read-only"))
		return false
	case h.cfg.Authorize == nil:
		h.fail(w, r, http.StatusForbidden, errors.New("writes are off: the application allows them with inboxadmin.Config.Authorize ('inbox admin --allow-writes')"))
		return false
	}
	if err := h.cfg.Authorize(r, a); err != nil {
		h.fail(w, r, http.StatusForbidden, fmt.Errorf("%s refused: %w", a, err))
		return false
	}
	return true
}

// writable reports whether action buttons are rendered.
func (h *Handler) writable() bool { return !h.cfg.ReadOnly && h.cfg.Authorize != nil }

// wantJSON reports whether the client asked for JSON: ?format=json, or an
// Accept header that names application/json and not HTML.
func wantJSON(r *http.Request) bool {
	if f := r.URL.Query().Get("format"); f != "" {
		return f == "json"
	}
	a := r.Header.Get("Accept")
	return strings.Contains(a, "application/json") && !strings.Contains(a, "text/html")
}

func (h *Handler) parse() error {
	h.pages = map[string]*template.Template{}
	funcs := template.FuncMap{
		"ago":      func(t time.Time) string { return ago(h.cfg.Now(), t) },
		"dur":      fmtSeconds,
		"when":     func(t time.Time) string { return when(t) },
		"negative": func(s float64) bool { return s < 0 },
		"bytes":    fmtBytes,
		"plural":   plural,
		"link":     link,
		"query":    query,
		"ids":      joinIDs,
		"dict": func(kv ...any) (map[string]any, error) {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				k, ok := kv[i].(string)
				if !ok {
					return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
				}
				m[k] = kv[i+1]
			}
			if len(kv)%2 != 0 {
				return nil, errors.New("dict: want key-value pairs")
			}
			return m, nil
		},
	}
	entries, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := strings.TrimSuffix(strings.TrimPrefix(e, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "templates/layout.html", e)
		if err != nil {
			return fmt.Errorf("inboxadmin: template %s: %w", name, err)
		}
		h.pages[name] = t
	}
	return nil
}

// page is what every template gets.
type page struct {
	Title    string
	Base     string
	Nav      string
	Writable bool
	ReadOnly bool
	Outbox   bool
	Flash    string
	Error    string
	Status   int
	Data     any
}

// render answers with data as JSON, or as the named page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	if wantJSON(r) {
		writeJSON(w, http.StatusOK, data)
		return
	}
	h.html(w, r, http.StatusOK, name, &page{Title: title, Data: data, Flash: flash(r.URL.Query())})
}

func (h *Handler) html(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	p.Base, p.Nav = h.base, name
	p.Writable, p.ReadOnly, p.Outbox = h.writable(), h.cfg.ReadOnly, h.cfg.Outbox != nil
	p.Status = status
	t := h.pages[name]
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "layout", p); err != nil {
		h.log.ErrorContext(r.Context(), "inboxadmin: render", "page", name, "err", err)
		http.Error(w, "inboxadmin: could not render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprint(w, visible(b.String()))
}

// writeJSON answers v as JSON, with every control character escaped.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, "inboxadmin: could not encode the answer", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(escapeJSON(b.Bytes()))
}

// errorJSON is the JSON answer of a refused or failed request.
type errorJSON struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

// fail answers with an error page or JSON, which say err as errorText
// does.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	msg := errorText(err)
	if status >= 500 {
		h.log.ErrorContext(r.Context(), "inboxadmin: request failed", "path", r.URL.Path, "err", err)
	}
	if wantJSON(r) {
		writeJSON(w, status, errorJSON{Error: msg, Status: status})
		return
	}
	h.html(w, r, status, "error", &page{Title: http.StatusText(status), Error: msg})
}

// errorText is what the page says of err. An error whose meaning the page
// knows, by its sentinel, it says in its own words; any other it shows
// whole, as the package that returned it worded it.
func errorText(err error) string {
	switch {
	case errors.Is(err, inbox.ErrNoOutbox):
		return "the store keeps no outbox"
	case errors.Is(err, inbox.ErrEffectsUnsupported):
		return "the store keeps no effects ledger"
	case errors.Is(err, inbox.ErrReplayUnsupported):
		return "the store keeps no replay requests"
	case errors.Is(err, ErrUnsupported):
		return "the store does not keep this"
	case errors.Is(err, inbox.ErrNotFound):
		return "not found: it may have been replayed or deleted since the page that linked here was shown"
	case errors.Is(err, context.Canceled):
		return "the request was cancelled"
	}
	return err.Error()
}

// storeErr answers a store's error with the status it means.
func (h *Handler) storeErr(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, inbox.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, err)
	case errors.Is(err, ErrUnsupported), errors.Is(err, inbox.ErrNoOutbox),
		errors.Is(err, inbox.ErrEffectsUnsupported), errors.Is(err, inbox.ErrReplayUnsupported):
		h.fail(w, r, http.StatusNotImplemented, err)
	case errors.Is(err, inbox.ErrMalformedID), errors.Is(err, inbox.ErrNoMessageID), errors.Is(err, inbox.ErrInvalidConsumer), errors.Is(err, inbox.ErrInvalidStep):
		h.fail(w, r, http.StatusBadRequest, err)
	case errors.Is(err, context.Canceled):
		h.fail(w, r, 499, err)
	default:
		h.fail(w, r, http.StatusInternalServerError, err)
	}
}

// done answers a write that succeeded: JSON, or a redirect (303) to the
// page to show next, to (a path under the prefix, with the view it returns
// to and its flash code).
func (h *Handler) done(w http.ResponseWriter, r *http.Request, to string, result any) {
	if wantJSON(r) {
		writeJSON(w, http.StatusOK, result)
		return
	}
	http.Redirect(w, r, h.base+to, http.StatusSeeOther)
}

// flash turns a redirect's codes into the message shown above a page.
// The codes are fixed, and the counts numbers, so a crafted link cannot put
// words on the page.
func flash(q url.Values) string {
	count := func(k string) int64 {
		n, err := strconv.ParseInt(q.Get(k), 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	switch q.Get("done") {
	case "marked":
		return "Marked for replay. The application's next Client.ProcessReplays for this consumer processes it with the handler, exactly once."
	case "already-marked":
		return "It was already marked for replay."
	case "bulk-marked":
		s := plural(count("n"), "dead letter", "dead letters") + " marked for replay. The application's next Client.ProcessReplays for their consumer replays them."
		if g := count("gone"); g > 0 {
			s += " " + plural(g, "dead letter", "dead letters") + " of those listed had been replayed, deleted or changed since, and were not marked."
		}
		return s
	case "deleted":
		return "Dead letter deleted."
	case "resolved":
		return "Effect resolved. Replay the message's dead letter, if it has one, to finish it."
	case "retry", "park", "unpark":
		return "Outbox event: " + q.Get("done") + " done."
	}
	return ""
}

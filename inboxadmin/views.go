package inboxadmin

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxtype"
)

// Every action of the page acts on exactly what the page showed. A list's
// filter is a view: each link and form of the list, and of the pages
// opened from it, carries the view's parameters, so that a confirmation
// counts the filtered set, Cancel returns to the same view, and a write
// answers with a redirect to it. The parameters travel as they are, never
// as one escaped string, and a parameter a page does not take is refused
// rather than ignored: a link that lost its filter fails, instead of
// widening to everything.

// The parameters every page takes: the answer's format and the codes of
// the message a redirect shows.
var commonParams = []string{"format", "done", "n", "gone"}

// params refuses a parameter of v that is neither one of allowed nor
// common.
func params(v url.Values, allowed ...string) error {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) && !slices.Contains(commonParams, k) {
			return fmt.Errorf("unknown parameter %q: this page takes %s", k, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// link is base+path with the query q, for an href: the whole URL is one
// template value, so that html/template does not escape the query's = and &
// (it escapes a value that follows a '?' in the template as one parameter).
func link(base, path string, q url.Values) string {
	if s := q.Encode(); s != "" {
		return base + path + "?" + s
	}
	return base + path
}

// query makes url.Values of key-value pairs, leaving out empty values.
func query(kv ...string) (url.Values, error) {
	if len(kv)%2 != 0 {
		return nil, errors.New("query: want key-value pairs")
	}
	v := url.Values{}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	return v, nil
}

// printable refuses text with a character that is not printable, such as
// an escape sequence, in a parameter that is shown back.
func printable(name, s string) error {
	if i := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
		return fmt.Errorf("%s: contains the unprintable character %U", name, []rune(s[i:])[0])
	}
	return nil
}

// dlParams are the parameters of a dead-letter view.
var dlParams = []string{"consumer", "reason", "q", "limit"}

// dlFilter is the filter of the dead-letter list: its view, which the
// pages of a dead letter and the bulk replay carry.
type dlFilter struct {
	Consumer string `json:"consumer,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Query    string `json:"q,omitempty"`
	Limit    int    `json:"limit"`
}

// Values is the filter as the parameters of its view.
func (f dlFilter) Values() url.Values {
	v, _ := query("consumer", f.Consumer, "reason", f.Reason, "q", f.Query)
	if f.Limit != 0 && f.Limit != DefaultLimit {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	return v
}

// readFilter reads a dead-letter view from q, which takes only its
// parameters and the extra ones.
func readFilter(q url.Values, extra ...string) (dlFilter, error) {
	f := dlFilter{Consumer: strings.TrimSpace(q.Get("consumer")), Reason: strings.TrimSpace(q.Get("reason")), Query: strings.TrimSpace(q.Get("q")), Limit: DefaultLimit}
	if err := params(q, append(extra, dlParams...)...); err != nil {
		return f, err
	}
	if f.Consumer != "" {
		if err := inbox.ValidateConsumer(f.Consumer); err != nil {
			return f, err
		}
	}
	if len(f.Reason) > 128 || len(f.Query) > 256 {
		return f, errors.New("the reason or the search is too long")
	}
	if err := errors.Join(printable("reason", f.Reason), printable("q", f.Query)); err != nil {
		return f, err
	}
	limit, err := readLimit(q)
	f.Limit = limit
	return f, err
}

// readLimit reads the limit parameter of a list.
func readLimit(q url.Values) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > MaxLimit {
		return DefaultLimit, fmt.Errorf("limit %q: want a number from 1 to %d", s, MaxLimit)
	}
	return n, nil
}

// matches reports whether f selects d.
func (f dlFilter) matches(d *inboxtype.DeadLetter) bool {
	switch {
	case f.Consumer != "" && d.Consumer != f.Consumer:
		return false
	case f.Reason != "" && d.Reason != f.Reason:
		return false
	case f.Query != "" && !strings.Contains(d.MessageID, strings.ToLower(f.Query)) && !strings.Contains(d.DedupKey, f.Query):
		return false
	}
	return true
}

// effParams are the parameters of a stuck-effects view; the pages opened
// from it carry its consumer filter as list_consumer, since consumer names
// the step's own consumer there.
var effParams = []string{"consumer", "older"}

// effView is the view of the stuck-effects list.
type effView struct {
	Consumer string
	Older    string // as given, such as 2h; empty for Config.StuckAfter
	after    time.Duration
}

// Values is the view as its parameters.
func (v effView) Values() url.Values {
	q, _ := query("consumer", v.Consumer, "older", v.Older)
	return q
}

// readEffView reads a stuck-effects view: from the list's own parameters
// (consumer, older), or from a page opened from it (list_consumer, older).
func (h *Handler) readEffView(q url.Values, consumerParam string) (effView, error) {
	v := effView{Consumer: strings.TrimSpace(q.Get(consumerParam)), Older: q.Get("older"), after: h.cfg.StuckAfter}
	if v.Consumer != "" {
		if err := inbox.ValidateConsumer(v.Consumer); err != nil {
			return v, err
		}
	}
	if v.Older != "" {
		d, err := time.ParseDuration(v.Older)
		if err != nil || d < 0 {
			return v, fmt.Errorf("older %q: want a duration such as 5m or 2h", v.Older)
		}
		v.after = d
	}
	return v, nil
}

// obParams are the parameters of an outbox view.
var obParams = []string{"state", "limit"}

// obView is the view of the outbox list: a state tab, and a limit.
type obView struct {
	State string
	Limit int
}

// Values is the view as its parameters; the state always, since none
// means pending and an empty one every state.
func (v obView) Values() url.Values {
	q := url.Values{"state": {v.State}}
	if v.Limit != DefaultLimit {
		q.Set("limit", strconv.Itoa(v.Limit))
	}
	return q
}

// readObView reads an outbox view from q, which takes only its parameters
// and the extra ones.
func readObView(q url.Values, extra ...string) (obView, error) {
	v := obView{State: q.Get("state"), Limit: DefaultLimit}
	if !q.Has("state") {
		v.State = "pending"
	}
	if err := params(q, append(extra, obParams...)...); err != nil {
		return v, err
	}
	switch v.State {
	case "", "pending", "parked", "published":
	default:
		return v, fmt.Errorf("state %q: want pending, parked or published", v.State)
	}
	var err error
	v.Limit, err = readLimit(q)
	return v, err
}

// readIDs reads the dead-letter ids a bulk replay's confirmation listed:
// comma-separated, in one or more values.
func readIDs(vs []string) ([]int64, error) {
	var ids []int64
	seen := map[int64]bool{}
	for _, v := range vs {
		for s := range strings.SplitSeq(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			id, err := strconv.ParseInt(s, 10, 64)
			if err != nil || id <= 0 {
				return nil, fmt.Errorf("ids: %q is not a dead letter id", s)
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	switch {
	case len(ids) == 0:
		return nil, errors.New("ids: the form lists no dead letters: open the bulk replay's confirmation, which lists them, and confirm there")
	case len(ids) > MaxLimit:
		return nil, fmt.Errorf("ids: %d dead letters: one bulk replay takes at most %d", len(ids), MaxLimit)
	}
	return ids, nil
}

// joinIDs is the form value of ids.
func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}

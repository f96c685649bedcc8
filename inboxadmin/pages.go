package inboxadmin

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/duration"

	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxdriver"
)

// The JSON of every page is a contract: fields are only added.

// OverviewJSON is the overview page.
type OverviewJSON struct {
	Now             time.Time      `json:"now"`
	ReplayHorizonS  float64        `json:"replay_horizon_s"`
	StuckAfterS     float64        `json:"stuck_after_s"`
	TableBytes      int64          `json:"table_bytes"`
	Consumers       []ConsumerJSON `json:"consumers"`
	DeadLettersMore bool           `json:"dead_letters_more,omitempty"`
	EffectsError    string         `json:"effects_error,omitempty"`
	Partitions      *PartitionJSON `json:"partitions,omitempty"`
	Outbox          *OutboxJSON    `json:"outbox,omitempty"`
	OutboxError     string         `json:"outbox_error,omitempty"`
	ReadOnly        bool           `json:"read_only"`
	Writable        bool           `json:"writable"`
}

// ConsumerJSON is one consumer's line of the overview.
type ConsumerJSON struct {
	Consumer string    `json:"consumer"`
	Rows     int64     `json:"rows"`
	Oldest   time.Time `json:"oldest,omitzero"`
	Newest   time.Time `json:"newest,omitzero"`
	// CoverageS is how far back the inbox still deduplicates: now minus
	// the oldest retained row (on a partitioned inbox, minus the oldest
	// partition's lower bound).
	CoverageS float64 `json:"coverage_s"`
	// HeadroomS is CoverageS minus the replay horizon: negative means a
	// replay over the whole horizon reaches messages the inbox no longer
	// remembers (expected while the consumer is younger than the
	// horizon).
	HeadroomS    float64          `json:"headroom_s"`
	DeadLetters  int              `json:"dead_letters"`
	StuckEffects int              `json:"stuck_effects"`
	Duplicates   map[string]int64 `json:"duplicates,omitempty"`
}

// PartitionJSON is the state of a partitioned inbox.
type PartitionJSON struct {
	Count       int       `json:"count"`
	Detached    int       `json:"detached"`
	OldestBound time.Time `json:"oldest_bound,omitzero"`
	NewestBound time.Time `json:"newest_bound,omitzero"`
	Rows        int64     `json:"rows_estimate"`
	Bytes       int64     `json:"bytes"`
}

// OutboxJSON is the state of the outbox.
type OutboxJSON struct {
	Pending       int64     `json:"pending"`
	Parked        int64     `json:"parked"`
	Published     int64     `json:"published"`
	OldestPending time.Time `json:"oldest_pending,omitzero"`
	LagS          float64   `json:"lag_s"`
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := h.cfg.Now()
	horizon := h.store.ReplayHorizon()
	out := OverviewJSON{Now: now.UTC(), ReplayHorizonS: horizon.Seconds(), StuckAfterS: h.cfg.StuckAfter.Seconds(),
		ReadOnly: h.cfg.ReadOnly, Writable: h.writable()}
	st, err := h.store.Stats(ctx)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	out.TableBytes = st.TableBytes
	byName := map[string]*ConsumerJSON{}
	line := func(name string) *ConsumerJSON {
		c := byName[name]
		if c == nil {
			c = &ConsumerJSON{Consumer: name}
			byName[name] = c
		}
		return c
	}
	var oldestBound time.Time
	ps, err := h.store.Partitions(ctx)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	if ps != nil {
		pj := &PartitionJSON{Count: len(ps.Partitions), Detached: len(ps.Detached)}
		pj.OldestBound, pj.NewestBound = ps.Range()
		for _, p := range ps.Partitions {
			pj.Rows += max(p.Rows, 0)
			pj.Bytes += p.Bytes
		}
		oldestBound = pj.OldestBound
		out.Partitions = pj
	}
	for _, cs := range st.Consumers {
		c := line(cs.Consumer)
		c.Rows, c.Oldest, c.Newest = cs.Rows, cs.Oldest.UTC(), cs.Newest.UTC()
		from := cs.Oldest
		if !oldestBound.IsZero() {
			from = oldestBound
		}
		c.CoverageS = max(now.Sub(from), 0).Seconds()
		c.HeadroomS = c.CoverageS - horizon.Seconds()
	}
	dls, err := h.store.DeadLetterList(ctx, "", MaxLimit)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	out.DeadLettersMore = len(dls) == MaxLimit
	for _, d := range dls {
		line(d.Consumer).DeadLetters++
	}
	stuck, err := h.store.StuckEffects(ctx, "", now.Add(-h.cfg.StuckAfter), MaxLimit)
	switch {
	case errors.Is(err, ErrUnsupported):
		out.EffectsError = "the store keeps no effects ledger"
	case err != nil:
		h.storeErr(w, r, err)
		return
	}
	for _, e := range stuck {
		line(e.Consumer).StuckEffects++
	}
	if h.cfg.Outbox != nil {
		obs, err := h.cfg.Outbox.OutboxStats(ctx)
		if err != nil {
			out.OutboxError = errorText(err)
		} else {
			out.Outbox = outboxJSON(obs)
		}
	}
	for _, c := range byName {
		if c.Rows == 0 {
			c.HeadroomS = -horizon.Seconds()
		}
		if h.cfg.Duplicates != nil {
			c.Duplicates = h.cfg.Duplicates.DuplicatesByReason(c.Consumer)
		}
		out.Consumers = append(out.Consumers, *c)
	}
	slices.SortFunc(out.Consumers, func(a, b ConsumerJSON) int { return strings.Compare(a.Consumer, b.Consumer) })
	if out.Consumers == nil {
		out.Consumers = []ConsumerJSON{}
	}
	h.render(w, r, "overview", "Overview", &overviewView{OverviewJSON: out, Dups: h.cfg.Duplicates != nil})
}

// overviewView is the overview's page data; its JSON is OverviewJSON.
type overviewView struct {
	OverviewJSON
	Dups bool `json:"-"`
}

func outboxJSON(s *inboxtype.OutboxStats) *OutboxJSON {
	return &OutboxJSON{Pending: s.Pending, Parked: s.Parked, Published: s.Published, OldestPending: s.OldestPending.UTC(), LagS: s.Lag.Seconds()}
}

// DeadLetterJSON is a dead letter. The payload and header values are
// empty, and PayloadRedacted true, unless Config.ShowPayloads.
type DeadLetterJSON struct {
	ID              int64             `json:"id"`
	Consumer        string            `json:"consumer"`
	MessageID       string            `json:"message_id"`
	Reason          string            `json:"reason"`
	Error           string            `json:"error"`
	Attempts        int               `json:"attempts"`
	FirstSeen       time.Time         `json:"first_seen"`
	LastSeen        time.Time         `json:"last_seen"`
	Source          string            `json:"source"`
	Headers         map[string]string `json:"headers"`
	Payload         string            `json:"payload"`
	PayloadBase64   bool              `json:"payload_base64,omitempty"`
	PayloadBytes    int               `json:"payload_bytes"`
	PayloadRedacted bool              `json:"payload_redacted,omitempty"`
	// Replayable is false for a dead letter without a valid message id:
	// no replay can apply it.
	Replayable bool `json:"replayable"`
}

// redacted is what a hidden header value reads.
const redacted = "(redacted)"

func (h *Handler) deadLetterJSON(d *inboxtype.DeadLetter) DeadLetterJSON {
	j := DeadLetterJSON{
		ID: d.ID, Consumer: d.Consumer, MessageID: d.MessageID, Reason: d.Reason, Error: d.Error,
		Attempts: d.Attempts, FirstSeen: d.FirstSeen.UTC(), LastSeen: d.LastSeen.UTC(),
		Source:     inbox.Source{Transport: d.Transport, Queue: d.Queue, Partition: d.Partition, Offset: d.Offset, BrokerID: d.BrokerID}.String(),
		Headers:    map[string]string{},
		Replayable: d.MessageID != "", PayloadBytes: len(d.Payload),
	}
	j.Payload, j.PayloadBase64, j.PayloadRedacted = h.payload(d.Payload)
	for k, v := range d.Headers {
		if !h.cfg.ShowPayloads {
			v = redacted
		}
		j.Headers[k] = v
	}
	return j
}

// payload is how a payload is shown: redacted, as text, or in base64.
func (h *Handler) payload(p []byte) (s string, b64, hidden bool) {
	switch {
	case !h.cfg.ShowPayloads:
		return "", false, true
	case utf8.Valid(p):
		return string(p), false, false
	default:
		return base64.StdEncoding.EncodeToString(p), true, false
	}
}

// match lists the dead letters that f selects, at most limit.
func (h *Handler) match(r *http.Request, f dlFilter, limit int) ([]*inboxtype.DeadLetter, bool, error) {
	fetch := limit
	if f.Reason != "" || f.Query != "" {
		fetch = MaxLimit
	}
	ds, err := h.store.DeadLetterList(r.Context(), f.Consumer, fetch)
	if err != nil {
		return nil, false, err
	}
	more := len(ds) == fetch
	var out []*inboxtype.DeadLetter
	for _, d := range ds {
		if !f.matches(d) {
			continue
		}
		if len(out) == limit {
			more = true
			break
		}
		out = append(out, d)
	}
	return out, more, nil
}

// DeadLettersJSON is the dead-letter list.
type DeadLettersJSON struct {
	Filter      dlFilter         `json:"filter"`
	DeadLetters []DeadLetterJSON `json:"dead_letters"`
	// More is true when more dead letters match than are listed.
	More bool `json:"more"`
}

func (h *Handler) deadLetters(w http.ResponseWriter, r *http.Request) {
	f, err := readFilter(r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	ds, more, err := h.match(r, f, f.Limit)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	out := DeadLettersJSON{Filter: f, DeadLetters: []DeadLetterJSON{}, More: more}
	for _, d := range ds {
		out.DeadLetters = append(out.DeadLetters, h.deadLetterJSON(d))
	}
	h.render(w, r, "deadletters", "Dead letters", &out)
}

func pathID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("dead letter id %q: want a positive number", s)
	}
	return id, nil
}

// deadLetterPage is the page of one dead letter, and of its replay and
// delete confirmations: the dead letter, and the list view it was opened
// from. Its JSON is DeadLetterJSON.
type deadLetterPage struct {
	DeadLetterJSON
	View dlFilter `json:"-"`
}

// getDeadLetter reads the dead letter of a page and the view it was opened
// from.
func (h *Handler) getDeadLetter(w http.ResponseWriter, r *http.Request) (*deadLetterPage, bool) {
	id, err := pathID(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return nil, false
	}
	view, err := readFilter(r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return nil, false
	}
	d, err := h.store.DeadLetterGet(r.Context(), id)
	if err != nil {
		h.storeErr(w, r, err)
		return nil, false
	}
	return &deadLetterPage{DeadLetterJSON: h.deadLetterJSON(d), View: view}, true
}

func (h *Handler) deadLetter(w http.ResponseWriter, r *http.Request) {
	if p, ok := h.getDeadLetter(w, r); ok {
		h.render(w, r, "deadletter", fmt.Sprintf("Dead letter %d", p.ID), p)
	}
}

func (h *Handler) replayConfirm(w http.ResponseWriter, r *http.Request) {
	if p, ok := h.getDeadLetter(w, r); ok {
		h.render(w, r, "replay", fmt.Sprintf("Replay dead letter %d", p.ID), p)
	}
}

func (h *Handler) deleteConfirm(w http.ResponseWriter, r *http.Request) {
	if p, ok := h.getDeadLetter(w, r); ok {
		h.render(w, r, "delete", fmt.Sprintf("Delete dead letter %d", p.ID), p)
	}
}

// ReplayJSON is the answer of a replay request.
type ReplayJSON struct {
	ID     int64 `json:"id,omitempty"`
	Marked int64 `json:"marked"`
	// AlreadyMarked is true when the dead letter was marked before.
	AlreadyMarked bool `json:"already_marked,omitempty"`
	// Gone counts, in a bulk replay, the dead letters its confirmation
	// listed that were replayed, deleted or changed so that they no longer
	// match its filter: they were not marked.
	Gone int `json:"gone,omitempty"`
}

// dlWrite reads the dead letter a write names, and the view its form
// carries, after authorizing action.
func (h *Handler) dlWrite(w http.ResponseWriter, r *http.Request, a Action) (int64, dlFilter, bool) {
	if !h.allow(w, r, a) {
		return 0, dlFilter{}, false
	}
	id, err := pathID(r)
	if err == nil {
		err = r.ParseForm()
	}
	var view dlFilter
	if err == nil {
		view, err = readFilter(r.PostForm)
	}
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return 0, dlFilter{}, false
	}
	return id, view, true
}

func (h *Handler) replay(w http.ResponseWriter, r *http.Request) {
	id, view, ok := h.dlWrite(w, r, ActionDeadLetterReplay)
	if !ok {
		return
	}
	marked, err := h.store.DeadLetterReplay(r.Context(), id)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "inboxadmin: dead letter marked for replay", "id", id, "marked", marked)
	res := ReplayJSON{ID: id, AlreadyMarked: !marked}
	code := "already-marked"
	if marked {
		res.Marked, code = 1, "marked"
	}
	back := view.Values()
	back.Set("done", code)
	h.done(w, r, link("", fmt.Sprintf("/deadletters/%d", id), back), res)
}

func (h *Handler) deleteDeadLetter(w http.ResponseWriter, r *http.Request) {
	id, view, ok := h.dlWrite(w, r, ActionDeadLetterDelete)
	if !ok {
		return
	}
	if err := h.store.DeadLetterDelete(r.Context(), id); err != nil {
		h.storeErr(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "inboxadmin: dead letter deleted", "id", id)
	back := view.Values()
	back.Set("done", "deleted")
	h.done(w, r, link("", "/deadletters", back), map[string]any{"id": id, "deleted": true})
}

// BulkReplayJSON is the confirmation page of a bulk replay: Count dead
// letters match the filter and can be replayed, those of IDs. A POST must
// send the filter, the IDs and, as confirm, their count: it marks those of
// the IDs that still match the filter, and no other.
type BulkReplayJSON struct {
	Filter dlFilter `json:"filter"`
	Count  int      `json:"count"`
	// IDs are the dead letters a confirmation marks.
	IDs []int64 `json:"ids"`
	// Skipped counts the matching dead letters without a valid message
	// id: no replay can apply them.
	Skipped int `json:"skipped"`
	// Capped is true when more match than one bulk replay takes
	// (MaxLimit): replay again for the rest.
	Capped bool `json:"capped"`
}

func (h *Handler) bulkReplayConfirm(w http.ResponseWriter, r *http.Request) {
	f, err := readFilter(r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	ds, more, err := h.match(r, f, MaxLimit)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	out := BulkReplayJSON{Filter: f, Capped: more, IDs: []int64{}}
	for _, d := range ds {
		if d.MessageID == "" {
			out.Skipped++
			continue
		}
		out.IDs = append(out.IDs, d.ID)
	}
	out.Count = len(out.IDs)
	h.render(w, r, "bulkreplay", "Replay dead letters", &out)
}

// bulkReplay marks the dead letters its confirmation listed (the form's
// ids) that still match its filter. One that arrived since the
// confirmation is not marked, since nobody saw it counted; one replayed,
// deleted or changed since is counted as gone.
func (h *Handler) bulkReplay(w http.ResponseWriter, r *http.Request) {
	if !h.allow(w, r, ActionDeadLetterReplay) {
		return
	}
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	f, err := readFilter(r.PostForm, "ids", "confirm")
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	ids, err := readIDs(r.PostForm["ids"])
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	typed := strings.TrimSpace(r.PostForm.Get("confirm"))
	if typed != strconv.Itoa(len(ids)) {
		h.fail(w, r, http.StatusConflict, fmt.Errorf("confirmation %q does not match: the confirmation listed %s; type %d to confirm", typed, plural(len(ids), "dead letter", "dead letters"), len(ids)))
		return
	}
	var res ReplayJSON
	for _, id := range ids {
		d, err := h.store.DeadLetterGet(r.Context(), id)
		if errors.Is(err, inbox.ErrNotFound) {
			res.Gone++ // replayed or deleted meanwhile
			continue
		}
		if err != nil {
			h.storeErr(w, r, fmt.Errorf("after marking %d for replay: %w", res.Marked, err))
			return
		}
		if !f.matches(d) || d.MessageID == "" {
			res.Gone++
			continue
		}
		ok, err := h.store.DeadLetterReplay(r.Context(), d.ID)
		if errors.Is(err, inbox.ErrNotFound) {
			res.Gone++
			continue
		}
		if err != nil {
			h.storeErr(w, r, fmt.Errorf("after marking %d for replay: %w", res.Marked, err))
			return
		}
		if ok {
			res.Marked++
		}
	}
	h.log.InfoContext(r.Context(), "inboxadmin: dead letters marked for replay", "consumer", f.Consumer, "reason", f.Reason, "q", f.Query,
		"listed", len(ids), "marked", res.Marked, "gone", res.Gone)
	back := f.Values()
	back.Set("done", "bulk-marked")
	back.Set("n", strconv.FormatInt(res.Marked, 10))
	if res.Gone > 0 {
		back.Set("gone", strconv.Itoa(res.Gone))
	}
	h.done(w, r, link("", "/deadletters", back), res)
}

// EffectJSON is a ledger entry.
type EffectJSON struct {
	Consumer  string    `json:"consumer"`
	MessageID string    `json:"message_id"`
	Step      string    `json:"step"`
	State     string    `json:"state"`
	Attempts  int       `json:"attempts"`
	StartedAt time.Time `json:"started_at"`
	// Resolvable is true for a step that is stuck: started longer ago than
	// Config.StuckAfter and never recorded done. A younger one may still
	// be running, and the page does not resolve it.
	Resolvable bool `json:"resolvable"`
}

// EffectsJSON is the stuck-effects page.
type EffectsJSON struct {
	Consumer string `json:"consumer,omitempty"`
	// Older is the list's ?older= (a duration), when given.
	Older       string       `json:"older,omitempty"`
	StuckAfterS float64      `json:"stuck_after_s"`
	Effects     []EffectJSON `json:"effects"`
	More        bool         `json:"more"`
}

func (h *Handler) effects(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	view, err := h.readEffView(q, "consumer")
	if err == nil {
		err = params(q, effParams...)
	}
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	es, err := h.store.StuckEffects(r.Context(), view.Consumer, h.cfg.Now().Add(-view.after), MaxLimit+1)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	out := EffectsJSON{Consumer: view.Consumer, Older: view.Older, StuckAfterS: view.after.Seconds(), Effects: []EffectJSON{}}
	if len(es) > MaxLimit {
		es, out.More = es[:MaxLimit], true
	}
	for _, e := range es {
		out.Effects = append(out.Effects, h.effectJSON(e))
	}
	h.render(w, r, "effects", "Stuck effects", &out)
}

func (h *Handler) effectJSON(e *inboxtype.EffectEntry) EffectJSON {
	return EffectJSON{Consumer: e.Consumer, MessageID: e.MessageID, Step: e.Step, State: string(e.State), Attempts: e.Attempts, StartedAt: e.StartedAt.UTC(),
		Resolvable: e.State == inboxtype.EffectStarted && e.StartedAt.Before(h.cfg.Now().Add(-h.cfg.StuckAfter))}
}

// resolveParams are the parameters of the resolve page: the step's key,
// and the view of the list it was opened from.
var resolveParams = []string{"consumer", "message_id", "step", "list_consumer", "older"}

// resolvePage is the page that resolves a step: the step as stored, and
// the view of the list it was opened from. Its JSON is EffectJSON.
type resolvePage struct {
	EffectJSON
	View        url.Values `json:"-"`
	StuckAfterS float64    `json:"-"`
}

// getEffect reads the step a resolve page or form names, as stored, and
// the view it carries.
func (h *Handler) getEffect(w http.ResponseWriter, r *http.Request, v url.Values, extra ...string) (*resolvePage, bool) {
	p, err := effectKey(v)
	if err == nil {
		err = params(v, append(extra, resolveParams...)...)
	}
	var view effView
	if err == nil {
		view, err = h.readEffView(v, "list_consumer")
	}
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return nil, false
	}
	e, err := h.store.Effect(r.Context(), p.Consumer, p.MessageID, p.Step)
	if err != nil {
		h.storeErr(w, r, err)
		return nil, false
	}
	return &resolvePage{EffectJSON: h.effectJSON(e), View: view.Values(), StuckAfterS: h.cfg.StuckAfter.Seconds()}, true
}

// effectKey reads the consumer, message id and step of a form or query.
func effectKey(v url.Values) (inbox.EffectResolveParams, error) {
	p := inbox.EffectResolveParams{Consumer: v.Get("consumer"), MessageID: v.Get("message_id"), Step: v.Get("step")}
	if err := inbox.ValidateConsumer(p.Consumer); err != nil {
		return p, err
	}
	if p.MessageID == "" || p.Step == "" || len(p.MessageID) > 256 || len(p.Step) > inbox.MaxStepLen {
		return p, errors.New("want consumer, message_id and step")
	}
	return p, nil
}

func (h *Handler) resolveConfirm(w http.ResponseWriter, r *http.Request) {
	if p, ok := h.getEffect(w, r, r.URL.Query()); ok {
		h.render(w, r, "resolve", "Resolve an effect", p)
	}
}

// resolve settles the step its form names, as the page showed it: a step
// that is not stuck, or that was attempted again since, is refused.
func (h *Handler) resolve(w http.ResponseWriter, r *http.Request) {
	if !h.allow(w, r, ActionEffectResolve) {
		return
	}
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	e, ok := h.getEffect(w, r, r.PostForm, "state", "result", "confirm", "attempts")
	if !ok {
		return
	}
	f := r.PostForm
	p := inbox.EffectResolveParams{Consumer: e.Consumer, MessageID: e.MessageID, Step: e.Step, State: inboxtype.EffectState(f.Get("state"))}
	if p.State != inboxtype.EffectDone && p.State != inboxtype.EffectFailed {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("state %q: want done (the call took effect) or failed (it did not)", p.State))
		return
	}
	if f.Get("confirm") != p.Step {
		h.fail(w, r, http.StatusConflict, fmt.Errorf("confirmation does not match: type the step's name, %q, to resolve it", p.Step))
		return
	}
	shown, err := strconv.Atoi(f.Get("attempts"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("attempts %q: want the step's attempts, as the page showed them", f.Get("attempts")))
		return
	}
	where := p.Consumer + "/" + p.MessageID + "/" + p.Step
	switch {
	case e.State != string(inboxtype.EffectStarted):
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no started step %s: it is %s, nothing to resolve", where, e.State))
		return
	case e.Attempts != shown:
		h.fail(w, r, http.StatusConflict, fmt.Errorf("step %s was attempted again since the page showed it (%s then, %d now): look at it again", where, plural(shown, "attempt", "attempts"), e.Attempts))
		return
	case !e.Resolvable:
		h.fail(w, r, http.StatusConflict, fmt.Errorf("step %s is not stuck: it started %s, less than %s ago, and may still be running", where, ago(h.cfg.Now(), e.StartedAt), fmtSeconds(e.StuckAfterS)))
		return
	}
	if p.State == inboxtype.EffectDone {
		p.Result = []byte(f.Get("result"))
	}
	if err := h.store.EffectResolve(r.Context(), p); err != nil {
		h.storeErr(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "inboxadmin: effect resolved", "consumer", p.Consumer, "id", p.MessageID, "step", p.Step, "state", p.State)
	e.View.Set("done", "resolved")
	h.done(w, r, link("", "/effects", e.View), map[string]any{"resolved": true, "state": p.State})
}

// OutboxEventJSON is one outbox event.
type OutboxEventJSON struct {
	ID              string            `json:"id"`
	Topic           string            `json:"topic"`
	Key             string            `json:"key"`
	State           string            `json:"state"`
	Attempts        int               `json:"attempts"`
	LastError       string            `json:"last_error"`
	CreatedAt       time.Time         `json:"created_at"`
	AvailableAt     time.Time         `json:"available_at"`
	ParkedAt        time.Time         `json:"parked_at,omitzero"`
	PublishedAt     time.Time         `json:"published_at,omitzero"`
	KeySeq          int64             `json:"key_seq,omitempty"`
	CausationID     string            `json:"causation_id,omitempty"`
	Headers         map[string]string `json:"headers"`
	Payload         string            `json:"payload"`
	PayloadBase64   bool              `json:"payload_base64,omitempty"`
	PayloadBytes    int               `json:"payload_bytes"`
	PayloadRedacted bool              `json:"payload_redacted,omitempty"`
}

func (h *Handler) outboxEventJSON(e *inboxdriver.OutboxRow) OutboxEventJSON {
	now := h.cfg.Now()
	state := "pending"
	switch {
	case !e.PublishedAt.IsZero():
		state = "published"
	case !e.ParkedAt.IsZero():
		state = "parked"
	case e.Claimed && e.AvailableAt.After(now):
		state = "claimed"
	case e.AvailableAt.After(now):
		state = "backoff"
	}
	j := OutboxEventJSON{ID: e.ID, Topic: e.Topic, State: state, Attempts: e.Attempts, LastError: e.LastError,
		CreatedAt: e.CreatedAt.UTC(), AvailableAt: e.AvailableAt.UTC(), ParkedAt: e.ParkedAt.UTC(), PublishedAt: e.PublishedAt.UTC(),
		KeySeq: e.KeySeq, CausationID: e.CausationID, Headers: map[string]string{}, PayloadBytes: len(e.Payload)}
	if utf8.Valid(e.Key) {
		j.Key = string(e.Key)
	} else {
		j.Key = "base64:" + base64.StdEncoding.EncodeToString(e.Key)
	}
	j.Payload, j.PayloadBase64, j.PayloadRedacted = h.payload(e.Payload)
	for k, v := range e.Headers {
		if !h.cfg.ShowPayloads {
			v = redacted
		}
		j.Headers[k] = v
	}
	return j
}

// OutboxPageJSON is the outbox page.
type OutboxPageJSON struct {
	Stats  *OutboxJSON       `json:"stats"`
	State  string            `json:"state"`
	Limit  int               `json:"limit"`
	Events []OutboxEventJSON `json:"events"`
	More   bool              `json:"more"`
}

func (h *Handler) needOutbox(w http.ResponseWriter, r *http.Request) bool {
	if h.cfg.Outbox == nil {
		h.fail(w, r, http.StatusNotFound, errors.New("the store keeps no outbox"))
		return false
	}
	return true
}

// outboxPage is the outbox list's page data; its JSON is OutboxPageJSON.
type outboxPage struct {
	OutboxPageJSON
	View url.Values `json:"-"`
	Tabs []obTab    `json:"-"`
}

// obTab is a state tab of the outbox list, which keeps the list's limit.
type obTab struct {
	Name    string
	View    url.Values
	Current bool
}

func (h *Handler) outbox(w http.ResponseWriter, r *http.Request) {
	if !h.needOutbox(w, r) {
		return
	}
	view, err := readObView(r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	st, err := h.cfg.Outbox.OutboxStats(r.Context())
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	rows, err := h.cfg.Outbox.OutboxList(r.Context(), view.State, view.Limit+1)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	out := OutboxPageJSON{Stats: outboxJSON(st), State: view.State, Limit: view.Limit, Events: []OutboxEventJSON{}}
	if len(rows) > view.Limit {
		rows, out.More = rows[:view.Limit], true
	}
	for _, e := range rows {
		out.Events = append(out.Events, h.outboxEventJSON(e))
	}
	page := &outboxPage{OutboxPageJSON: out, View: view.Values()}
	for _, t := range []struct{ name, state string }{{"Pending", "pending"}, {"Parked", "parked"}, {"Published", "published"}, {"All", ""}} {
		tab := obView{State: t.state, Limit: view.Limit}
		page.Tabs = append(page.Tabs, obTab{Name: t.name, View: tab.Values(), Current: t.state == view.State})
	}
	h.render(w, r, "outbox", "Outbox", page)
}

// outboxEventPage is an outbox event's page data, with the view of the
// list it was opened from; its JSON is OutboxEventJSON.
type outboxEventPage struct {
	OutboxEventJSON
	View url.Values `json:"-"`
}

func (h *Handler) outboxEvent(w http.ResponseWriter, r *http.Request) {
	if !h.needOutbox(w, r) {
		return
	}
	view, err := readObView(r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	e, err := h.cfg.Outbox.OutboxGet(r.Context(), r.PathValue("id"))
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	h.render(w, r, "outboxevent", "Outbox event", &outboxEventPage{OutboxEventJSON: h.outboxEventJSON(e), View: view.Values()})
}

// outboxAction applies an action to the one event its path names, and
// returns to the page the form was on (from: list or event), in the view it
// carries.
func (h *Handler) outboxAction(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	a, ok := map[string]Action{"retry": ActionOutboxRetry, "park": ActionOutboxPark, "unpark": ActionOutboxUnpark}[action]
	if !ok {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("outbox action %q: want retry, park or unpark", action))
		return
	}
	if !h.needOutbox(w, r) || !h.allow(w, r, a) {
		return
	}
	err := r.ParseForm()
	var view obView
	if err == nil {
		view, err = readObView(r.PostForm, "from")
	}
	from := r.PostForm.Get("from")
	if err == nil && from != "" && from != "list" && from != "event" {
		err = fmt.Errorf("from %q: want list or event", from)
	}
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	id := r.PathValue("id")
	found, err := h.cfg.Outbox.OutboxSet(r.Context(), id, action)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	if !found {
		h.fail(w, r, http.StatusConflict, fmt.Errorf("no event %s in a state that %s applies to (retry and park take a pending event, unpark a parked one)", id, action))
		return
	}
	h.log.InfoContext(r.Context(), "inboxadmin: outbox event changed", "id", id, "action", action)
	back := view.Values()
	back.Set("done", action)
	to := link("", "/outbox/"+url.PathEscape(id), back)
	if from == "list" {
		to = link("", "/outbox", back)
	}
	h.done(w, r, to, map[string]any{"id": id, "action": action})
}

// ago formats how long before now t was.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + duration.Format((-d).Round(time.Second))
	}
	return duration.Format(d.Round(time.Second)) + " ago"
}

// fmtSeconds formats seconds as a duration, with its sign.
func fmtSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	if d < 0 {
		return "−" + duration.Format(-d)
	}
	return duration.Format(d)
}

func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// fmtBytes formats a size in bytes with a binary unit.
func fmtBytes(n int64) string {
	if n < 0 {
		return "unknown"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

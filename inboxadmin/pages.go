package inboxadmin

import (
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/txinbox/inbox/inboxtype"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
	dls, err := h.store.ListDeadLetters(ctx, "", MaxLimit)
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
			out.OutboxError = strings.ReplaceAll(err.Error(), "inbox: ", "")
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

func outboxJSON(s *inbox.OutboxStats) *OutboxJSON {
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

// dlFilter is the filter of the dead-letter list and of a bulk replay.
type dlFilter struct {
	Consumer string `json:"consumer,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Query    string `json:"q,omitempty"`
	Limit    int    `json:"limit"`
}

// Values is the filter as a query string's values.
func (f dlFilter) Values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"consumer": f.Consumer, "reason": f.Reason, "q": f.Query} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// Query is the filter as a query string.
func (f dlFilter) Encode() string { return f.Values().Encode() }

func readFilter(q url.Values) (dlFilter, error) {
	f := dlFilter{Consumer: strings.TrimSpace(q.Get("consumer")), Reason: strings.TrimSpace(q.Get("reason")), Query: strings.TrimSpace(q.Get("q")), Limit: DefaultLimit}
	if f.Consumer != "" {
		if err := inbox.ValidateConsumer(f.Consumer); err != nil {
			return f, err
		}
	}
	if len(f.Reason) > 128 || len(f.Query) > 256 {
		return f, errors.New("the reason or the search is too long")
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > MaxLimit {
			return f, fmt.Errorf("limit %q: want a number from 1 to %d", s, MaxLimit)
		}
		f.Limit = n
	}
	return f, nil
}

// match lists the dead letters that f selects, at most limit.
func (h *Handler) match(r *http.Request, f dlFilter, limit int) ([]*inboxtype.DeadLetter, bool, error) {
	fetch := limit
	if f.Reason != "" || f.Query != "" {
		fetch = MaxLimit
	}
	ds, err := h.store.ListDeadLetters(r.Context(), f.Consumer, fetch)
	if err != nil {
		return nil, false, err
	}
	more := len(ds) == fetch
	var out []*inboxtype.DeadLetter
	for _, d := range ds {
		if f.Reason != "" && d.Reason != f.Reason {
			continue
		}
		if f.Query != "" && !strings.Contains(d.MessageID, strings.ToLower(f.Query)) && !strings.Contains(d.DedupKey, f.Query) {
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

func (h *Handler) getDeadLetter(w http.ResponseWriter, r *http.Request) (*inboxtype.DeadLetter, bool) {
	id, err := pathID(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return nil, false
	}
	d, err := h.store.GetDeadLetter(r.Context(), id)
	if err != nil {
		h.storeErr(w, r, err)
		return nil, false
	}
	return d, true
}

func (h *Handler) deadLetter(w http.ResponseWriter, r *http.Request) {
	if d, ok := h.getDeadLetter(w, r); ok {
		j := h.deadLetterJSON(d)
		h.render(w, r, "deadletter", fmt.Sprintf("Dead letter %d", d.ID), &j)
	}
}

func (h *Handler) replayConfirm(w http.ResponseWriter, r *http.Request) {
	if d, ok := h.getDeadLetter(w, r); ok {
		j := h.deadLetterJSON(d)
		h.render(w, r, "replay", fmt.Sprintf("Replay dead letter %d", d.ID), &j)
	}
}

// ReplayJSON is the answer of a replay request.
type ReplayJSON struct {
	ID     int64 `json:"id,omitempty"`
	Marked int64 `json:"marked"`
	// AlreadyMarked is true when the dead letter was marked before.
	AlreadyMarked bool `json:"already_marked,omitempty"`
}

func (h *Handler) replay(w http.ResponseWriter, r *http.Request) {
	if !h.allow(w, r, ActionDeadLetterReplay) {
		return
	}
	id, err := pathID(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	marked, err := h.store.MarkReplay(r.Context(), id)
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
	h.done(w, r, fmt.Sprintf("/deadletters/%d", id), res, url.Values{"done": {code}})
}

func (h *Handler) deleteDeadLetter(w http.ResponseWriter, r *http.Request) {
	if !h.allow(w, r, ActionDeadLetterDelete) {
		return
	}
	id, err := pathID(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if err := h.store.DeleteDeadLetter(r.Context(), id); err != nil {
		h.storeErr(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "inboxadmin: dead letter deleted", "id", id)
	h.done(w, r, "/deadletters", map[string]any{"id": id, "deleted": true}, url.Values{"done": {"deleted"}})
}

// BulkReplayJSON is the confirmation page of a bulk replay: Count dead
// letters match the filter and can be replayed. A POST must send it back
// as confirm.
type BulkReplayJSON struct {
	Filter dlFilter `json:"filter"`
	Count  int      `json:"count"`
	// Skipped counts the matching dead letters without a valid message
	// id: no replay can apply them.
	Skipped int `json:"skipped"`
	// Capped is true when more match than one bulk replay takes
	// (MaxLimit): replay again for the rest.
	Capped bool `json:"capped"`
}

// bulkMatch counts the dead letters a bulk replay with f marks.
func (h *Handler) bulkMatch(r *http.Request, f dlFilter) ([]*inboxtype.DeadLetter, BulkReplayJSON, error) {
	ds, more, err := h.match(r, f, MaxLimit)
	if err != nil {
		return nil, BulkReplayJSON{}, err
	}
	out := BulkReplayJSON{Filter: f, Capped: more}
	var ok []*inboxtype.DeadLetter
	for _, d := range ds {
		if d.MessageID == "" {
			out.Skipped++
			continue
		}
		ok = append(ok, d)
	}
	out.Count = len(ok)
	return ok, out, nil
}

func (h *Handler) bulkReplayConfirm(w http.ResponseWriter, r *http.Request) {
	f, err := readFilter(r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	_, out, err := h.bulkMatch(r, f)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	h.render(w, r, "bulkreplay", "Replay dead letters", &out)
}

func (h *Handler) bulkReplay(w http.ResponseWriter, r *http.Request) {
	if !h.allow(w, r, ActionDeadLetterReplay) {
		return
	}
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	f, err := readFilter(r.PostForm)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	ds, match, err := h.bulkMatch(r, f)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	typed := strings.TrimSpace(r.PostForm.Get("confirm"))
	if typed != strconv.Itoa(match.Count) {
		h.fail(w, r, http.StatusConflict, fmt.Errorf("confirmation %q does not match: %d dead letters match the filter now; type that number to replay them", typed, match.Count))
		return
	}
	var marked int64
	for _, d := range ds {
		ok, err := h.store.MarkReplay(r.Context(), d.ID)
		if errors.Is(err, inbox.ErrNotFound) {
			continue // replayed or deleted meanwhile
		}
		if err != nil {
			h.storeErr(w, r, fmt.Errorf("after marking %d for replay: %w", marked, err))
			return
		}
		if ok {
			marked++
		}
	}
	h.log.InfoContext(r.Context(), "inboxadmin: dead letters marked for replay", "consumer", f.Consumer, "reason", f.Reason, "q", f.Query, "marked", marked)
	fl := f.Values()
	fl.Set("done", "bulk-marked")
	fl.Set("n", strconv.FormatInt(marked, 10))
	h.done(w, r, "/deadletters", ReplayJSON{Marked: marked}, fl)
}

// EffectJSON is a ledger entry.
type EffectJSON struct {
	Consumer  string    `json:"consumer"`
	MessageID string    `json:"message_id"`
	Step      string    `json:"step"`
	State     string    `json:"state"`
	Attempts  int       `json:"attempts"`
	StartedAt time.Time `json:"started_at"`
}

// EffectsJSON is the stuck-effects page.
type EffectsJSON struct {
	Consumer    string       `json:"consumer,omitempty"`
	StuckAfterS float64      `json:"stuck_after_s"`
	Effects     []EffectJSON `json:"effects"`
	More        bool         `json:"more"`
}

func (h *Handler) effects(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	consumer := strings.TrimSpace(q.Get("consumer"))
	if consumer != "" {
		if err := inbox.ValidateConsumer(consumer); err != nil {
			h.fail(w, r, http.StatusBadRequest, err)
			return
		}
	}
	after := h.cfg.StuckAfter
	if s := q.Get("older"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("older %q: want a duration such as 5m or 2h", s))
			return
		}
		after = d
	}
	es, err := h.store.StuckEffects(r.Context(), consumer, h.cfg.Now().Add(-after), MaxLimit+1)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	out := EffectsJSON{Consumer: consumer, StuckAfterS: after.Seconds(), Effects: []EffectJSON{}}
	if len(es) > MaxLimit {
		es, out.More = es[:MaxLimit], true
	}
	for _, e := range es {
		out.Effects = append(out.Effects, effectJSON(e))
	}
	h.render(w, r, "effects", "Stuck effects", &out)
}

func effectJSON(e *inboxtype.EffectEntry) EffectJSON {
	return EffectJSON{Consumer: e.Consumer, MessageID: e.MessageID, Step: e.Step, State: string(e.State), Attempts: e.Attempts, StartedAt: e.StartedAt.UTC()}
}

// effectKey reads the consumer, message id and step of a form or query.
func effectKey(v url.Values) (inbox.ResolveEffectParams, error) {
	p := inbox.ResolveEffectParams{Consumer: v.Get("consumer"), MessageID: v.Get("message_id"), Step: v.Get("step")}
	if err := inbox.ValidateConsumer(p.Consumer); err != nil {
		return p, err
	}
	if p.MessageID == "" || p.Step == "" || len(p.MessageID) > 256 || len(p.Step) > inbox.MaxStepLen {
		return p, errors.New("want consumer, message_id and step")
	}
	return p, nil
}

func (h *Handler) resolveConfirm(w http.ResponseWriter, r *http.Request) {
	p, err := effectKey(r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	e := EffectJSON{Consumer: p.Consumer, MessageID: p.MessageID, Step: p.Step, State: string(inboxtype.EffectStarted)}
	h.render(w, r, "resolve", "Resolve an effect", &e)
}

func (h *Handler) resolve(w http.ResponseWriter, r *http.Request) {
	if !h.allow(w, r, ActionEffectResolve) {
		return
	}
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	p, err := effectKey(r.PostForm)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	p.State = inboxtype.EffectState(r.PostForm.Get("state"))
	if p.State != inboxtype.EffectDone && p.State != inboxtype.EffectFailed {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("state %q: want done (the call took effect) or failed (it did not)", p.State))
		return
	}
	if r.PostForm.Get("confirm") != p.Step {
		h.fail(w, r, http.StatusConflict, fmt.Errorf("confirmation does not match: type the step's name, %q, to resolve it", p.Step))
		return
	}
	if p.State == inboxtype.EffectDone {
		p.Result = []byte(r.PostForm.Get("result"))
	}
	if err := h.store.ResolveEffect(r.Context(), p); err != nil {
		h.storeErr(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "inboxadmin: effect resolved", "consumer", p.Consumer, "id", p.MessageID, "step", p.Step, "state", p.State)
	h.done(w, r, "/effects", map[string]any{"resolved": true, "state": p.State}, url.Values{"done": {"resolved"}})
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

func (h *Handler) outbox(w http.ResponseWriter, r *http.Request) {
	if !h.needOutbox(w, r) {
		return
	}
	q := r.URL.Query()
	state := q.Get("state")
	if !q.Has("state") {
		state = "pending"
	}
	switch state {
	case "", "pending", "parked", "published":
	default:
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("state %q: want pending, parked or published", state))
		return
	}
	limit := DefaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > MaxLimit {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("limit %q: want a number from 1 to %d", s, MaxLimit))
			return
		}
		limit = n
	}
	st, err := h.cfg.Outbox.OutboxStats(r.Context())
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	rows, err := h.cfg.Outbox.OutboxList(r.Context(), state, limit+1)
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	out := OutboxPageJSON{Stats: outboxJSON(st), State: state, Events: []OutboxEventJSON{}}
	if len(rows) > limit {
		rows, out.More = rows[:limit], true
	}
	for _, e := range rows {
		out.Events = append(out.Events, h.outboxEventJSON(e))
	}
	h.render(w, r, "outbox", "Outbox", &out)
}

func (h *Handler) outboxEvent(w http.ResponseWriter, r *http.Request) {
	if !h.needOutbox(w, r) {
		return
	}
	e, err := h.cfg.Outbox.OutboxGet(r.Context(), r.PathValue("id"))
	if err != nil {
		h.storeErr(w, r, err)
		return
	}
	j := h.outboxEventJSON(e)
	h.render(w, r, "outboxevent", "Outbox event", &j)
}

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
	h.done(w, r, "/outbox/"+url.PathEscape(id), map[string]any{"id": id, "action": action}, url.Values{"done": {action}})
}

// ago formats how long before now t was.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + inbox.FormatDuration((-d).Round(time.Second))
	}
	return inbox.FormatDuration(d.Round(time.Second)) + " ago"
}

// fmtSeconds formats seconds as a duration, with its sign.
func fmtSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	if d < 0 {
		return "−" + inbox.FormatDuration(-d)
	}
	return inbox.FormatDuration(d)
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

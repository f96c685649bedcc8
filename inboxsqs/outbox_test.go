package inboxsqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox"
	"github.com/txinbox/inbox/inboxpgx"
	"github.com/txinbox/inbox/inboxsqs"
	"github.com/txinbox/inbox/internal/fault"
	"github.com/txinbox/inbox/outbox"
)

type relayCrash struct{}

// TestOutboxSink relays events to a standard and a FIFO queue on goaws: a
// relay dies after SQS accepted its batch and before it deleted the rows,
// the next one sends the batch again with the same event ids, and the
// consumers, which read the id from the event-id attribute, apply each
// event once.
func TestOutboxSink(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		name := "standard"
		if fifo {
			name = "fifo"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			ctx := context.Background()
			q := h.createQueue("outbox", fifo)
			o, err := outbox.New(h.client.Driver().(*inboxpgx.Driver), &outbox.Config{Ordered: fifo})
			require.NoError(t, err)
			const n = 12
			var ids []string
			for i := range n {
				got, err := o.Enqueue(ctx, outbox.Message{Topic: q, Key: []byte([]string{"g1", "g2"}[i%2]),
					Payload: []byte(event{Group: []string{"g1", "g2"}[i%2], N: i/2 + 1}.Body())})
				require.NoError(t, err)
				ids = append(ids, got...)
			}
			sends := &sendLog{}
			sink, err := inboxsqs.NewOutboxSink(newSQSClient(h.endpoint, sends), nil)
			require.NoError(t, err)

			first, err := o.NewRelay(sink, &outbox.RelayConfig{BatchSize: 4})
			require.NoError(t, err)
			func() {
				defer func() {
					if r := recover(); r != (relayCrash{}) {
						t.Fatalf("the relay did not reach its fault point: %v", r)
					}
				}()
				_, _ = first.RelayOnce(fault.WithHook(ctx, func(p fault.Point) {
					if p == fault.RelayAfterPublish {
						panic(relayCrash{})
					}
				}))
			}()
			second, err := o.NewRelay(sink, &outbox.RelayConfig{Now: func() time.Time { return time.Now().Add(time.Hour) }})
			require.NoError(t, err)
			published := 0
			for range n {
				res, err := second.RelayOnce(ctx)
				require.NoError(t, err)
				require.Zero(t, res.Rejected+res.Unavailable)
				if res.Claimed == 0 {
					break
				}
				published += res.Published
			}
			require.Equal(t, n, published)

			cfg := h.config(q)
			cfg.Key = inbox.HeaderKey(outbox.HeaderEventID)
			var calls atomic.Int32
			h.start(cfg, h.fx.Handler(&calls), nil)
			for _, id := range ids {
				eventually(t, "event "+id+" applied", func() bool { return h.fx.Count(h.t, id) == 1 })
			}
			h.waitDrained(q)
			for _, id := range ids {
				require.Equal(t, 1, h.fx.Count(h.t, id), "event %s", id)
			}
			if fifo {
				// Each group's events went to SQS in their order: a send
				// of a group's next event only after SQS accepted the one
				// before, a republish only of events already sent. (The
				// order goaws hands them out in is goaws's: it returns no
				// group ids.)
				last := map[string]int{}
				for _, s := range sends.list() {
					seq, err := strconv.Atoi(s.seq)
					require.NoError(t, err)
					if seq > last[s.group] {
						require.Equal(t, last[s.group]+1, seq, "group %s sent out of order", s.group)
						last[s.group] = seq
					}
				}
				require.Equal(t, map[string]int{"g1": n / 2, "g2": n / 2}, last)
			}
		})
	}
}

// The sink tells a message SQS refuses from an SQS it cannot reach.
func TestOutboxSinkClassifiesErrors(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	sink, err := inboxsqs.NewOutboxSink(newSQSClient(h.endpoint, http.DefaultClient), nil)
	require.NoError(t, err)
	h2 := map[string]string{outbox.HeaderEventID: "x"}
	errs := sink.Publish(ctx, []outbox.Record{
		{ID: "x", Topic: h.endpoint + "/100010001000/no-such-queue", Payload: []byte("{}"), Headers: h2},
		{ID: "y", Topic: h.createQueue("outbox", false), Payload: nil, Headers: h2},
	})
	for i, err := range errs {
		require.Error(t, err)
		require.False(t, outbox.IsUnavailable(err), "record %d is rejected, not unavailable: %v", i, err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	down, err := inboxsqs.NewOutboxSink(newSQSClient("http://"+addr, http.DefaultClient), nil)
	require.NoError(t, err)
	errs = down.Publish(ctx, []outbox.Record{{ID: "z", Topic: "http://" + addr + "/1/q", Payload: []byte("{}"), Headers: h2}})
	require.Error(t, errs[0])
	require.True(t, outbox.IsUnavailable(errs[0]), "an unreachable SQS is unavailable: %v", errs[0])
}

// sendLog is an HTTP client that records, for each SendMessage that SQS
// accepted, its group and key sequence, in the order of the answers.
type sendLog struct {
	mu    sync.Mutex
	sends []sent
}

type sent struct{ group, seq string }

func (l *sendLog) Do(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".SendMessage") {
		return resp, err
	}
	var in struct {
		MessageGroupId    string
		MessageAttributes map[string]struct{ StringValue string }
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.sends = append(l.sends, sent{in.MessageGroupId, in.MessageAttributes[outbox.HeaderKeySeq].StringValue})
	l.mu.Unlock()
	return resp, nil
}

func (l *sendLog) list() []sent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sent(nil), l.sends...)
}

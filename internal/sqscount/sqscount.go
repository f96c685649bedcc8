// Package sqscount gives an in-process goaws the receive count that it does
// not keep. goaws (v0.5.4) answers ApproximateReceiveCount 1 for every
// receive, so no consumer can tell a redelivery from a first delivery; the
// adapters read it to count attempts and to suspect a message that crashed
// its consumer. Handler sits in front of goaws's router and sets each
// received message's ApproximateReceiveCount to how many times the server
// has handed that message out, as SQS does. It keeps a count per message
// for as long as it lives: it is for tests and the lab, not production.
package sqscount

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
)

// attribute is SQS's name of the receive count.
const attribute = "ApproximateReceiveCount"

// Handler counts the receives of next's messages, on the queues whose URL
// counted reports true (every queue when counted is nil).
func Handler(next http.Handler, counted func(queueURL string) bool) http.Handler {
	return &handler{next: next, counted: counted, counts: make(map[string]int)}
}

type handler struct {
	next    http.Handler
	counted func(string) bool
	mu      sync.Mutex
	counts  map[string]int // MessageId → receives
}

func (h *handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Header.Get("X-Amz-Target") != "AmazonSQS.ReceiveMessage" {
		h.next.ServeHTTP(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, "sqscount: read the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	var in struct{ QueueUrl string }
	_ = json.Unmarshal(body, &in) // goaws answers a malformed request itself
	if h.counted != nil && !h.counted(in.QueueUrl) {
		h.next.ServeHTTP(w, req)
		return
	}
	rec := httptest.NewRecorder()
	h.next.ServeHTTP(rec, req)
	out := rec.Body.Bytes()
	if rec.Code == http.StatusOK {
		out = h.count(out)
	}
	for k, v := range rec.Header() {
		if k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(out)
}

// count sets each received message's ApproximateReceiveCount in body, a
// ReceiveMessage answer, and returns it; an answer it cannot read is
// returned as it is.
func (h *handler) count(body []byte) []byte {
	var top map[string]json.RawMessage
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || json.Unmarshal(top["Messages"], &msgs) != nil {
		return body
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range msgs {
		var id string
		attrs := map[string]string{}
		_ = json.Unmarshal(m["MessageId"], &id)
		_ = json.Unmarshal(m["Attributes"], &attrs)
		h.counts[id]++
		attrs[attribute] = strconv.Itoa(h.counts[id])
		m["Attributes"], _ = json.Marshal(attrs)
	}
	top["Messages"], _ = json.Marshal(msgs)
	out, err := json.Marshal(top)
	if err != nil {
		return body
	}
	return out
}

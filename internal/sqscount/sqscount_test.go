package sqscount

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// answer is what a goaws ReceiveMessage answers: every message's receive
// count is 1.
const answer = `{"Messages":[{"MessageId":"a","Body":"x","Attributes":{"ApproximateReceiveCount":"1","SenderId":"s"}},{"MessageId":"b","Body":"y","Attributes":{"ApproximateReceiveCount":"1"}}]}`

// TestHandler: each receive of a message on a counted queue counts one
// more; other queues and other actions pass through unchanged.
func TestHandler(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.WriteString(w, answer)
	})
	srv := httptest.NewServer(Handler(next, func(u string) bool { return strings.HasSuffix(u, "/counted") }))
	defer srv.Close()
	call := func(target, queue string) string {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"QueueUrl":"`+queue+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Amz-Target", target)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(body)
	}
	counts := func(body string) map[string]string {
		var out struct {
			Messages []struct {
				MessageId  string
				Attributes map[string]string
			}
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("answer %s: %v", body, err)
		}
		m := map[string]string{}
		for _, msg := range out.Messages {
			m[msg.MessageId] = msg.Attributes[attribute]
			if msg.MessageId == "a" && msg.Attributes["SenderId"] != "s" {
				t.Errorf("the other attributes are kept, got %v", msg.Attributes)
			}
		}
		return m
	}
	for want := 1; want <= 3; want++ {
		got := counts(call("AmazonSQS.ReceiveMessage", "http://q/counted"))
		if got["a"] != strconv.Itoa(want) || got["b"] != strconv.Itoa(want) {
			t.Fatalf("receive %d: counts %v", want, got)
		}
	}
	if got := call("AmazonSQS.ReceiveMessage", "http://q/other"); got != answer {
		t.Errorf("a queue not counted passes through: got %s", got)
	}
	if got := call("AmazonSQS.SendMessage", "http://q/counted"); got != answer {
		t.Errorf("another action passes through: got %s", got)
	}
}

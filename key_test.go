package inbox

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHeaderKey(t *testing.T) {
	t.Parallel()
	k := HeaderKey("event-id")
	id, err := k(Message{Headers: map[string]string{"event-id": "abc"}})
	require.NoError(t, err)
	require.Equal(t, "abc", id)
	_, err = k(Message{Headers: map[string]string{"Event-Id": "abc"}})
	require.ErrorIs(t, err, ErrNoMessageID, "header names are exact")
	_, err = k(Message{Headers: map[string]string{"event-id": ""}})
	require.ErrorIs(t, err, ErrNoMessageID)
	_, err = k(Message{})
	require.ErrorIs(t, err, ErrNoMessageID)
}

func TestJSONKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, payload string
		want          string
		wantErr       error
	}{
		{path: "event_id", payload: `{"event_id":"e-1","amount":100}`, want: "e-1"},
		{path: "event_id", payload: `{"amount":{"cents":[1,2,{"x":"y"}]},"event_id":"e-2"}`, want: "e-2"},
		{path: "meta.event_id", payload: `{"meta":{"trace":"t","event_id":"e-3"}}`, want: "e-3"},
		{path: "meta.event_id", payload: `{"event_id":"wrong","meta":{"event_id":"e-4"}}`, want: "e-4"},
		{path: "event_id", payload: ` {"event_id" : "e-5"} `, want: "e-5"},
		{path: "event_id", payload: `{"event_id":"\u00e9"}`, want: "é"},
		{path: "event_id", payload: `{"amount":1}`, wantErr: ErrNoMessageID},
		{path: "event_id", payload: `{"event_id":null}`, wantErr: ErrNoMessageID},
		{path: "event_id", payload: `{"event_id":""}`, wantErr: ErrNoMessageID},
		{path: "event_id", payload: ``, wantErr: ErrNoMessageID},
		{path: "meta.event_id", payload: `{"meta":{}}`, wantErr: ErrNoMessageID},
		{path: "event_id", payload: `{"event_id":42}`, wantErr: ErrMalformedID},
		{path: "event_id", payload: `{"event_id":{"v":"x"}}`, wantErr: ErrMalformedID},
		{path: "event_id", payload: `["event_id"]`, wantErr: ErrMalformedID},
		{path: "event_id", payload: `not json`, wantErr: ErrMalformedID},
		{path: "event_id", payload: `{"amount":1,`, wantErr: ErrMalformedID},
		{path: "meta.event_id", payload: `{"meta":"flat"}`, wantErr: ErrMalformedID},
		// One whole document: nothing cut short, nothing after it.
		{path: "event_id", payload: `{"event_id":"e-1","amount":`, wantErr: ErrMalformedID},
		{path: "event_id", payload: `{"event_id":"e-1"`, wantErr: ErrMalformedID},
		{path: "event_id", payload: `{"event_id":"e-1"} trailing`, wantErr: ErrMalformedID},
		{path: "event_id", payload: `{"event_id":"e-1"}{"event_id":"e-2"}`, wantErr: ErrMalformedID},
		{path: "event_id", payload: `{"event_id":"e-1","x":[1,2}`, wantErr: ErrMalformedID},
		// A repeated name takes its last value, as in encoding/json.
		{path: "event_id", payload: `{"event_id":"first","event_id":"last"}`, want: "last"},
		{path: "event_id", payload: `{"event_id":"first","event_id":null}`, wantErr: ErrNoMessageID},
		{path: "meta.event_id", payload: `{"meta":{"event_id":"a"},"meta":{"event_id":"b"}}`, want: "b"},
		{path: "meta.event_id", payload: `{"meta":{"event_id":"a"},"meta":{"trace":"t"}}`, want: "a"},
		{path: "meta.event_id", payload: `{"meta":"flat","meta":{"event_id":"c"}}`, want: "c"},
		{path: "event_id", payload: `{"event\u005fid":"escaped-name"}`, want: "escaped-name"},
	} {
		got, err := JSONKey(tc.path)(Message{Payload: []byte(tc.payload)})
		if tc.wantErr != nil {
			require.ErrorIs(t, err, tc.wantErr, "%s in %s", tc.path, tc.payload)
			continue
		}
		require.NoError(t, err, "%s in %s", tc.path, tc.payload)
		require.Equal(t, tc.want, got)
	}
}

// TestJSONKeyLimits: JSONKey bounds its work, and a payload over a limit
// is malformed, with an error that names the limit.
func TestJSONKeyLimits(t *testing.T) {
	t.Parallel()
	key := JSONKey("event_id")
	deep := strings.Repeat("[", JSONKeyMaxDepth+1) + strings.Repeat("]", JSONKeyMaxDepth+1)
	_, err := key(Message{Payload: []byte(`{"event_id":"e-1","x":` + deep + `}`)})
	require.ErrorIs(t, err, ErrMalformedID)
	require.ErrorContains(t, err, "JSONKeyMaxDepth (128)")

	// At the limit, and with brackets inside strings, which do not nest.
	ok := strings.Repeat("[", JSONKeyMaxDepth-1) + strings.Repeat("]", JSONKeyMaxDepth-1)
	id, err := key(Message{Payload: []byte(`{"s":"[[[[{{{{\"[[","x":` + ok + `,"event_id":"e-2"}`)})
	require.NoError(t, err)
	require.Equal(t, "e-2", id)

	big := []byte(`{"event_id":"e-3","pad":"` + strings.Repeat("x", JSONKeyMaxBytes) + `"}`)
	_, err = key(Message{Payload: big})
	require.ErrorIs(t, err, ErrMalformedID)
	require.ErrorContains(t, err, "JSONKeyMaxBytes (4194304)")

	// A payload of 2 MB nested a million deep is refused: once the
	// nesting passes the limit, nothing more is read.
	_, err = key(Message{Payload: []byte(strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20))})
	require.ErrorIs(t, err, ErrMalformedID)
}

func FuzzJSONKey(f *testing.F) {
	f.Add([]byte(`{"event_id":"e-1"}`))
	f.Add([]byte(`{"meta":{"event_id":"e-2"}}`))
	f.Add([]byte(`{"a":[1,{"b":null}],"event_id":null}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		for _, path := range []string{"event_id", "meta.event_id"} {
			id, err := JSONKey(path)(Message{Payload: payload})
			switch {
			case err == nil && id == "":
				t.Fatalf("empty id without an error for %q", payload)
			case err != nil && !errors.Is(err, ErrNoMessageID) && !errors.Is(err, ErrMalformedID):
				t.Fatalf("unclassified error %v for %q", err, payload)
			case err == nil && !json.Valid(payload):
				t.Fatalf("id %q from %q, which is not one whole JSON document", id, payload)
			}
		}
		// On one level, JSONKey agrees with encoding/json: the id is the
		// field's last value, a non-empty string, or there is none.
		id, err := JSONKey("event_id")(Message{Payload: payload})
		var m map[string]json.RawMessage
		if len(payload) > JSONKeyMaxBytes || jsonDepth(payload, JSONKeyMaxDepth) > JSONKeyMaxDepth || json.Unmarshal(payload, &m) != nil {
			require.Error(t, err, "%q", payload)
			return
		}
		var want string
		if json.Unmarshal(m["event_id"], &want) != nil || want == "" {
			require.Error(t, err, "%q", payload)
			return
		}
		require.NoError(t, err, "%q", payload)
		require.Equal(t, want, id, "%q", payload)
	})
}

package inbox

import (
	"errors"
	"testing"
	"time"

	"github.com/txinbox/inbox/internal/require"
)

func parseTestDuration(s string) (time.Duration, error) { return time.ParseDuration(s) }

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
			}
		}
	})
}

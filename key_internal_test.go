package inbox

import (
	"errors"
	"testing"

	"github.com/txinbox/inbox/inboxdriver"
)

// tablesOnly is the part of the store that canonicalising an id reads.
type tablesOnly struct{ inboxdriver.Admin }

func (tablesOnly) Tables() inboxdriver.Tables { return inboxdriver.Tables{}.WithDefaults() }

// A message that Client.Key returned is not canonicalised again, unless its
// ID was changed since.
func TestKeyedIDIsCanonicalisedOnce(t *testing.T) {
	a := &Admin{driver: tablesOnly{}, config: (*Config)(nil).withDefaults()}
	c := &Client[struct{}]{admin: a, config: a.config}
	in := Message{ID: "{0190C8E4-7B3A-7CC1-9F00-2B7C4E1D9A55}"}
	keyed, err := c.Key(func(m Message) (string, error) { return m.ID, nil }, in)
	if err != nil {
		t.Fatal(err)
	}
	const canon = "0190c8e4-7b3a-7cc1-9f00-2b7c4e1d9a55"
	if keyed.ID != canon || keyed.keyed != canon || keyed.keyedBy != c.admin {
		t.Fatalf("Key returned ID %q (keyed %q), want %q", keyed.ID, keyed.keyed, canon)
	}
	// Trusted as it is: were it checked again, this id would fail.
	trusted := Message{ID: "not a uuid", keyed: "not a uuid", keyedBy: c.admin}
	if id, err := c.admin.messageID(trusted); err != nil || id != trusted.ID {
		t.Fatalf("a keyed message's id: got %q, %v; want it as it is", id, err)
	}
	// Keyed by another client, whose id format may differ: checked again.
	other := &Admin{driver: tablesOnly{}, config: c.config}
	if _, err := other.messageID(trusted); !errors.Is(err, ErrMalformedID) {
		t.Fatalf("an id another client keyed: got %v, want ErrMalformedID", err)
	}
	// Changed after Key: checked again.
	changed := keyed
	changed.ID = "not a uuid"
	if _, err := c.admin.messageID(changed); !errors.Is(err, ErrMalformedID) {
		t.Fatalf("an id changed after Key: got %v, want ErrMalformedID", err)
	}
	if id, err := c.admin.messageID(in); err != nil || id != canon {
		t.Fatalf("a message that was not keyed: got %q, %v; want %q", id, err, canon)
	}
	if _, err := c.admin.messageID(Message{}); !errors.Is(err, ErrNoMessageID) && !errors.Is(err, ErrMalformedID) {
		t.Fatalf("no id: got %v", err)
	}
}

package inboxdriver_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxdriver"
)

func TestSortOutboxRows(t *testing.T) {
	row := func(id, key string, seq int64) *inboxdriver.OutboxRow {
		return &inboxdriver.OutboxRow{ID: id, Key: []byte(key), KeySeq: seq}
	}
	rows := []*inboxdriver.OutboxRow{
		row("b2", "b", 2), row("u1", "", 0), row("a1", "a", 1), row("b1", "b", 1), row("u2", "x", 0), row("a2", "a", 2),
	}
	inboxdriver.SortOutboxRows(rows)
	var got []string
	for _, r := range rows {
		got = append(got, r.ID)
	}
	// Unordered first, as they came; then each key in the order of its
	// first row, in sequence order.
	require.Equal(t, []string{"u1", "u2", "b1", "b2", "a1", "a2"}, got)
}

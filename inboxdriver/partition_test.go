package inboxdriver_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/inboxdriver"
	"github.com/txinbox/inbox/inboxtype"
	"github.com/txinbox/inbox/internal/uuid"
)

func TestTimeBound(t *testing.T) {
	t.Parallel()
	day := time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)
	// 2025-01-02 is 1735776000000 ms, 0x0194244fd800.
	require.Equal(t, "0194244f-d800-0000-0000-000000000000", inboxdriver.TimeBound(day))
	got, ok := inboxdriver.IDTime(inboxdriver.TimeBound(day))
	require.True(t, ok)
	require.Equal(t, day, got)
	// A UUIDv7 of a time sorts, as text and as bytes, between the bounds
	// of that time's day.
	for _, at := range []time.Time{day, day.Add(time.Millisecond), day.Add(24*time.Hour - time.Millisecond)} {
		id := uuid.V7(at)
		require.True(t, inboxdriver.TimeBound(day) <= id && id < inboxdriver.TimeBound(day.Add(24*time.Hour)), "%s of %s", id, at)
		got, ok := inboxdriver.IDTime(id)
		require.True(t, ok)
		require.Equal(t, at, got)
	}
	for _, bad := range []string{"", "01942343", "0194234x-2000-0000-0000-000000000000", "01942343+2000-0000-0000-000000000000"} {
		_, ok := inboxdriver.IDTime(bad)
		require.False(t, ok, bad)
	}
}

func TestClassifyMiss(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	now := time.Date(2025, 6, 10, 12, 0, 0, 0, time.UTC)
	part := func(from time.Time) inboxtype.Partition {
		return inboxtype.Partition{From: from, To: from.Add(day)}
	}
	d0 := now.Truncate(day)
	st := &inboxtype.PartitionState{Now: now, Partitions: []inboxtype.Partition{
		part(d0.Add(-2 * day)), part(d0.Add(-day)), part(d0.Add(day)), part(d0.Add(2 * day)), // no partition today
	}}
	for _, tc := range []struct {
		at   time.Time
		want inboxdriver.PartitionMiss
	}{
		{d0.Add(-2*day - time.Millisecond), inboxdriver.MissExpired},
		{now, inboxdriver.MissNotMade},                 // a gap
		{now.Add(-time.Hour), inboxdriver.MissNotMade}, // the gap again
		{d0.Add(3 * day), inboxdriver.MissFuture},      // beyond the newest, beyond the skew
		{now.Add(100 * day), inboxdriver.MissFuture},   //
	} {
		require.Equal(t, tc.want, inboxdriver.ClassifyMiss(st, tc.at, day), "%s", tc.at)
	}
	require.False(t, st.Covers(now))
	require.True(t, st.Covers(d0.Add(-day)))
	// Beyond the newest but within the skew: not made yet (maintenance
	// is behind), which is retried.
	require.Equal(t, inboxdriver.MissNotMade, inboxdriver.ClassifyMiss(st, d0.Add(3*day), 4*day))
	// A partition being detached takes no rows and does not count.
	st.Partitions[0].DetachPending = true
	require.Equal(t, inboxdriver.MissExpired, inboxdriver.ClassifyMiss(st, d0.Add(-2*day), day))
	// No partitions at all: nothing has expired yet.
	empty := &inboxtype.PartitionState{Now: now}
	require.Equal(t, inboxdriver.MissNotMade, inboxdriver.ClassifyMiss(empty, now.Add(-90*day), day))
	require.Equal(t, inboxdriver.MissFuture, inboxdriver.ClassifyMiss(empty, now.Add(2*day), day))
}

func TestPartitionedLayoutValidation(t *testing.T) {
	t.Parallel()
	ok := inboxdriver.Tables{Layout: inboxdriver.LayoutPartitioned}
	require.NoError(t, ok.Validate(inboxdriver.DialectPostgres))
	require.ErrorContains(t, ok.Validate(inboxdriver.DialectMySQL), "Postgres only")
	require.ErrorContains(t, inboxdriver.Tables{Layout: "sharded"}.Validate(inboxdriver.DialectPostgres), `"sharded"`)
	text := ok
	text.IDType = inboxdriver.IDTypeText
	require.ErrorContains(t, text.Validate(inboxdriver.DialectPostgres), "IDType")
	long := ok
	long.Inbox = "inbox_of_a_very_long_name_that_leaves_no_room_for_the_day_x"
	require.ErrorContains(t, long.Validate(inboxdriver.DialectPostgres), "too long")
	require.NoError(t, inboxdriver.Tables{}.Validate(inboxdriver.DialectMySQL), "the plain layout stays the default")
	require.Equal(t, inboxdriver.LayoutPlain, inboxdriver.Tables{}.WithDefaults().Layout)
}

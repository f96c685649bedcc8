package inboxcli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSyncNeeded(t *testing.T) {
	t.Parallel()
	for names, want := range map[string]int{
		"": 0, "  ": 0, "s1": 1, `"s1", s2`: 1, "*": 1, "FIRST 2 (s1, s2, s3)": 2, "ANY 1 (s1, s2)": 1,
		"any 2 (s1,s2,s3)": 2, "3 (a, b, c)": 3, "first (s1)": 1,
	} {
		require.Equal(t, want, syncNeeded(names), names)
	}
}

package inboxnats

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTermWithReason covers the server versions that honour it.
func TestTermWithReason(t *testing.T) {
	t.Parallel()
	for version, want := range map[string]bool{
		"2.9.10":       false,
		"2.10.3":       false,
		"2.10.4":       true,
		"2.10.22":      true,
		"2.11.0-RC.1":  true,
		"2.15.3":       true,
		"3.0.0":        true,
		"":             false,
		"garbage":      false,
		"2.10":         false,
		"2.x.4":        false,
		"1.99.99":      false,
		"2.10.4-beta":  true,
		"-2.11.0":      false,
		"10.0.0+build": false,
	} {
		require.Equal(t, want, termWithReason(version), version)
	}
}

// Package duration formats durations with days, for the messages of the
// inbox packages and commands: "14d" reads better than "336h0m0s" in an
// error about retention.
package duration

import (
	"fmt"
	"time"
)

// Format formats d with days, as "14d" or "1d12h30m".
func Format(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	if d >= day {
		return fmt.Sprintf("%dd%s", d/day, trimZeroUnits((d % day).String()))
	}
	return trimZeroUnits(d.String())
}

func trimZeroUnits(s string) string {
	for _, suffix := range []string{"0s", "0m"} {
		if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix && (s[len(s)-len(suffix)-1] < '0' || s[len(s)-len(suffix)-1] > '9') {
			s = s[:len(s)-len(suffix)]
		}
	}
	return s
}

//go:build unix

package dbfault

import (
	"syscall"
	"time"
)

// ProcessCPU returns the CPU time this process has used, user and system,
// to report what a paused consumer costs while a fault lasts. ok is false
// where it cannot be read.
func ProcessCPU() (cpu time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

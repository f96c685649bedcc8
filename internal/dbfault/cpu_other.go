//go:build !unix

package dbfault

import "time"

// ProcessCPU returns the CPU time this process has used; here it cannot be
// read, and ok is false.
func ProcessCPU() (cpu time.Duration, ok bool) { return 0, false }

//go:build !unix

package bench

import "time"

// processCPU returns 0 where getrusage does not exist: the report's client
// CPU column then reads 0.
func processCPU() time.Duration { return 0 }

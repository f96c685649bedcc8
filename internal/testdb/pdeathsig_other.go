//go:build unix && !linux

package testdb

import "syscall"

// dieWithParent does nothing here: only Linux has a parent-death signal.
// A throwaway cluster of a test binary that was killed outlives it, and
// its directory stays in the temporary directory.
func dieWithParent(*syscall.SysProcAttr) {}

//go:build unix && !linux

package pgcluster

import "syscall"

// dieWithParent does nothing here: only Linux has a parent-death signal.
// The servers of a process that was killed outlive it, and their folder
// stays in the temporary directory.
func dieWithParent(*syscall.SysProcAttr) {}

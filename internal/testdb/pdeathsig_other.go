//go:build unix && !linux

package testdb

import "syscall"

// termWithParent does nothing here: only Linux has a parent-death signal.
func termWithParent(*syscall.SysProcAttr) {}

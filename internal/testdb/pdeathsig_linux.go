package testdb

import "syscall"

// dieWithParent makes the kernel send SIGINT to the process when the test
// binary dies, however it dies.
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGINT }

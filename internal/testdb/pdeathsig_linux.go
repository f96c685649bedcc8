package testdb

import "syscall"

// termWithParent makes the kernel send SIGTERM to the process when the
// test binary dies: PgBouncer's immediate shutdown (its SIGINT waits for
// the clients to leave).
func termWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGTERM }

package pgcluster

import "syscall"

// dieWithParent makes the kernel kill the server when this process dies,
// however it dies. (Go sets the parent-death signal after the change of
// user, which would otherwise clear it.)
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

package testdb

import (
	"os"
	"syscall"
)

// owner is the user a throwaway cluster runs as; on Windows, always the
// current one.
type owner struct{ uid, gid int }

func clusterOwner() (*owner, error) { return nil, nil }

func runAs(*owner, bool) *syscall.SysProcAttr { return nil }

// interrupt stops a server: Windows has no SIGINT to send to another
// process, so it is killed.
func interrupt(p *os.Process) { _ = p.Kill() }

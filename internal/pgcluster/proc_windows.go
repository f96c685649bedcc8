package pgcluster

import (
	"os"
	"syscall"
)

// owner is the user the servers run as; on Windows, always the current one.
type owner struct{ uid, gid int }

func clusterOwner() (*owner, error) { return nil, nil }

func (o *owner) chown(string) error { return nil }

func runAs(*owner, bool) *syscall.SysProcAttr { return nil }

// interrupt stops a server: Windows has no SIGINT to send to another
// process, so it is killed.
func interrupt(p *os.Process) { _ = p.Kill() }

func killGroup(p *os.Process) error { return p.Kill() }

//go:build unix

package testdb

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// owner is the user a throwaway cluster runs as.
type owner struct{ uid, gid int }

// clusterOwner returns the user to run a throwaway cluster as: Postgres
// refuses to run as root, so as root it is the postgres user; otherwise
// nil, the current user.
func clusterOwner() (*owner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and there is no postgres user to run the cluster as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &owner{uid: uid, gid: gid}, nil
}

// runAs returns the process attributes that run a command as o; for the
// server, in its own process group, and stopped with the test binary where
// the platform can.
func runAs(o *owner, server bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if o != nil {
		attr.Credential = &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.gid)}
	}
	if server {
		attr.Setpgid = true
		dieWithParent(attr)
	}
	return attr
}

// interrupt asks a server to stop: SIGINT is Postgres's fast shutdown.
func interrupt(p *os.Process) { _ = p.Signal(syscall.SIGINT) }

//go:build unix

package pgcluster

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// owner is the OS user the servers run as.
type owner struct{ uid, gid int }

// clusterOwner returns the user to run the servers as: Postgres refuses to
// run as root, so as root it is the postgres user; otherwise nil, the
// current user.
func clusterOwner() (*owner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root, and there is no postgres user to run the servers as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &owner{uid: uid, gid: gid}, nil
}

// chown gives path to o, if any.
func (o *owner) chown(path string) error {
	if o == nil {
		return nil
	}
	return os.Chown(path, o.uid, o.gid)
}

// runAs returns the process attributes that run a command as o; for a
// server, in a process group of its own (so that a kill takes its backends
// with it, as a crash of the host would), killed when this process dies
// where the platform can.
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

// killGroup sends SIGKILL to a server and every process of its group: its
// backends, its WAL sender and writer.
func killGroup(p *os.Process) error {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		return p.Kill()
	}
	return nil
}

// ServerProcess returns, for another server of a test's own (PgBouncer),
// what starts it as the servers' owner: the process attributes (a process
// group of its own, killed when this process dies where the platform can)
// and a chown that gives that owner the files it must read.
func ServerProcess() (*syscall.SysProcAttr, func(path string) error, error) {
	o, err := clusterOwner()
	if err != nil {
		return nil, nil, err
	}
	return runAs(o, true), o.chown, nil
}

// Package child starts the helper processes of the demo and of chaos runs
// so that they die with the process that started them.
package child

import "os/exec"

// DieWithParent arranges for cmd's process to be killed when this process
// dies, however it dies, where the platform can (Linux's parent-death
// signal). Elsewhere a helper outlives a coordinator that was killed; one
// that exits normally stops its helpers itself.
func DieWithParent(cmd *exec.Cmd) { dieWithParent(cmd) }

package node

import (
	"os/exec"
	"syscall"
)

// setChildAttrs makes a custom agent's host process die with the server:
// a server that is killed must not leave a run going that nothing
// follows (the restarted server runs the attempt again).
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

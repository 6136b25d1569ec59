package local

import (
	"os/exec"
	"syscall"
)

// dieWithParent ends the server when the process that started it dies,
// also when that is a test binary killed at its timeout: no etcd or API
// server is left behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

package node

import (
	"os/exec"
	"syscall"
	"unsafe"
)

// setChildAttrs makes a custom agent's host process die with the server:
// a server that is killed must not leave a run going that nothing
// follows (the restarted server runs the attempt again).
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// setHostCommandAttrs prepares a host command: it dies with the server,
// leads a process group of its own (which is killed as a whole when the
// command is cancelled), and runs as u with no supplementary groups (as
// the server's user when u is nil).
func setHostCommandAttrs(cmd *exec.Cmd, u *HostUser) error {
	setChildAttrs(cmd)
	if u != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
	}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return nil
}

// waitHostCommand waits for a started host command and returns cmd.Wait's
// error. When the command itself has exited, and before it is reaped (so
// that its process group's id cannot be taken by a new process), what it
// left running in its process group is killed: a host command does not
// outlive its attempt.
func waitHostCommand(cmd *exec.Cmd) error {
	pid := cmd.Process.Pid
	for {
		// waitid(P_PID, pid, WEXITED|WNOWAIT): block until the command
		// exits, leaving it a zombie for cmd.Wait to reap.
		var info [128]byte
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, 1 /* P_PID */, uintptr(pid), uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno == 0 {
			syscall.Kill(-pid, syscall.SIGKILL) // ESRCH: nothing was left
		}
		break
	}
	return cmd.Wait()
}

package qmp

import (
	"fmt"
	"syscall"
)

// PeerPID returns the process id of the QEMU at the other end of the
// connection, from the socket's peer credentials (SO_PEERCRED). It lets a
// monitor socket found on disk after a restart be matched to its process
// without trusting a pidfile.
func (m *Monitor) PeerPID() (int, error) {
	rc, err := m.conn.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("qmp peer pid: %w", err)
	}
	var cred *syscall.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("qmp peer pid: %w", err)
	}
	if credErr != nil {
		return 0, fmt.Errorf("qmp peer pid: %w", credErr)
	}
	return int(cred.Pid), nil
}

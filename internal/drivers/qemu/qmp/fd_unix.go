//go:build unix

package qmp

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// SendFD passes the descriptor of f to QEMU under name (getfd, with the
// descriptor attached to the command as SCM_RIGHTS ancillary data). QEMU
// keeps its own duplicate, so the caller still owns f and closes it as usual
// once SendFD returns. The name can then stand for the descriptor where QEMU
// takes one, e.g. Migrate(ctx, "fd:"+name) to save state into a file or pipe
// without a shell, or MigrateIncoming(ctx, "fd:"+name). A migration consumes
// (closes) its named descriptor; release an unused one with CloseFD. Sending
// a name again replaces the earlier descriptor.
func (m *Monitor) SendFD(ctx context.Context, name string, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("qmp getfd %s: %w", name, err)
	}
	var oob []byte
	if err := rc.Control(func(fd uintptr) { oob = syscall.UnixRights(int(fd)) }); err != nil {
		return fmt.Errorf("qmp getfd %s: %w", name, err)
	}
	err = m.execute(ctx, "getfd", map[string]string{"fdname": name}, nil, oob)
	runtime.KeepAlive(f) // the descriptor number in oob must stay valid until sent
	return err
}

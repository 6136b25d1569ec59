//go:build unix

package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile is the file a server holds locked in its data directory.
const LockFile = "serve.lock"

// ErrInUse: another process holds the data directory.
var ErrInUse = errors.New("the data directory is in use")

// Lock takes the data directory dir for this process, so that no second
// server (or `hvkube serve --stop-desktops`) works on the same VMs and
// database at once. It fails with ErrInUse, naming the holder's pid, when
// another process has it. The lock goes with the process: unlock, or its
// exit, lets it go.
func Lock(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b[:n]))); perr == nil {
				holder = fmt.Sprintf("process %d", pid)
			}
			return nil, fmt.Errorf("%w: %s holds %s (a server runs on it); stop it first", ErrInUse, holder, dir)
		}
		return nil, fmt.Errorf("lock the data directory: %w", err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

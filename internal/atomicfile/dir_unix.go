//go:build !windows

package atomicfile

import (
	"errors"
	"os"
	"syscall"
)

// syncDirectory makes the entries of dir (a rename into it) durable. A
// file system that cannot sync a directory (EINVAL, ENOTSUP: some network
// and FUSE ones) keeps what it keeps; that is not an error of the write.
func syncDirectory(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		return nil
	}
	return err
}

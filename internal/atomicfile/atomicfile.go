// Package atomicfile writes small files (a VM's or a template's metadata)
// so that they are whole or absent: a reader, and the file system after a
// crash or a power loss, sees the old content or the new one, never an
// empty or cut-short file.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// The steps that make a write durable, replaced by tests to see their order.
var (
	syncFile = (*os.File).Sync
	syncDir  = syncDirectory
)

// WriteFile replaces path with data, atomically and durably: data goes
// into a new file in the same directory, which is synced to disk, closed
// and renamed over path; then the directory is synced, so that the rename
// itself survives a crash (on Windows a directory cannot be synced: the
// rename is as durable as NTFS makes it). perm is the file's mode as given,
// not masked by the umask. An error before the rename leaves path as it
// was and no temporary file behind; an error syncing the directory comes
// after path has the new content. Concurrent writers to one path each
// write a whole file; the last rename wins.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := writeSynced(f, data, perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("write %s: sync its directory: %w", path, err)
	}
	return nil
}

// writeSynced writes data to f, sets its mode, syncs it and closes it.
func writeSynced(f *os.File, data []byte, perm os.FileMode) error {
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := syncFile(f); err != nil {
		return err
	}
	return f.Close()
}

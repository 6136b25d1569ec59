// Package testmount mounts small file systems for tests of disk trouble: a
// full disk, a read-only one. Mounting needs root (CAP_SYS_ADMIN); where it
// is not allowed the test is skipped with the reason.
package testmount

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Tmpfs mounts a tmpfs of size (such as "4m") on a new directory and
// unmounts it when the test ends.
func Tmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): %v %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// ReadOnly remounts the tmpfs at dir read-only.
func ReadOnly(t *testing.T, dir string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s read-only: %v %s", dir, err, out)
	}
}

// Fill writes a file in dir until the file system is full and returns its
// path; removing it gives the space back.
func Fill(t *testing.T, dir string) string {
	t.Helper()
	path := dir + "/filler"
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			return path
		}
	}
}

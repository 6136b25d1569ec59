//go:build linux

package qemu

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// TestPlainVM boots a plain QEMU of the image once, takes an internal
// snapshot, changes the guest, reverts in place and checks that the change
// is gone and the guest agent answers; then that bad snapshot names fail
// with what QEMU said, and that Close leaves nothing behind.
func TestPlainVM(t *testing.T) {
	requireQEMU(t)
	imageDir := requireImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := New(ctx, Config{Dir: t.TempDir(), ImageDir: imageDir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	v, err := b.NewPlainVM(api.QEMUImage{Image: "linux-desktop"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.SaveVM(ctx, "clean"); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("SaveVM before Start: %v", err)
	}
	if err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v.m.Name, plainNamePrefix) || v.m.MemFile != "" || v.m.Incoming || v.m.DiskFDs {
		t.Fatalf("plain machine %+v: want a -name starting %q, RAM in ordinary memory, a disk by path, no -incoming", v.m, plainNamePrefix)
	}
	if committed := reservedMB(b); committed != v.m.MemoryMB {
		t.Errorf("%d MB reserved while the plain VM runs; want its %d MB", committed, v.m.MemoryMB)
	}
	if err := v.SaveVM(ctx, "clean"); err != nil {
		t.Fatal(err)
	}

	const path = "/var/tmp/hvkube-plain-test"
	exists := func() bool {
		t.Helper()
		res, err := v.Exec(ctx, backend.ExecRequest{Path: "/usr/bin/test", Args: []string{"-e", path}})
		if err != nil {
			t.Fatal(err)
		}
		return res.ExitCode == 0
	}
	if err := v.WriteFile(ctx, path, []byte("written after the snapshot\n")); err != nil {
		t.Fatal(err)
	}
	if !exists() {
		t.Fatalf("%s is missing right after it was written", path)
	}
	if err := v.LoadVM(ctx, "clean"); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	err = v.Ping(pctx)
	pcancel()
	if err != nil {
		t.Fatalf("guest agent after loadvm: %v", err)
	}
	if exists() {
		t.Fatalf("%s is still there after loadvm", path)
	}

	// A name the human monitor would parse is refused before QEMU sees it;
	// a snapshot that does not exist fails with QEMU's words, and leaves
	// the VM stopped, which Ping reports instead of waiting.
	if err := v.LoadVM(ctx, "clean; quit"); err == nil || !strings.Contains(err.Error(), "snapshot name") {
		t.Fatalf("LoadVM of a bad name: %v", err)
	}
	if !v.p.alive() {
		t.Fatal("qemu exited after a refused snapshot name")
	}
	if err := v.LoadVM(ctx, "missing"); err == nil || !strings.Contains(err.Error(), "qemu says") || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("LoadVM of a missing snapshot: %v", err)
	}
	if err := v.Ping(ctx); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("Ping of a stopped VM: %v", err)
	}

	pid, run := v.p.pid, filepath.Dir(v.m.QMPSocket)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid, v.m.Name) {
		t.Errorf("qemu %d still runs after Close", pid)
	}
	for _, p := range []string{v.dir, run} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left after Close", p)
		}
	}
	if committed := reservedMB(b); committed != 0 {
		t.Errorf("%d MB still reserved after Close", committed)
	}
	if err := v.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// reservedMB is what the backend holds for VMs being made or run outside
// its sandboxes.
func reservedMB(b *Backend) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, mb := range b.building {
		n += mb
	}
	return n
}

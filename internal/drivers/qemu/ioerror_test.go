//go:build linux

package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/testmount"
)

// fullDiskBackend is a backend whose sandboxes' directories (overlay disks
// among them) live on a small tmpfs of their own, and a sandbox id running
// on it; spares are off, as a spare's files could not move onto the tmpfs.
func fullDiskBackend(t *testing.T, id string) (*Backend, string) {
	t.Helper()
	images := requireImage(t)
	disk := testmount.Tmpfs(t, "64m")
	dir := t.TempDir()
	if err := os.Symlink(disk, filepath.Join(dir, "sandboxes")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := New(ctx, Config{Dir: dir, ImageDir: images, NoSpares: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tpl, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: "full-test", Image: api.QEMUImage{Image: "linux-desktop"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, backend.SandboxSpec{ID: id, TemplateID: tpl.ID}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Delete(context.Background(), id) })
	if err := b.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The first guest call waits for the clone's identity to be written,
	// which must be done before the disk fills.
	if _, err := b.Exec(ctx, id, backend.ExecRequest{Path: "sync"}); err != nil {
		t.Fatal(err)
	}
	return b, disk
}

// execResult is what a guest program run with Exec came back with.
type execResult struct {
	res backend.ExecResult
	err error
}

// stopOnFullDisk fills the tmpfs at disk and has the guest of sandbox id
// write 8 MiB to its disk, then waits until QEMU has stopped it. It
// returns the file that fills the tmpfs, and what the program that writes
// comes back with (the size of the file it wrote) when it ends.
func stopOnFullDisk(t *testing.T, b backend.Backend, id, disk string) (string, <-chan execResult) {
	t.Helper()
	ctx := context.Background()
	filler := testmount.Fill(t, disk)
	// O_DIRECT: the write goes to the disk at once, not to the guest's
	// page cache. Exec waits for it, asking the guest agent over and
	// over, as an agent's workflow step does.
	done := make(chan execResult, 1)
	go func() {
		res, err := b.(backend.Guest).Exec(ctx, id, backend.ExecRequest{Path: "sh", Args: []string{"-c", "dd if=/dev/urandom of=/var/tmp/fill bs=1M count=8 oflag=direct 2>/dev/null; stat -c %s /var/tmp/fill"}})
		done <- execResult{res, err}
	}()
	waitState(t, b, id, backend.StateIOError)
	return filler, done
}

// waitState waits up to a minute for sandbox id to be in state.
func waitState(t *testing.T, b backend.Backend, id string, state string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := b.Inspect(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if info.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is still %s after a minute, want %s", id, info.State, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leaveRoom shrinks filler by n bytes, so that the file system it fills
// has about n bytes free.
func leaveRoom(t *testing.T, filler string, n int64) {
	t.Helper()
	fi, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, max(fi.Size()-n, 0)); err != nil {
		t.Fatal(err)
	}
}

// TestIOErrorOnFullDisk runs a real guest on a disk that fills up: QEMU
// stops it (io-error), which Inspect reports; Resume fails at once and
// says why while there is no room, whether it looks first (a disk with
// nothing free, paused on purpose since or not) or hears the guest stop
// again (a disk with less room than the guest writes); once room is back
// Resume runs the guest, which carries on.
func TestIOErrorOnFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test mounts a small tmpfs for the sandbox's disk: run it as root")
	}
	ctx := context.Background()
	b, disk := fullDiskBackend(t, "full")
	if info, _ := b.Inspect(ctx, "full"); !strings.HasPrefix(qemuName(t, info.PID), sandboxNamePrefix+"full:") {
		t.Errorf("a QEMU started for sandbox full is named %q", qemuName(t, info.PID))
	}
	filler, wrote := stopOnFullDisk(t, b, "full", disk)

	err := b.Resume(ctx, "full")
	if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "KiB free") {
		t.Fatalf("resume with the disk full: %v, want ErrUnavailable saying how little room there is", err)
	}
	if strings.Contains(err.Error(), disk) {
		t.Errorf("the error names the host's directory: %v", err)
	}
	if info, _ := b.Inspect(ctx, "full"); info.State != backend.StateIOError {
		t.Fatalf("after a refused resume: %s, want %s", info.State, backend.StateIOError)
	}

	// Paused on purpose, it is Paused; resumed while the disk is still
	// full, it is refused before it runs, as it was before the pause.
	if err := b.Pause(ctx, "full"); err != nil {
		t.Fatal(err)
	}
	if info, _ := b.Inspect(ctx, "full"); info.State != backend.StatePaused {
		t.Fatalf("paused: %s, want %s", info.State, backend.StatePaused)
	}
	if err := b.Resume(ctx, "full"); !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "KiB free") {
		t.Fatalf("resume of a paused guest with the disk full: %v, want ErrUnavailable saying how little room there is", err)
	}
	// With some room but less than the guest goes on to write, it runs,
	// writes and stops again: Resume hears it if the stop comes before
	// the guest agent answers, Inspect in any case.
	leaveRoom(t, filler, 2<<20)
	err = b.Resume(ctx, "full")
	if err != nil && (!errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "stopped again") || !strings.Contains(err.Error(), "No space left")) {
		t.Fatalf("resume with too little room: %v, want it to run or ErrUnavailable saying it stopped again for want of space", err)
	}
	waitState(t, b, "full", backend.StateIOError)
	if err := b.Resume(ctx, "full"); !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "KiB free") {
		t.Fatalf("resume once it filled the room again: %v, want ErrUnavailable saying how little room there is", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := b.Resume(ctx, "full"); err != nil {
		t.Fatalf("resume once there is room: %v", err)
	}
	if info, _ := b.Inspect(ctx, "full"); info.State != backend.StateRunning {
		t.Fatalf("after the resume: %s, want %s", info.State, backend.StateRunning)
	}
	// The write that stopped it went through, and the guest call that
	// waited for it through the stops and resumes comes back with it.
	select {
	case r := <-wrote:
		if r.err != nil || strings.TrimSpace(string(r.res.Stdout)) != "8388608" {
			t.Fatalf("the guest program that wrote: %q %q %v, want the whole 8 MiB written", r.res.Stdout, r.res.Stderr, r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the guest call that waited for the write did not come back after the resume")
	}
}

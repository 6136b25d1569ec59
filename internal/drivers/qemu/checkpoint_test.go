//go:build linux

package qemu

import (
	"context"
	"errors"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
	"github.com/hvkube/hvkube/internal/testbench"
)

// TestCheckpointOnQEMU takes a checkpoint of a running desktop, writes
// more after it, kills its QEMU, and restores the checkpoint: the desktop
// has what it had at the checkpoint, on disk and in memory (tmpfs), and
// nothing written after. A reset drops the checkpoint.
func TestCheckpointOnQEMU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// NoWarm: a clone readied ahead in the background has run, and the
	// refusals below are of one that never has.
	b, tpl := deskBackend(t, ctx, Config{NoSpares: true, NoWarm: true}, "checkpoint-base")
	var _ backend.Checkpointer = b
	if _, err := b.Create(ctx, backend.SandboxSpec{ID: "long", TemplateID: tpl.ID}); err != nil {
		t.Fatal(err)
	}
	defer b.Delete(context.Background(), "long")
	if _, err := b.Checkpoint(ctx, "long"); !errors.Is(err, api.ErrConflict) {
		t.Errorf("checkpoint of a clone that never ran: %v, want a conflict", err)
	}
	if err := b.RestoreCheckpoint(ctx, "long"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("restore without a checkpoint: %v, want not found", err)
	}
	if err := b.Resume(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	run := func(script string) string {
		t.Helper()
		return shOK(t, ctx, b, "long", script)
	}
	run("echo before > /root/disk-marker && echo before > /dev/shm/mem-marker && sync")
	stopped, err := b.Checkpoint(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint of a 512 MB desktop: the guest stood stopped %s", stopped.Round(time.Millisecond))
	if info, _ := b.Inspect(ctx, "long"); info.State != backend.StateRunning {
		t.Errorf("after the checkpoint the sandbox is %s, want it running on", info.State)
	}
	run("echo after > /root/disk-marker && echo after > /dev/shm/mem-marker && touch /root/later && sync")

	// The host loses the QEMU (kill -9), as it would in a crash.
	info, err := b.Inspect(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := b.RestoreCheckpoint(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	if err := b.Resume(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	t.Logf("restored and resumed in %s", time.Since(began).Round(time.Millisecond))
	if got := run("cat /root/disk-marker /dev/shm/mem-marker; ls /root/later 2>/dev/null || echo no-later"); got != "before\nbefore\nno-later" {
		t.Errorf("after the restore the desktop has %q, want what it had at the checkpoint", got)
	}

	if err := b.Reset(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	if err := b.RestoreCheckpoint(ctx, "long"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("restore after a reset: %v, want not found (a reset drops the checkpoint)", err)
	}
}

// BenchmarkCheckpointOnQEMU takes b.N checkpoints of one running linux
// desktop (512 MB) and reports how long its guest stood stopped for each,
// p50 and p95, and how long each checkpoint took in all:
//
//	go test -run - -bench CheckpointOnQEMU -benchtime 20x ./internal/drivers/qemu/
func BenchmarkCheckpointOnQEMU(b *testing.B) {
	ctx := context.Background()
	be, tpl := deskBackend(b, ctx, Config{NoSpares: true}, "checkpoint-bench")
	if _, err := be.Create(ctx, backend.SandboxSpec{ID: "bench", TemplateID: tpl.ID}); err != nil {
		b.Fatal(err)
	}
	defer be.Delete(context.Background(), "bench")
	if err := be.Resume(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the clock set after the resume
	var stopped, total []time.Duration
	b.ResetTimer()
	for b.Loop() {
		began := time.Now()
		d, err := be.Checkpoint(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		total = append(total, time.Since(began))
		stopped = append(stopped, d)
	}
	b.StopTimer()
	testbench.Percentiles(b, "stopped", stopped)
	testbench.Percentiles(b, "checkpoint", total)
	b.ReportMetric(0, "ns/op")
}

// TestCheckpointOfSpareOnQEMU: a desktop taken from a spare (whose QEMU
// was given its disk as open files, so that the spare's files could move)
// runs on after a checkpoint and after a capture, as one cloned by path
// does: each stops it for a migration and runs it again.
func TestCheckpointOfSpareOnQEMU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	b, tpl := deskBackend(t, ctx, Config{NoWarm: true}, "checkpoint-spare")
	sp := waitSpareOf(t, b, tpl.ID)
	info, err := b.Create(ctx, backend.SandboxSpec{ID: "from-spare", TemplateID: tpl.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Delete(context.Background(), "from-spare")
	if info.PID != sp.p.pid {
		t.Fatalf("the sandbox runs QEMU %d, not the spare's %d", info.PID, sp.p.pid)
	}
	if err := b.Resume(ctx, "from-spare"); err != nil {
		t.Fatal(err)
	}
	shOK(t, ctx, b, "from-spare", "true") // once its identity is written
	for i := range 2 {
		if _, err := b.Checkpoint(ctx, "from-spare"); err != nil {
			t.Fatalf("checkpoint %d: %v", i+1, err)
		}
		if info, _ := b.Inspect(ctx, "from-spare"); info.State != backend.StateRunning {
			t.Fatalf("after checkpoint %d the sandbox is %s, want it running on", i+1, info.State)
		}
		shOK(t, ctx, b, "from-spare", "echo "+strconv.Itoa(i)+" > /root/after-checkpoint && sync")
	}
	if _, err := b.CaptureTemplate(ctx, "from-spare", "captured-from-spare", nil); err != nil {
		t.Fatalf("capture: %v", err)
	}
	defer b.DeleteTemplate(context.Background(), "captured-from-spare")
	if info, _ := b.Inspect(ctx, "from-spare"); info.State != backend.StateRunning {
		t.Fatalf("after the capture the sandbox is %s, want it running on", info.State)
	}
	if got := shOK(t, ctx, b, "from-spare", "cat /root/after-checkpoint && echo in-memory > /dev/shm/mem-marker && sync"); got != "1" {
		t.Errorf("the desktop reads %q after the capture, want 1", got)
	}

	// A VM that will not run again after the checkpoint's migration is
	// started again from the checkpoint, which holds it as it stopped.
	t.Run("ContFails", func(t *testing.T) {
		before, _ := b.Inspect(ctx, "from-spare")
		cont := contAfterMigration
		t.Cleanup(func() { contAfterMigration = cont })
		contAfterMigration = func(context.Context, *qmp.Monitor) error {
			return errors.New(`GenericError: Failed to get "write" lock`)
		}
		if _, err := b.Checkpoint(ctx, "from-spare"); err != nil {
			t.Fatal(err)
		}
		contAfterMigration = cont
		after, _ := b.Inspect(ctx, "from-spare")
		if after.State != backend.StateRunning || after.PID == before.PID {
			t.Fatalf("after a checkpoint whose cont failed: %s, QEMU %d (before: %d); want it running in a new QEMU", after.State, after.PID, before.PID)
		}
		if got := shOK(t, ctx, b, "from-spare", "cat /root/after-checkpoint /dev/shm/mem-marker"); got != "1\nin-memory" {
			t.Errorf("the desktop reads %q, want what it had when it stopped", got)
		}
	})
}

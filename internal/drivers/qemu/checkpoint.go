package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
)

// A checkpoint is a sandbox saved as it is, while it goes on: its memory
// is written to checkpoint.state by a live migration (the guest runs on
// meanwhile and stands stopped only for the last pages), its disk overlay
// is copied to checkpoint.qcow2 (both in its directory) while it stands
// stopped, then it runs again. RestoreCheckpoint ends its QEMU if one runs, puts the copied
// overlay back and loads the memory into a new QEMU, paused: the guest is
// where it was at the checkpoint, its disk with it. The overlay's backing
// chain (the template's disk, the image) does not change while the
// sandbox exists, so the overlay alone is the disk's state.

// Checkpoint implements backend.Checkpointer.
func (b *Backend) Checkpoint(ctx context.Context, id string) (time.Duration, error) {
	v, err := b.lockVM(id, false)
	if err != nil {
		return 0, err
	}
	defer v.mu.Unlock()
	if err := v.needProcess(); err != nil {
		return 0, err
	}
	if v.meta.Pending != "" {
		// Its first resume writes what it lacks; a checkpoint taken
		// before would bring back a guest without it.
		return 0, fmt.Errorf("sandbox %s has not run since it was cloned: resume it first: %w", id, api.ErrConflict)
	}
	st, err := v.p.mon.Status(ctx)
	if err != nil {
		return 0, err
	}
	wasRunning := st.Status == qmp.StateRunning
	state, disk := v.checkpointFiles()
	// The guest's agent is left idle for the copy: a request caught half
	// way would be half way again in the restored guest, and its agent
	// would not answer the next.
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	hold, err := v.g.ga.Hold(hctx)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("checkpoint %s: the guest agent is busy: %w", id, err)
	}
	release := sync.OnceFunc(hold)
	defer release()
	// A running guest goes on while its memory is written (a live
	// migration into the file): it stops only for the last pages, and
	// for the disk's copy. One that does not let the migration end by
	// then is stopped for the rest.
	mon := v.p.mon
	force := time.AfterFunc(liveCheckpointFor, func() { mon.Stop(context.WithoutCancel(ctx)) })
	info, err := migrateToFileInfo(ctx, mon, state+".tmp", migrationCaps)
	force.Stop()
	ended := time.Now()
	if err == nil {
		// Stopped, and its disk flushed and let go of by the migration.
		err = copyFile(ctx, filepath.Join(v.dir, "disk.qcow2"), disk+".tmp")
	}
	// Running again takes its disk back, whatever the copy did; one that
	// was paused is paused again at once.
	cerr := contAfterMigration(ctx, v.p.mon)
	if cerr == nil && !wasRunning {
		cerr = v.p.mon.Stop(ctx)
	}
	if cerr != nil || !wasRunning {
		v.pausedAt, v.paused = time.Now(), true
	}
	stopped := time.Duration(info.Downtime)*time.Millisecond + time.Since(ended)
	if err == nil {
		err = os.Rename(disk+".tmp", disk)
	}
	if err == nil {
		err = os.Rename(state+".tmp", state)
	}
	if err != nil {
		os.Remove(state + ".tmp")
		os.Remove(disk + ".tmp")
		if cerr != nil {
			err = fmt.Errorf("%w; and it stands stopped: %w", err, cerr)
		}
		return stopped, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	now := time.Now().UTC()
	v.meta.CheckpointAt = &now
	if err := v.save(); err != nil {
		return stopped, err
	}
	if cerr != nil {
		// The checkpoint holds the guest as it stopped, and it has not
		// run since: a new QEMU of it goes on with nothing lost.
		b.log.Warn("the sandbox would not run again after its checkpoint: restarting it from the checkpoint", "sandbox", id, "err", cerr)
		release()
		if err := b.restoreCheckpointLocked(ctx, v); err != nil {
			return time.Since(ended), fmt.Errorf("checkpoint %s: it would not run again (%w), nor start again from the checkpoint: %w", id, cerr, err)
		}
		// Its clock stood still from the migration's end.
		v.pausedAt, v.paused = ended, true
		if wasRunning {
			if err := b.resumeLocked(ctx, v); err != nil {
				return time.Since(ended), fmt.Errorf("checkpoint %s: started again from the checkpoint, but: %w", id, err)
			}
		}
		stopped = time.Duration(info.Downtime)*time.Millisecond + time.Since(ended)
	}
	return stopped, nil
}

// contAfterMigration runs a VM again after a migration stopped it. A
// variable for tests.
var contAfterMigration = func(ctx context.Context, mon *qmp.Monitor) error { return mon.Cont(ctx) }

// RestoreCheckpoint implements backend.Checkpointer.
func (b *Backend) RestoreCheckpoint(ctx context.Context, id string) error {
	v, err := b.lockVM(id, false)
	if err != nil {
		return err
	}
	defer v.mu.Unlock()
	return b.restoreCheckpointLocked(ctx, v)
}

// restoreCheckpointLocked is RestoreCheckpoint; callers hold v.mu.
func (b *Backend) restoreCheckpointLocked(ctx context.Context, v *vm) error {
	id := v.meta.ID
	state, disk := v.checkpointFiles()
	if v.meta.CheckpointAt == nil {
		return fmt.Errorf("sandbox %s has no checkpoint: %w", id, api.ErrNotFound)
	}
	how := admitExisting
	if old := v.p; old != nil {
		how = admitReplace
		v.detach()
		old.mon.Close()
		if err := old.kill(); err != nil {
			return err
		}
		old.link.close()
	}
	if err := b.reserve(id, b.restoreMB(v), "", how); err != nil {
		return err
	}
	defer b.release(id)
	if err := copyFile(ctx, disk, filepath.Join(v.dir, "disk.qcow2")); err != nil {
		return fmt.Errorf("restore the checkpoint of %s: %w", id, err)
	}
	os.Remove(filepath.Join(v.dir, "saved.state"))
	if err := b.loadState(ctx, v, state); err != nil {
		return fmt.Errorf("restore the checkpoint of %s: %w", id, err)
	}
	v.meta.Saved, v.meta.Stopped = false, false
	return v.save()
}

// liveCheckpointFor is how long a checkpoint lets the guest run while its
// memory is written; past it the guest is stopped for the rest.
const liveCheckpointFor = 10 * time.Second

// checkpointFiles are where v's checkpoint is kept.
func (v *vm) checkpointFiles() (state, disk string) {
	return filepath.Join(v.dir, "checkpoint.state"), filepath.Join(v.dir, "checkpoint.qcow2")
}

// dropCheckpoint removes v's checkpoint (a reset's clean state has none).
func (v *vm) dropCheckpoint() {
	state, disk := v.checkpointFiles()
	os.Remove(state)
	os.Remove(disk)
	v.meta.CheckpointAt = nil
}

// copyFile copies src to dst (replaced), sharing blocks where the file
// system can and keeping holes.
func copyFile(ctx context.Context, src, dst string) error {
	cmd := exec.CommandContext(ctx, "cp", "--reflink=auto", "--sparse=always", "--", src, dst)
	cmd.Env = childEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %w: %s", filepath.Base(src), err, strings.TrimSpace(string(out)))
	}
	return nil
}

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
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
)

// fullStateCaps are the capabilities of a migration whose stream holds
// all of the VM's RAM, shared or not: x-ignore-shared off.
var fullStateCaps = map[string]bool{"x-ignore-shared": false, "events": true}

// CaptureTemplate implements backend.Capturer: template id becomes what
// sandbox sandboxID is now, its memory and its disk, laid out as a built
// template (disk.qcow2, state, ram), so that clones of it share its
// memory file as they share a booted template's.
//
// The sandbox's memory goes by a migration over a local socket into a
// QEMU of the new template's own, which holds it in a memory file and
// writes the device state that clones load. The sandbox stands stopped
// for the migration and the copy of its disk's overlay (under a second
// for a desktop), then runs again, or stays paused if it was. Its disk
// (an overlay of its template's, itself one of the image's) is then
// flattened into one overlay of the image, so the new template needs
// nothing of the old (which may be deleted after).
func (b *Backend) CaptureTemplate(ctx context.Context, sandboxID, id string, progress backend.Progress) (backend.TemplateInfo, error) {
	if progress == nil {
		progress = func(string) {}
	}
	if err := checkID(id); err != nil {
		return backend.TemplateInfo{}, err
	}
	l := b.tplLock(id)
	l.Lock()
	defer l.Unlock()
	if _, err := b.loadTemplate(id); err == nil {
		return backend.TemplateInfo{}, fmt.Errorf("template snapshot %s exists already: %w", id, api.ErrConflict)
	}
	final := b.tplDir(id)
	tmp := final + ".building"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return backend.TemplateInfo{}, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	c, err := b.captureSandbox(ctx, sandboxID, id, tmp, progress)
	if err != nil {
		return backend.TemplateInfo{}, err
	}
	defer b.release(id)
	defer c.end()
	// The flattening of the disk and the save of the new template's
	// memory and device state go on side by side.
	progress("writing the template's memory and disk")
	var wg sync.WaitGroup
	var ferr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		ferr = b.flatten(ctx, c.overlay, c.meta.Image.Disk, filepath.Join(tmp, "disk.qcow2"))
	}()
	err = saveTemplateState(ctx, c.dest, c.memFile, tmp)
	wg.Wait()
	if err == nil {
		err = ferr
	}
	if err == nil {
		c.end()
		err = finishTemplate(tmp, final, &c.meta)
	}
	if err != nil {
		return backend.TemplateInfo{}, fmt.Errorf("capture %s: %w", id, err)
	}
	ok = true
	progress("template snapshot saved")
	b.log.Info("template captured", "template", id, "sandbox", sandboxID, "stopped", c.stopped.Round(time.Millisecond))
	info := c.meta.info()
	info.Stopped = c.stopped
	return info, nil
}

// capture is a capture under way: the new template's QEMU, paused with
// the sandbox's memory and devices, and a copy of the sandbox's overlay.
type capture struct {
	meta tplMeta
	// dest is the new template's QEMU; its RAM is the shared file memFile.
	dest    *proc
	memFile string
	// overlay is the copy of the sandbox's disk overlay, and incoming the
	// disk dest was started with (it never runs: any disk of the same
	// size does).
	overlay, incoming string
	// socket is where dest listens for the migration, in its socket
	// directory.
	socket string
	// stopped is how long the sandbox stood stopped.
	stopped time.Duration
}

// end ends dest and removes the files it needed; it may be called again.
func (c *capture) end() {
	if c.dest != nil {
		c.dest.kill()
		c.dest = nil
	}
	for _, f := range []string{c.memFile, c.overlay, c.incoming} {
		os.Remove(f)
	}
	if c.socket != "" {
		os.RemoveAll(filepath.Dir(c.socket))
	}
}

// captureSandbox moves the state of sandbox sandboxID into a new QEMU of
// template id (made in dir, its memory reserved), copies the sandbox's
// overlay, and runs the sandbox again as it was.
func (b *Backend) captureSandbox(ctx context.Context, sandboxID, id, dir string, progress backend.Progress) (c capture, err error) {
	v, err := b.lockVM(sandboxID, false)
	if err != nil {
		return c, err
	}
	defer v.mu.Unlock()
	if err := v.needProcess(); err != nil {
		return c, err
	}
	if v.meta.ColdBoot {
		return c, fmt.Errorf("sandbox %s was booted from its image, not cloned (its template's snapshot could not be loaded): reset it, then take the snapshot: %w", sandboxID, api.ErrConflict)
	}
	c.meta = v.tpl
	c.meta.ID, c.meta.BootSeconds = id, 0
	if v.meta.MemoryMB > 0 {
		c.meta.MemoryMB = v.meta.MemoryMB
	}
	if v.meta.Resolution != "" {
		c.meta.Resolution = v.meta.Resolution
	}
	st, err := v.p.mon.Status(ctx)
	if err != nil {
		return c, err
	}
	wasRunning := st.Status == qmp.StateRunning
	if err := b.reserve(id, c.meta.MemoryMB, "", admitNew); err != nil {
		return c, err
	}
	defer func() {
		if err != nil {
			c.end()
			b.release(id)
		}
	}()

	progress("starting the template's own QEMU")
	run := b.runDirFor(dir)
	c.incoming, c.overlay = filepath.Join(dir, "incoming.qcow2"), filepath.Join(dir, "source.qcow2")
	c.memFile = filepath.Join(b.cfg.ShmDir, "template-"+id+".ram")
	c.socket = filepath.Join(run, "migrate.sock")
	if err := b.overlay(ctx, c.meta.Image.Disk, c.incoming); err != nil {
		return c, err
	}
	m := b.machineFor(c.meta, "hvkube-template:"+id, dir, run, c.incoming)
	m.MemFile, m.MemShared = c.memFile, true
	m.Incoming = true
	if c.dest, err = b.launch(ctx, m, dir); err != nil {
		return c, err
	}
	if err := c.dest.mon.MigrateSetCapabilities(ctx, fullStateCaps); err != nil {
		return c, err
	}
	if err := c.dest.mon.MigrateIncoming(ctx, "unix:"+c.socket); err != nil {
		return c, err
	}

	// The guest's agent is left idle for the copy: a request caught half
	// way would be half way again in every clone.
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	release, err := v.g.ga.Hold(hctx)
	cancel()
	if err != nil {
		return c, fmt.Errorf("capture sandbox %s: the guest agent is busy: %w", sandboxID, err)
	}
	defer release()
	// The sandbox stands stopped for the migration: a live one (the guest
	// running on while its memory is sent, as a checkpoint's) gave
	// templates whose clones' QEMU 7.2 crashed loading them, about one in
	// twenty under TCG.
	progress(fmt.Sprintf("stopping sandbox %s to copy its memory and disk", sandboxID))
	start := time.Now()
	if err := v.p.mon.Stop(ctx); err != nil {
		return c, err
	}
	_, err = migrateTo(ctx, v.p.mon, "unix:"+c.socket, fullStateCaps)
	if err == nil {
		// Stopped, its disk flushed and let go of by the migration.
		err = copyFile(ctx, filepath.Join(v.dir, "disk.qcow2"), c.overlay)
	}
	// Running again takes its disk back, whatever the copy did; one that
	// was paused is paused again at once.
	if cerr := contAfterMigration(ctx, v.p.mon); cerr != nil {
		// It stands stopped: said so, for the next resume to try again.
		v.pausedAt, v.paused = time.Now(), true
		if err == nil {
			err = fmt.Errorf("run sandbox %s again: %w", sandboxID, cerr)
		}
	} else if !wasRunning {
		if serr := v.p.mon.Stop(ctx); serr != nil && err == nil {
			err = serr
		}
		v.pausedAt, v.paused = time.Now(), true
	}
	c.stopped = time.Since(start)
	if err == nil {
		if err = waitLoaded(ctx, c.dest.mon); err != nil {
			err = fmt.Errorf("load the memory: %w%s", err, c.dest.logTail())
		}
	}
	if err != nil {
		return c, fmt.Errorf("capture sandbox %s: %w", sandboxID, err)
	}
	progress(fmt.Sprintf("sandbox %s stood stopped %s for the copy", sandboxID, c.stopped.Round(time.Millisecond)))
	return c, nil
}

// flatten writes to dst a qcow2 overlay of base holding what the chain of
// src holds above base: the clusters that base has are not copied. src's
// chain is read while its QEMU holds it (-U), stopped and flushed.
func (b *Backend) flatten(ctx context.Context, src, base, dst string) error {
	cmd := exec.CommandContext(ctx, b.cfg.QEMUImg, "convert", "-U", "-q", "-f", "qcow2", "-O", "qcow2", "-F", "qcow2", "-B", base, src, dst)
	cmd.Env = childEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img convert %s: %w: %s", src, err, strings.TrimSpace(string(out)))
	}
	return nil
}

package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// A spare is a clone made ahead of need: a QEMU started on a blank overlay
// of a template's disk, with the template's snapshot loaded, paused, and
// belonging to no sandbox yet. Its guest has not run a single instruction,
// so it is exactly the template's snapshot. Starting QEMU is about a third
// of a clone's time (its own initialisation, before the monitor answers);
// with a spare ready, a clone only moves the spare's files into the
// sandbox's directories and gives the guest its identity.
//
// The backend keeps at most one spare per template, made after the
// template's first clone and again after each clone takes it. A spare
// costs a QEMU process whose guest RAM is the template's, mapped privately
// and not yet touched: tens of MiB, mostly the display's memory. It counts
// against the host memory limit like a sandbox (its guest could grow to
// its full memory): no spare is made that would pass the limit, and the
// clone that takes a spare counts instead of it.
// Spares do not outlive the backend: Close kills them, and New kills any a
// crashed server left behind (removeStrays).
type spare struct {
	dir, run   string // its directory and socket directory
	p          *proc
	tplCreated time.Time // which build of the template it was made from
}

// spareSlot is a template's spare, ready or being made.
type spareSlot struct {
	done  chan struct{} // closed when sp is set (nil if making it failed)
	sp    *spare
	memMB int // its guest memory, counted against the host limit
}

// spareNamePrefix starts the -name of every spare's QEMU. '+' cannot occur
// in a sandbox id, so a spare's name never collides with a sandbox's, and
// both start with "hvkube-sandbox:".
const spareNamePrefix = "hvkube-sandbox:+"

func (b *Backend) sparesDir() string { return filepath.Join(b.cfg.Dir, "spares") }

// startFromSnapshot starts QEMU for a clone of tpl named name, with its
// files in dir and its sockets in run, and loads the template's snapshot
// into it: the VM ends paused, its guest not yet run. movable makes a QEMU
// whose files may be moved (a spare's).
func (b *Backend) startFromSnapshot(ctx context.Context, tpl tplMeta, name, dir, run string, movable bool) (*proc, error) {
	disk := filepath.Join(dir, "disk.qcow2")
	os.Remove(disk)
	if err := b.cloneOverlay(ctx, tpl.ID, disk); err != nil {
		return nil, err
	}
	m := b.machineFor(tpl, name, dir, run, disk)
	m.MemFile = filepath.Join(b.tplDir(tpl.ID), "ram")
	m.Incoming = true
	m.DiskFDs = movable
	p, err := b.launch(ctx, m, dir)
	if err != nil {
		return nil, err
	}
	if err := migrateFromFile(ctx, p.mon, filepath.Join(b.tplDir(tpl.ID), "state")); err != nil {
		p.kill()
		return nil, fmt.Errorf("load template state: %w%s", err, p.logTail())
	}
	return p, nil
}

// makeSpare makes a spare of tpl.
func (b *Backend) makeSpare(ctx context.Context, tpl tplMeta) (*spare, error) {
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	sp := &spare{dir: filepath.Join(b.sparesDir(), tpl.ID+"-"+nonce), tplCreated: tpl.CreatedAt}
	sp.run = b.runDirFor(sp.dir)
	if err := os.MkdirAll(sp.dir, 0o700); err != nil {
		return nil, err
	}
	p, err := b.startFromSnapshot(ctx, tpl, spareNamePrefix+tpl.ID+":"+nonce, sp.dir, sp.run, true)
	if err != nil {
		sp.discard()
		return nil, err
	}
	sp.p = p
	return sp, nil
}

// discard waits until the slot's spare is made, if it is being made, and
// discards it.
func (s *spareSlot) discard() {
	<-s.done
	if s.sp != nil {
		s.sp.discard()
	}
}

// discard kills the spare's QEMU and removes its files.
func (sp *spare) discard() {
	if sp.p != nil {
		sp.p.kill()
	}
	os.RemoveAll(sp.run)
	os.RemoveAll(sp.dir)
}

// moveTo hands the spare's files and sockets over to a sandbox whose
// directory is dir and socket directory run. QEMU keeps its open files
// across the renames, and its listening sockets answer at their new paths.
func (sp *spare) moveTo(dir, run string) error {
	for _, f := range []string{"disk.qcow2", "pid", "serial.log", "qemu.log"} {
		if err := os.Rename(filepath.Join(sp.dir, f), filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	os.RemoveAll(run)
	if err := os.Rename(sp.run, run); err != nil {
		return err
	}
	os.Remove(sp.dir)
	sp.p.dir = dir
	return nil
}

// refillSpare starts making a spare of tpl in the background, unless
// spares are off or one is ready or being made.
func (b *Backend) refillSpare(tpl tplMeta) {
	if b.cfg.NoSpares {
		return
	}
	total, _, err := hostMemory()
	b.mu.Lock()
	if b.bgCtx.Err() != nil || b.spares[tpl.ID] != nil {
		b.mu.Unlock()
		return
	}
	if limit := total * b.cfg.MemoryLimitPercent / 100; err == nil && b.committedLocked()+tpl.MemoryMB > limit {
		b.mu.Unlock()
		b.log.Debug("no spare clone: it would pass the host memory limit", "template", tpl.ID)
		return
	}
	s := &spareSlot{done: make(chan struct{}), memMB: tpl.MemoryMB}
	b.spares[tpl.ID] = s
	b.mu.Unlock()
	go func() {
		defer close(s.done)
		sp, err := b.makeSpare(b.bgCtx, tpl)
		if err != nil {
			if b.bgCtx.Err() == nil {
				b.log.Warn("could not make a spare clone", "template", tpl.ID, "err", err)
			}
			return
		}
		s.sp = sp
	}()
}

// takeSpare returns tpl's spare, waiting for it if it is being made (it
// started earlier than anything the caller could start now), or nil if
// there is none that fits: none made, making it failed, its QEMU died, or
// it comes from an earlier build of the template.
func (b *Backend) takeSpare(ctx context.Context, tpl tplMeta) *spare {
	b.mu.Lock()
	s := b.spares[tpl.ID]
	delete(b.spares, tpl.ID)
	b.mu.Unlock()
	if s == nil {
		return nil
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		go s.discard()
		return nil
	}
	sp := s.sp
	if sp == nil {
		return nil
	}
	if !sp.p.alive() || !sp.tplCreated.Equal(tpl.CreatedAt) {
		sp.discard()
		return nil
	}
	return sp
}

// dropSpare discards the spare of template id, if any, waiting for one
// being made.
func (b *Backend) dropSpare(id string) {
	b.mu.Lock()
	s := b.spares[id]
	delete(b.spares, id)
	b.mu.Unlock()
	if s != nil {
		s.discard()
	}
}

// dropAllSpares discards every spare; bgCtx must be cancelled first, so
// that none is made after.
func (b *Backend) dropAllSpares() {
	b.mu.Lock()
	ids := make([]string, 0, len(b.spares))
	for id := range b.spares {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	for _, id := range ids {
		b.dropSpare(id)
	}
}

// removeStaleSpares removes the spares' files a previous server left
// behind (it ended without Close); removeStrays has killed their QEMUs.
func (b *Backend) removeStaleSpares() {
	entries, err := os.ReadDir(b.sparesDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(b.sparesDir(), e.Name())
		os.RemoveAll(b.runDirFor(dir))
		os.RemoveAll(dir)
	}
}

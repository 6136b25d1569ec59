package qemu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/drivers/qemu/qga"
)

// A spare is a clone made ahead of need and belonging to no sandbox yet: a
// QEMU started on a blank overlay of a template's disk, with the template's
// snapshot loaded, then run for a moment to give it its own machine id,
// boot id and (by vmgenid) random seed, and paused. Its guest network (if
// the template has one) lets nothing through and answers no name until a
// sandbox takes it and gives it the sandbox's policy. That moment is also
// when TCG translates the guest code the guest agent runs, which a fresh
// QEMU pays for once (about 0.2 s under emulation). A clone or a reset that
// takes a spare moves its files into the sandbox's directories and hands
// over its QEMU and its guest-agent connection: a few milliseconds. The
// sandbox's hostname is written at its first resume (pendingName), as the
// first thing the guest agent does there.
//
// A template keeps as many spares as it is taken from while one is made:
// 1 + ceil(takes per second over the last SpareChurnWindow × the time the last
// spare took to make), at most Config.MaxSpares. Spares are made one at a
// time per template, in the background; a template not taken from for a
// SpareChurnWindow keeps one. Each spare is a QEMU process whose guest RAM is
// the template's, mapped privately: tens of MiB of its own. It counts
// against the host memory limit like a sandbox (its guest could grow to
// its full memory): no spare is made that would pass the limit, a clone of
// the template counts instead of the spare it takes, and spares are
// discarded when a sandbox needs their room.
// Spares do not outlive the backend: Close kills them, and New kills any a
// crashed server left behind (removeStrays).
type spare struct {
	dir, run   string // its directory and socket directory
	p          *proc
	ga         *qga.Client // connected while it was readied; kept for the sandbox
	qgaSock    *pathRef    // where ga dials: moves with the spare's files
	tplCreated time.Time   // which build of the template it was made from
}

// pathRef is a socket path that can change under a client that dials it.
type pathRef struct {
	mu   sync.Mutex
	path string
}

func (r *pathRef) get() string  { r.mu.Lock(); defer r.mu.Unlock(); return r.path }
func (r *pathRef) set(p string) { r.mu.Lock(); r.path = p; r.mu.Unlock() }

// spareSet is a template's spares.
type spareSet struct {
	ready  []*spare   // made and paused, oldest first
	making *spareSlot // the one being made, if any
	memMB  int        // what each one is expected to use (memory.go)
	// takes are when clones and resets asked for a spare, over the last
	// SpareChurnWindow; makeTook is how long the last spare took to make.
	takes    []time.Time
	makeTook time.Duration
	trim     *time.Timer
	// startTook is how long the last clone that started its own QEMU took
	// to do so.
	startTook time.Duration
}

// worthWaiting reports whether a clone should wait for the spare being
// made rather than start its own QEMU: when the spare should be ready
// sooner (a spare also has its guest run for a moment, so it takes longer
// to make than a QEMU takes to start).
func (s *spareSet) worthWaiting(slot *spareSlot, now time.Time) bool {
	if s.makeTook == 0 || s.startTook == 0 {
		return true
	}
	return slot.started.Add(s.makeTook).Sub(now) < s.startTook
}

// spareSlot is a spare being made. A taker that finds no ready spare
// claims the slot (takes it out of the set) and waits for it.
type spareSlot struct {
	done    chan struct{} // closed when sp is set (nil if making it failed)
	sp      *spare
	started time.Time
}

// SpareChurnWindow is how far back takes count towards a template's
// number of spares.
const SpareChurnWindow = 30 * time.Second

// DefaultMaxSpares is the most spares a template keeps by default.
const DefaultMaxSpares = 4

func (s *spareSet) count() int {
	n := len(s.ready)
	if s.making != nil {
		n++
	}
	return n
}

// want is how many spares the set should hold at now.
func (s *spareSet) want(now time.Time, maxSpares int) int {
	for len(s.takes) > 0 && now.Sub(s.takes[0]) > SpareChurnWindow {
		s.takes = s.takes[1:]
	}
	rate := float64(len(s.takes)) / SpareChurnWindow.Seconds()
	n := 1 + int(math.Ceil(rate*s.makeTook.Seconds()))
	return max(1, min(n, maxSpares))
}

// noteStart records how long a clone of tpl took to start its own QEMU.
func (b *Backend) noteStart(tpl tplMeta, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if set := b.spares[tpl.ID]; set != nil {
		set.startTook = d
	}
}

// Spares reports how many spares template tplID holds, ready or being
// made.
func (b *Backend) Spares(tplID string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if set := b.spares[tplID]; set != nil {
		return set.count()
	}
	return 0
}

// MakingSpares reports whether a spare of any template is being made: its
// QEMU takes CPU until it is paused.
func (b *Backend) MakingSpares() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, set := range b.spares {
		if set.making != nil {
			return true
		}
	}
	return false
}

// spareNamePrefix starts the -name of every spare's QEMU: the rest is its
// template id and a nonce. The sandbox that takes a spare keeps its QEMU,
// and with it this name; spares themselves never outlive the backend, so a
// QEMU named so that runs while no server does is a sandbox's.
const spareNamePrefix = "hvkube-spare:"

// spareHostname is a spare's hostname until a sandbox takes it.
const spareHostname = "hvkube-spare"

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

// makeSpare makes a spare of tpl: started from the snapshot, given its own
// identity, paused.
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
	sp.qgaSock = &pathRef{path: filepath.Join(sp.run, "qga.sock")}
	sp.ga = qga.New("", qga.WithDialer(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sp.qgaSock.get())
	}))
	g := newGuest(sp.ga, tpl.Image)
	ictx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = p.mon.Cont(ictx)
	if err == nil {
		err = g.os.Identity(ictx, g, spareHostname)
	}
	if err == nil {
		// What a resume runs in the guest, translated now: the clock is
		// set by a program, and a fresh QEMU first runs one in about half
		// a second.
		err = g.os.SetClock(ictx, g, time.Now())
	}
	if err == nil {
		err = p.mon.Stop(ictx)
	}
	if err != nil {
		sp.discard()
		return nil, fmt.Errorf("ready the spare: %w", err)
	}
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
	if sp.ga != nil {
		sp.ga.Close()
	}
	if sp.p != nil {
		sp.p.kill()
	}
	os.RemoveAll(sp.run)
	os.RemoveAll(sp.dir)
}

// moveTo hands the spare's files and sockets over to a sandbox whose
// directory is dir and socket directory run. QEMU keeps its open files
// across the renames, its listening sockets answer at their new paths,
// and the guest agent's connection stays.
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
	sp.qgaSock.set(filepath.Join(run, "qga.sock"))
	if sp.p.link != nil {
		sp.p.link.sock.set(filepath.Join(run, netSocketName))
	}
	return nil
}

// refillSpares has tpl's spares made in the background up to the number
// its churn asks for, unless spares are off or one is being made.
func (b *Backend) refillSpares(tpl tplMeta) {
	if b.cfg.NoSpares {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	set := b.spareSetLocked(tpl)
	b.startMakingLocked(tpl, set)
}

func (b *Backend) spareSetLocked(tpl tplMeta) *spareSet {
	set := b.spares[tpl.ID]
	if set == nil {
		set = &spareSet{memMB: tpl.MemoryMB}
		b.spares[tpl.ID] = set
	}
	return set
}

// startMakingLocked starts making one spare for set if it holds fewer than
// it wants, none is being made, and one more fits under the memory limit.
func (b *Backend) startMakingLocked(tpl tplMeta, set *spareSet) {
	if b.bgCtx.Err() != nil || set.making != nil || set.count() >= set.want(time.Now(), b.cfg.MaxSpares) {
		return
	}
	b.expectMB(tpl)
	set.memMB = b.book.Profile(tpl.ID).Readied() // spares are readied
	if h, err := b.cfg.Memory.Host(); err == nil && !b.accountLocked(h).Fits(set.memMB) {
		b.log.Debug("no spare clone: it would pass the host memory limit", "template", tpl.ID)
		return
	}
	slot := &spareSlot{done: make(chan struct{}), started: time.Now()}
	set.making = slot
	go func() {
		start := time.Now()
		sp, err := b.makeSpare(b.bgCtx, tpl)
		took := time.Since(start)
		if err != nil && b.bgCtx.Err() == nil {
			b.log.Warn("could not make a spare clone", "template", tpl.ID, "err", err)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		claimed := set.making != slot
		if !claimed {
			set.making = nil
		}
		slot.sp = sp
		close(slot.done)
		if err != nil {
			return
		}
		set.makeTook = took
		if claimed {
			return // a clone waits for it
		}
		if b.spares[tpl.ID] != set || b.bgCtx.Err() != nil {
			go sp.discard() // dropped meanwhile
			return
		}
		set.ready = append(set.ready, sp)
		b.startMakingLocked(tpl, set)
	}()
}

// takeSpare returns one of tpl's spares, waiting for the one being made
// if none is ready and it should be ready before a QEMU started now, or
// nil if there is none that fits: none made, making it failed, its QEMU
// died, or it comes from an earlier build of the template. It counts as a
// take towards the template's churn either way.
func (b *Backend) takeSpare(ctx context.Context, tpl tplMeta) *spare {
	if b.cfg.NoSpares {
		return nil
	}
	for {
		b.mu.Lock()
		set := b.spareSetLocked(tpl)
		set.takes = append(set.takes, time.Now())
		b.scheduleTrimLocked(tpl.ID, set)
		var sp *spare
		var slot *spareSlot
		if len(set.ready) > 0 {
			sp = set.ready[0]
			set.ready = set.ready[1:]
		} else if set.making != nil && set.worthWaiting(set.making, time.Now()) {
			slot = set.making
			set.making = nil
		}
		b.mu.Unlock()
		if slot != nil {
			select {
			case <-slot.done:
				sp = slot.sp
			case <-ctx.Done():
				go slot.discard()
				return nil
			}
		}
		if sp == nil {
			return nil
		}
		if sp.p.alive() && sp.tplCreated.Equal(tpl.CreatedAt) {
			return sp
		}
		sp.discard()
		if slot != nil {
			return nil
		}
	}
}

// scheduleTrimLocked arranges for set to shrink to what it wants once its
// churn has passed.
func (b *Backend) scheduleTrimLocked(tplID string, set *spareSet) {
	if set.trim != nil {
		set.trim.Stop()
	}
	set.trim = time.AfterFunc(SpareChurnWindow+time.Second, func() { b.trimSpares(tplID, set) })
}

// trimSpares discards the spares of set beyond what it wants now.
func (b *Backend) trimSpares(tplID string, set *spareSet) {
	b.mu.Lock()
	var drop []*spare
	if b.spares[tplID] == set {
		for set.count() > set.want(time.Now(), b.cfg.MaxSpares) && len(set.ready) > 0 {
			drop = append(drop, set.ready[0])
			set.ready = set.ready[1:]
		}
	}
	b.mu.Unlock()
	for _, sp := range drop {
		sp.discard()
	}
}

// shedSparesLocked takes ready spares out of their sets (other templates'
// first) until free memory has room for needMB more. It returns them, for
// the caller to discard outside the lock, and what is free without them.
func (b *Backend) shedSparesLocked(free, needMB int, keepTpl string) ([]*spare, int) {
	var drop []*spare
	for pass := 0; pass < 2 && needMB > free; pass++ {
		for id, set := range b.spares {
			if (pass == 0) == (id == keepTpl) {
				continue
			}
			for len(set.ready) > 0 && needMB > free {
				// A template's own last spare is what the clone takes.
				if id == keepTpl && set.count() == 1 {
					break
				}
				sp := set.ready[len(set.ready)-1]
				drop = append(drop, sp)
				set.ready = set.ready[:len(set.ready)-1]
				free += b.spareMB(sp, set)
			}
		}
	}
	return drop, free
}

func discardAll(sps []*spare) {
	for _, sp := range sps {
		sp.discard()
	}
}

// dropSpare discards the spares of template id, waiting for one being
// made.
func (b *Backend) dropSpare(id string) {
	b.mu.Lock()
	set := b.spares[id]
	delete(b.spares, id)
	var slot *spareSlot
	if set != nil {
		if set.trim != nil {
			set.trim.Stop()
		}
		slot = set.making
		set.making = nil
	}
	b.mu.Unlock()
	if set == nil {
		return
	}
	for _, sp := range set.ready {
		sp.discard()
	}
	if slot != nil {
		slot.discard()
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

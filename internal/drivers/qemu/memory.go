package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/capacity"
)

// Memory is counted as the VMs use it (internal/capacity): each QEMU
// process's proportional set size, sampled in the background, so that a
// paused clone that shares its template's memory file counts the few
// pages it owns, not its guest RAM. A VM not measured yet counts at what
// its template's clones were measured to use (its guest memory before the
// first one), and a running one keeps room to grow to its template's
// working set.

// Sampling periods: running VMs change, paused ones barely (KSM may merge
// their pages).
const (
	sampleEvery       = 2 * time.Second
	pausedSampleEvery = time.Minute
)

// footprint is the last measurement of one process.
type footprint struct {
	mb      int
	running bool
	at      time.Time
	// cold: a clone waiting to be readied (warm.go); it counts at least at
	// its template's clone size, which it will grow to.
	cold bool
}

// footprints are the measurements by process ID.
type footprints struct {
	mu sync.Mutex
	m  map[int]footprint
}

func (f *footprints) get(pid int) footprint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[pid]
}

func (f *footprints) set(pid int, fp footprint) {
	f.mu.Lock()
	if f.m == nil {
		f.m = map[int]footprint{}
	}
	f.m[pid] = fp
	f.mu.Unlock()
}

// keep drops the measurements of processes not in live.
func (f *footprints) keep(live map[int]bool) {
	f.mu.Lock()
	for pid := range f.m {
		if !live[pid] {
			delete(f.m, pid)
		}
	}
	f.mu.Unlock()
}

// expectMB is what a new clone of tpl is expected to use.
func (b *Backend) expectMB(tpl tplMeta) int {
	b.book.Set(tpl.ID, capacity.Profile{GuestMB: tpl.MemoryMB, WorkingSetMB: tpl.WorkingSetMB})
	return b.book.Profile(tpl.ID).Expect()
}

// restoreMB is what a saved sandbox is expected to use once restored: its
// saved state is loaded into memory of its own (no longer the template's
// shared file), so at least its template's RAM as it was snapshotted.
func (b *Backend) restoreMB(v *vm) int {
	return min(max(b.expectMB(v.tpl), int(v.tpl.MemoryBytes>>20)), max(v.meta.MemoryMB, v.tpl.MemoryMB))
}

// desktopsLocked lists what holds or will hold memory: VMs being made (at
// what they reserved), spares, and sandboxes with a process.
func (b *Backend) desktopsLocked() []capacity.Desktop {
	ds := make([]capacity.Desktop, 0, len(b.vms)+len(b.building))
	for _, mb := range b.building {
		ds = append(ds, capacity.Desktop{ExpectMB: mb})
	}
	for id, set := range b.spares {
		for _, sp := range set.ready {
			ds = append(ds, capacity.Desktop{Template: id, FootprintMB: b.spareMB(sp, set), ExpectMB: set.memMB})
		}
		if set.making != nil {
			ds = append(ds, capacity.Desktop{Template: id, ExpectMB: set.memMB})
		}
	}
	for id, v := range b.vms {
		if _, ok := b.building[id]; ok {
			continue
		}
		p := v.live.Load()
		if !p.alive() {
			continue
		}
		fp := b.foot.get(p.pid)
		if fp.cold && fp.mb > 0 {
			fp.mb = max(fp.mb, b.book.Profile(v.tpl.ID).CloneMB)
		}
		ds = append(ds, capacity.Desktop{Template: v.tpl.ID, Running: fp.running, FootprintMB: fp.mb, ExpectMB: max(v.tpl.MemoryMB, v.meta.MemoryMB)})
	}
	return ds
}

// spareMB is what a ready spare uses: measured, else expected.
func (b *Backend) spareMB(sp *spare, set *spareSet) int {
	if sp.p != nil {
		if fp := b.foot.get(sp.p.pid); fp.mb > 0 {
			return fp.mb
		}
	}
	return set.memMB
}

// accountLocked counts the host's memory now.
func (b *Backend) accountLocked(h capacity.Host) capacity.Account {
	return capacity.Count(h, b.policy(), b.book, b.desktopsLocked())
}

func (b *Backend) policy() capacity.Policy {
	return capacity.Policy{LimitPercent: b.cfg.MemoryLimitPercent, RunningReserveMB: b.cfg.RunningReserveMB}
}

// admission is how a VM being made is admitted.
type admission int

const (
	// admitNew is a new VM: it must fit under the limit.
	admitNew admission = iota
	// admitReplace takes the place of the live process of the same
	// sandbox (a reset), which had its room: never refused, or a full
	// host could not reset what it holds.
	admitReplace
	// admitExisting brings back a sandbox that exists (a restore from
	// disk, a reset of one without a process): past the limit if the
	// host really has the room (capacity.Account.FitsExisting).
	admitExisting
)

// reserve holds memMB (what the VM is expected to use) for key until
// release, or refuses with api.ErrUnavailable. A clone of a template that
// has a spare does not count the spare: the clone takes it. Spares give
// way: ready ones are discarded when the room is needed.
func (b *Backend) reserve(key string, memMB int, tplID string, how admission) error {
	h, err := b.cfg.Memory.Host()
	if err != nil {
		return nil // unknown host: do not refuse
	}
	b.mu.Lock()
	if how == admitReplace {
		b.building[key] = memMB
		b.mu.Unlock()
		return nil
	}
	a := b.accountLocked(h)
	if s := b.spares[tplID]; s != nil && tplID != "" && s.count() > 0 {
		a.FreeMB += s.memMB
	}
	drop, free := b.shedSparesLocked(a.FreeMB, memMB, tplID)
	a.FreeMB = free
	if !a.Fits(memMB) && (how != admitExisting || !a.FitsExisting(memMB)) {
		b.mu.Unlock()
		discardAll(drop)
		return fmt.Errorf("%s: %w", a.Refusal(key, memMB), api.ErrUnavailable)
	}
	b.building[key] = memMB
	b.mu.Unlock()
	discardAll(drop)
	return nil
}

func (b *Backend) release(key string) {
	b.mu.Lock()
	delete(b.building, key)
	b.mu.Unlock()
}

// Capacity implements backend.Backend.
func (b *Backend) Capacity(ctx context.Context) (backend.Capacity, error) {
	h, err := b.cfg.Memory.Host()
	if err != nil {
		return backend.Capacity{}, err
	}
	b.mu.Lock()
	a := b.accountLocked(h)
	tpls := map[string]bool{}
	for _, v := range b.vms {
		if v.tpl.ID != "" {
			tpls[v.tpl.ID] = true
		}
	}
	for id := range b.spares {
		tpls[id] = true
	}
	b.mu.Unlock()
	// Built templates that nothing uses yet fit too.
	entries, _ := os.ReadDir(filepath.Join(b.cfg.Dir, "templates"))
	for _, e := range entries {
		if !e.IsDir() || tpls[e.Name()] || strings.HasSuffix(e.Name(), ".building") {
			continue
		}
		if t, err := b.loadTemplate(e.Name()); err == nil {
			b.expectMB(t)
			tpls[t.ID] = true
		}
	}
	ids := make([]string, 0, len(tpls))
	for id := range tpls {
		ids = append(ids, id)
	}
	return backend.CapacityOf(a, b.book, ids), nil
}

// sampleLoop measures the VMs' footprints until the backend closes.
func (b *Backend) sampleLoop() {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		b.sample()
		select {
		case <-b.bgCtx.Done():
			return
		case <-t.C:
		}
	}
}

// sampled is one process to measure.
type sampled struct {
	pid int
	tpl string
	v   *vm // nil for a spare
}

// sample measures the processes whose measurement is missing or old: a
// running VM's at every round, a paused one's every pausedSampleEvery.
func (b *Backend) sample() {
	var list []sampled
	live := map[int]bool{}
	b.mu.Lock()
	for id, set := range b.spares {
		for _, sp := range set.ready {
			if sp.p != nil {
				list = append(list, sampled{pid: sp.p.pid, tpl: id})
			}
		}
	}
	for _, v := range b.vms {
		if p := v.live.Load(); p.alive() {
			list = append(list, sampled{pid: p.pid, tpl: v.tpl.ID, v: v})
		}
	}
	b.mu.Unlock()
	now := time.Now()
	busy := map[string]int{} // running desktops by template
	for _, s := range list {
		live[s.pid] = true
		old := b.foot.get(s.pid)
		running := old.running
		if s.v != nil && s.v.mu.TryRLock() {
			running = s.v.p != nil && !s.v.paused
			s.v.mu.RUnlock()
		}
		if s.v != nil && s.tpl != "" && running {
			busy[s.tpl]++
		}
		if old.cold && !running {
			continue // measured when readied
		}
		if old.at.IsZero() || running || old.running || now.Sub(old.at) >= pausedSampleEvery {
			b.measure(s.pid, s.tpl, running)
		}
	}
	b.foot.keep(live)
	b.book.ObserveBusy(busy)
}

// measureCold measures a fresh clone; cold marks one that will be
// readied (and grow).
func (b *Backend) measureCold(pid int, tpl string, cold bool) {
	if mb, err := b.cfg.Memory.FootprintMB(pid); err == nil {
		b.foot.set(pid, footprint{mb: mb, at: time.Now(), cold: cold})
		if !cold {
			b.book.ObserveCold(tpl, mb)
		}
	}
}

// measure reads one process's footprint and, for a running VM, refines its
// template's working set.
func (b *Backend) measure(pid int, tpl string, running bool) int {
	mb, err := b.cfg.Memory.FootprintMB(pid)
	if err != nil {
		return 0
	}
	b.foot.set(pid, footprint{mb: mb, running: running, at: time.Now()})
	if running && tpl != "" {
		b.book.ObserveRunning(tpl, mb)
	}
	return mb
}

package qemu

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// A clone started on demand (no spare was ready) has never run its guest:
// its first resume waits while the guest's code runs for the first time
// in that process (under TCG, translated anew: hundreds of milliseconds)
// and its identity is still to write. Such clones are readied in the
// background as spares are: run, given their identity and clock, paused.
// After that their first resume is a spare's (milliseconds). Readying
// costs the memory the guest and the translation cache touch (measured
// in docs/benchmarks.md: about twice a cold clone under TCG), so a clone
// queued to be readied counts at the template's readied size.
//
// Which clones are readied:
//   - every one by default (a backend used on its own);
//   - with Config.WarmOnRequest, only those ReadyAhead asks for
//     (backend.Readier): the node asks for the idle desktops next in line
//     for a claim, and the others stay as cloned, at about half the
//     memory, so that a host holds more of them;
//   - none with Config.NoWarm: their first resume is slow under TCG.

// warmQueue is the clones waiting to be readied.
const warmQueueLen = 4096

// queueWarm asks for id to be readied; a full queue drops the request
// (the clone's first resume then does the work).
func (b *Backend) queueWarm(id string) {
	if b.cfg.NoWarm {
		return
	}
	b.warmMu.Lock()
	defer b.warmMu.Unlock()
	if b.queued[id] {
		return
	}
	select {
	case b.warmQ <- id:
		b.readying.Add(1)
		b.queued[id] = true
	default:
	}
}

// readiesAll reports whether every clone started on demand is readied
// without being asked.
func (b *Backend) readiesAll() bool { return !b.cfg.NoWarm && !b.cfg.WarmOnRequest }

// Unreadied implements backend.Readier: the clones still as cloned, not
// queued, in the order they were made.
func (b *Backend) Unreadied(ctx context.Context) []string {
	if b.cfg.NoWarm {
		return nil
	}
	b.mu.Lock()
	vms := make([]*vm, 0, len(b.vms))
	for _, v := range b.vms {
		vms = append(vms, v)
	}
	b.mu.Unlock()
	type cold struct {
		id string
		at time.Time
	}
	var list []cold
	for _, v := range vms {
		if v.mu.TryRLock() {
			if v.unreadied() {
				list = append(list, cold{v.id, v.meta.CreatedAt})
			}
			v.mu.RUnlock()
		}
	}
	b.warmMu.Lock()
	out := make([]string, 0, len(list))
	sort.Slice(list, func(i, j int) bool { return list[i].at.Before(list[j].at) })
	for _, c := range list {
		if !b.queued[c.id] {
			out = append(out, c.id)
		}
	}
	b.warmMu.Unlock()
	return out
}

// unreadied reports whether v is a clone as cloned: paused, never run,
// its whole identity pending. Callers hold v.mu.
func (v *vm) unreadied() bool {
	return v.p != nil && v.paused && v.meta.Pending == pendingIdentity && !v.meta.ColdBoot
}

// ReadyAhead implements backend.Readier. The clone counts at its
// template's readied size from now on. It is a desktop that exists, so its
// growth to that size may pass the limit as a restore may (while the host
// keeps capacity.HostFloorPercent available); past that it is refused.
func (b *Backend) ReadyAhead(ctx context.Context, id string) error {
	if b.cfg.NoWarm {
		return nil
	}
	b.mu.Lock()
	v := b.vms[id]
	b.mu.Unlock()
	if v == nil || !v.mu.TryRLock() {
		return nil // gone, or in use: its user readies it
	}
	p, tpl, ok := v.p, v.tpl.ID, v.unreadied()
	v.mu.RUnlock()
	if !ok {
		return nil
	}
	fp := b.foot.get(p.pid)
	if grow := b.book.Profile(tpl).CloneMB - fp.mb; grow > 0 {
		if h, err := b.cfg.Memory.Host(); err == nil {
			b.mu.Lock()
			a := b.accountLocked(h)
			b.mu.Unlock()
			if !a.Fits(grow) && !a.FitsExisting(grow) {
				return fmt.Errorf("ready %s ahead: %s: %w", id, a.Refusal("readying it", grow), api.ErrUnavailable)
			}
		}
	}
	fp.cold = true
	b.foot.set(p.pid, fp)
	b.queueWarm(id)
	return nil
}

// Readying is how many clones wait to be readied or are being readied.
func (b *Backend) Readying() int { return int(b.readying.Load()) }

// warmLoop readies queued clones until the backend closes.
func (b *Backend) warmLoop() {
	for {
		select {
		case <-b.bgCtx.Done():
			return
		case id := <-b.warmQ:
			if err := b.warm(b.bgCtx, id); err != nil && b.bgCtx.Err() == nil {
				b.log.Warn("could not ready a clone in the background; its first resume will", "sandbox", id, "err", err)
			}
			b.warmMu.Lock()
			delete(b.queued, id)
			b.warmMu.Unlock()
			b.readying.Add(-1)
		}
	}
}

// warm readies one clone if it still waits for it: paused, never run, its
// whole identity pending. A resume that came first has done it.
func (b *Backend) warm(ctx context.Context, id string) error {
	v, err := b.lockVM(id, false)
	if err != nil {
		return nil // deleted meanwhile
	}
	defer v.mu.Unlock()
	if !v.unreadied() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	p, g := v.p, v.g
	if err := p.mon.Cont(ctx); err != nil {
		return err
	}
	err = g.os.Identity(ctx, g, v.meta.Hostname)
	if err == nil {
		err = g.os.SetClock(ctx, g, time.Now())
	}
	if serr := p.mon.Stop(context.WithoutCancel(ctx)); err == nil {
		err = serr
	}
	v.pausedAt = time.Now()
	if err != nil {
		return err
	}
	v.meta.Pending = ""
	if err := v.save(); err != nil {
		return err
	}
	b.book.ObserveClone(v.tpl.ID, b.measure(p.pid, v.tpl.ID, false))
	return nil
}

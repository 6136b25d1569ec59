package qemu

import (
	"context"
	"time"
)

// A clone started on demand (no spare was ready) has never run its guest:
// its first resume waits while the guest's code runs for the first time
// in that process (under TCG, translated anew: hundreds of milliseconds)
// and its identity is still to write. Such clones are readied in the
// background as spares are: run, given their identity and clock, paused.
// After that their first resume is a spare's (milliseconds). Readying
// costs the memory the guest and the translation cache touch (measured
// in docs/benchmarks.md), so it is counted as the template's clone size.
// Config.NoWarm turns it off: clones then stay as cloned, smaller, and
// their first resume is slow under TCG.

// warmQueue is the clones waiting to be readied.
const warmQueueLen = 4096

// queueWarm asks for id to be readied; a full queue drops the request
// (the clone's first resume then does the work).
func (b *Backend) queueWarm(id string) {
	if b.cfg.NoWarm {
		return
	}
	b.readying.Add(1)
	select {
	case b.warmQ <- id:
	default:
		b.readying.Add(-1)
	}
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
	if v.p == nil || !v.paused || v.meta.Pending != pendingIdentity || v.meta.ColdBoot {
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

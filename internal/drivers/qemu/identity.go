package qemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// A clone's identity (machine id, boot id, hostname: guest.OS.Identity)
// is not written on the clone's path. A spare wrote its own machine and
// boot ids while it was made and only the sandbox's hostname is left; a
// clone started on demand has all of it left. What is left (vmMeta.Pending)
// is written at the clone's first resume, right after the guest answers,
// in the background: the desktop is usable at once (screen and input do
// not depend on it), and every guest call of the sandbox (exec, files,
// clipboard, typing, readiness) waits until it is written, so no agent
// command runs in the guest before it has its own identity.
const (
	pendingHostname = "hostname" // the sandbox's hostname (guest.OS.Rename)
	pendingIdentity = "identity" // all of guest.OS.Identity
)

// identityGate holds a guest's calls back while its identity is written.
type identityGate struct {
	done chan struct{}
	err  error // set before done closes
}

func (gt *identityGate) finished() bool {
	select {
	case <-gt.done:
		return true
	default:
		return false
	}
}

// gate is a guest's identityGate, if one was ever set.
type gate struct{ p atomic.Pointer[identityGate] }

// wait returns once no identity is being written, with the error of the
// last attempt if it failed.
func (g *gate) wait(ctx context.Context) error {
	gt := g.p.Load()
	if gt == nil {
		return nil
	}
	select {
	case <-gt.done:
		return gt.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startIdentityLocked writes v's pending identity in the background; v's
// guest runs and has answered. An attempt cut short (the sandbox paused
// and saved under it) leaves it pending for the next resume.
func (b *Backend) startIdentityLocked(v *vm) {
	if v.meta.Pending == "" {
		return
	}
	g := v.g
	if gt := g.gate.p.Load(); gt != nil && !gt.finished() {
		// An attempt from before a pause, its request aborted by the
		// resume: it ends at once.
		select {
		case <-gt.done:
		case <-time.After(time.Second):
			return
		}
	}
	gt := &identityGate{done: make(chan struct{})}
	g.gate.p.Store(gt)
	pending, hostname, id := v.meta.Pending, v.meta.Hostname, v.id
	go func() {
		ctx, cancel := context.WithTimeout(b.bgCtx, time.Minute)
		defer cancel()
		err := writeIdentity(ctx, g, pending, hostname)
		if err != nil {
			err = fmt.Errorf("guest identity of sandbox %s: %w", id, err)
		}
		// The gate opens before the sandbox's lock is taken: a resume
		// holding it may be waiting for this attempt to end.
		gt.err = err
		close(gt.done)
		v.mu.Lock()
		defer v.mu.Unlock()
		current := v.g == g && !v.gone
		switch {
		case err == nil && current:
			v.meta.Pending = ""
			if err := v.save(); err != nil {
				b.log.Warn("could not record the guest's identity", "sandbox", id, "err", err)
			}
		case err != nil && current && b.bgCtx.Err() == nil && !errors.Is(err, net.ErrClosed):
			// Not worth a warning when the sandbox was reset or deleted
			// under it, a resume or save cut its request short, or the
			// backend closed.
			b.log.Warn("could not write the guest's identity; the next resume tries again", "sandbox", id, "err", err)
		}
	}()
}

// writeIdentity writes what is pending of a guest's identity.
func writeIdentity(ctx context.Context, g *guest, pending, hostname string) error {
	if pending == pendingHostname {
		return g.os.Rename(ctx, g, hostname)
	}
	return g.os.Identity(ctx, g, hostname)
}

package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/capacity"
	"github.com/hvkube/hvkube/internal/scheduler"
)

// Desktops readied ahead. A backend whose fresh clones pay on their first
// resume for work that can be done ahead (backend.Readier: QEMU under TCG)
// leaves them as cloned, at about half the memory of a readied one. On
// each status beat the node asks it to ready the idle desktops of each
// pool that are next in line for a claim, in the order the scheduler hands
// them out: as many as the pool had agents at once at its busiest over
// the last ReadyAheadWindow, and at least Options.ReadyAhead. The rest
// stay as cloned, and their first resume is slower (docs/capacity.md). A
// sandbox of no pool is readied whenever it waits paused and idle.

// Defaults of readying ahead.
const (
	// DefaultReadyAhead is the fewest idle desktops of a pool kept
	// readied.
	DefaultReadyAhead = 16
	// ReadyAheadWindow is how far back a pool's busiest moment counts.
	ReadyAheadWindow = 15 * time.Minute
)

// busyPeaks remembers, per pool, how many of its desktops agents held at
// each beat over the last ReadyAheadWindow.
type busyPeaks struct {
	mu sync.Mutex
	m  map[string]*capacity.Peak
}

// observe records that n desktops of pool were busy at now and returns
// the most seen over the window.
func (b *busyPeaks) observe(pool string, n int, now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]*capacity.Peak{}
	}
	pk := b.m[pool]
	if pk == nil {
		pk = &capacity.Peak{Window: ReadyAheadWindow}
		b.m[pool] = pk
	}
	return pk.Observe(n, now)
}

// keep drops the pools not in live.
func (b *busyPeaks) keep(live map[string]bool) {
	b.mu.Lock()
	for p := range b.m {
		if !live[p] {
			delete(b.m, p)
		}
	}
	b.mu.Unlock()
}

// ReadyAheadFlag is Options.ReadyAhead for a command line's --ready-ahead
// n, whose 0 is none (the option's 0 is its default) and -1 every clone
// (which the backend then readies on its own: none is asked for).
func ReadyAheadFlag(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// readyAheadCount is how many idle desktops of a pool are kept readied
// at least.
func (n *Node) readyAheadCount() int {
	if n.opt.ReadyAhead == 0 {
		return DefaultReadyAhead
	}
	return n.opt.ReadyAhead
}

// readyAheadRound asks the backend to ready the desktops next in line,
// and returns how many it asked for.
func (n *Node) readyAheadRound(ctx context.Context, sbs []*api.Sandbox) int {
	r, ok := n.be.(backend.Readier)
	if !ok || n.readyAheadCount() < 0 {
		return 0
	}
	now := n.now()
	idle := map[string][]scheduler.Sandbox{}
	busy := map[string]int{} // by pool, every pool seen
	byName := make(map[string]*api.Sandbox, len(sbs))
	var want []*api.Sandbox
	for _, sb := range sbs {
		pool := api.OwnerOf(sb, api.KindSandboxPool)
		if _, ok := busy[pool]; !ok {
			busy[pool] = 0
		}
		switch {
		case sb.Status.CurrentAgent != "":
			busy[pool]++
		case sb.Status.Phase != api.SandboxPaused || sb.Metadata.DeletionTimestamp != nil || sb.Status.BackendID == "":
		case pool == "":
			want = append(want, sb)
		default:
			byName[sb.Metadata.Name] = sb
			idle[pool] = append(idle[pool], scheduler.ViewOf(sb))
		}
	}
	live := make(map[string]bool, len(busy))
	for pool := range busy {
		if pool == "" {
			continue
		}
		live[pool] = true
		target := max(n.readyAheadCount(), n.peaks.observe(pool, busy[pool], now))
		views := idle[pool]
		scheduler.SortForClaim(views, now)
		for _, v := range views[:min(target, len(views))] {
			want = append(want, byName[v.Name])
		}
	}
	n.peaks.keep(live)
	if len(want) == 0 {
		return 0
	}
	cold := map[string]bool{}
	for _, id := range r.Unreadied(ctx) {
		cold[id] = true
	}
	asked := 0
	for _, sb := range want {
		if !cold[sb.Status.BackendID] {
			continue
		}
		if err := r.ReadyAhead(ctx, sb.Status.BackendID); err != nil {
			if errors.Is(err, api.ErrUnavailable) {
				n.log.Debug("a desktop stays as cloned: no room to ready it", "sandbox", sb.Metadata.Name, "err", err)
				break
			}
			n.log.Warn("readying a desktop ahead", "sandbox", sb.Metadata.Name, "err", err)
			continue
		}
		asked++
	}
	return asked
}

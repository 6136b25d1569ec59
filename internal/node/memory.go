package node

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// The node writes its Node object (capacity, desktops by phase, what each
// template takes and how many more fit) every other StatusInterval (its
// heartbeat), and on the next one when something the cluster acts on
// changed (heartbeatDue); it watches memory pressure on each beat: when the host runs short, the least
// recently used idle paused desktops of pools move to disk (paused →
// saved). They stay in their pools, warm on the saved tier, and a claim
// restores them through the usual fallback chain. Running desktops and
// desktops an agent holds are never touched.

// Defaults of the pressure policy.
const (
	// DefaultStatusInterval is how often the node measures its host,
	// looks at memory pressure and writes its status when it changed.
	DefaultStatusInterval = 5 * time.Second
	// DefaultHeartbeatInterval is how often the node writes its Node
	// object when nothing the cluster acts on changed: every other status
	// round, as a kubelet renews its lease every 10 s.
	DefaultHeartbeatInterval = heartbeatRounds * DefaultStatusInterval
	// heartbeatRounds is how many status rounds one heartbeat lasts.
	heartbeatRounds = 2
	// DefaultFenceAfter is how long a node goes without writing its Node
	// object before it fences itself (Options.FenceAfter); the cluster
	// marks a node lost only after a longer silence.
	DefaultFenceAfter = 20 * time.Second
	// DefaultPressurePercent: the host is under pressure when less than
	// this share of its memory is available.
	DefaultPressurePercent = 10
	// DefaultPressurePSI: or when tasks waited for memory more than this
	// share (percent) of the last 10 s.
	DefaultPressurePSI = 10.0
	// movesPerRound bounds the desktops moved in one round: each move
	// writes a state file, and memory is measured again between rounds.
	movesPerRound = 8
)

// Condition and reasons of memory pressure.
const (
	ConditionMemoryPressure = "MemoryPressure"
	ReasonMovedToDisk       = "MovedToDisk"
)

// Pressure configures the memory pressure policy.
type Pressure struct {
	// Percent of host memory available under which idle desktops move to
	// disk (default DefaultPressurePercent; negative turns the policy
	// off).
	Percent int
	// PSI is the memory pressure (some avg10, percent) over which they
	// move too (default DefaultPressurePSI).
	PSI float64
}

func (p Pressure) withDefaults() Pressure {
	if p.Percent == 0 {
		p.Percent = DefaultPressurePercent
	}
	if p.PSI == 0 {
		p.PSI = DefaultPressurePSI
	}
	return p
}

// statusLoop writes the node's status and applies the pressure policy
// until ctx ends.
func (n *Node) statusLoop(ctx context.Context) {
	t := time.NewTicker(n.statusEvery())
	defer t.Stop()
	for {
		if err := n.statusRound(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("node status", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// statusEvery is Options.StatusInterval or its default.
func (n *Node) statusEvery() time.Duration {
	if n.opt.StatusInterval > 0 {
		return n.opt.StatusInterval
	}
	return DefaultStatusInterval
}

// heartbeatEvery is how often the node writes its Node object when
// nothing the cluster acts on changed: heartbeatRounds status rounds.
func (n *Node) heartbeatEvery() time.Duration {
	return heartbeatRounds * n.statusEvery()
}

// statusRound is one beat: measure, move desktops to disk if the host is
// under pressure, and write the Node object.
func (n *Node) statusRound(ctx context.Context) error {
	c, sbs, tpls, err := n.readHost(ctx)
	if err != nil {
		return err
	}
	n.sweepSnapshots(ctx, c, sbs, tpls)
	if why := n.pressureReason(c); why != "" {
		// Moving desktops to disk takes a while: the heartbeat goes
		// first, so that a slow round does not fence the node.
		if err := n.heartbeat(ctx, c, sbs, tpls); err != nil {
			return err
		}
		moved := n.relieve(ctx, sbs, why)
		if moved > 0 {
			if c, err = n.be.Capacity(ctx); err != nil {
				return fmt.Errorf("capacity: %w", err)
			}
			if sbs, err = n.ownSandboxes(ctx); err != nil {
				return err
			}
		}
		n.pressure.set(why)
	} else if n.pressure.set("") {
		n.clearPools(ctx)
	}
	err = n.heartbeat(ctx, c, sbs, tpls)
	n.readyAheadRound(ctx, sbs)
	// After the heartbeat, as moving to disk is: a save takes a while.
	n.idleRound(ctx, sbs)
	return err
}

// heartbeat writes the Node object when it is due and tells the fence it
// did.
func (n *Node) heartbeat(ctx context.Context, c backend.Capacity, sbs []*api.Sandbox, tpls []*api.Template) error {
	wasLost, err := n.writeNode(ctx, c, sbs, tpls)
	if errors.Is(err, errNotDue) {
		return nil
	}
	if err != nil {
		return err
	}
	n.wrote(ctx, wasLost)
	return nil
}

// readHost reads the host's capacity, then the sandboxes placed on this
// node and the templates, in that order (sweepSnapshots counts on it).
func (n *Node) readHost(ctx context.Context) (backend.Capacity, []*api.Sandbox, []*api.Template, error) {
	c, err := n.be.Capacity(ctx)
	if err != nil {
		return c, nil, nil, fmt.Errorf("capacity: %w", err)
	}
	sbs, err := n.ownSandboxes(ctx)
	if err != nil {
		return c, nil, nil, err
	}
	tpls, err := n.listTemplates(ctx)
	return c, sbs, tpls, err
}

// ownSandboxes lists the sandboxes placed on this node: from the node's
// watch once it has listed them (each status round would otherwise list
// them from the API server), else from the store. They are the caller's
// to change.
func (n *Node) ownSandboxes(ctx context.Context) ([]*api.Sandbox, error) {
	if c := n.cache(api.KindSandbox); c != nil && c.Synced() {
		var out []*api.Sandbox
		c.RangeLatest(func(o api.Object) bool {
			if sb := o.(*api.Sandbox); sb.Status.Node == n.name {
				out = append(out, sb)
			}
			return true
		})
		slices.SortFunc(out, func(a, b *api.Sandbox) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
		for i, sb := range out {
			out[i] = api.DeepCopy(sb)
		}
		return out, nil
	}
	items, _, err := n.st.List(ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		return nil, err
	}
	out := make([]*api.Sandbox, 0, len(items))
	for _, it := range items {
		sb := it.(*api.Sandbox)
		if sb.Status.Node == n.name {
			out = append(out, sb)
		}
	}
	return out, nil
}

// pressureReason says why the host is under memory pressure, or "". A
// pool that asks for more than fits is not pressure: admission keeps it
// waiting (InsufficientMemory) and nothing is moved for it; pressure is
// the host itself running short, from what else runs on it or from
// desktops growing past their reserves.
func (n *Node) pressureReason(c backend.Capacity) string {
	p := n.opt.Pressure.withDefaults()
	if p.Percent < 0 || c.TotalMemoryMB == 0 {
		return ""
	}
	switch {
	case c.AvailableMemoryMB*100 < c.TotalMemoryMB*p.Percent:
		return fmt.Sprintf("the host has %d MiB of %d MiB available, under %d%%", c.AvailableMemoryMB, c.TotalMemoryMB, p.Percent)
	case c.MemoryPressure > p.PSI:
		return fmt.Sprintf("tasks waited for memory %.1f%% of the last 10 s (over %.1f%%)", c.MemoryPressure, p.PSI)
	}
	return ""
}

// lruIdle returns the idle paused desktops of pools, least recently used
// first: no agent holds them and none is being deleted.
func lruIdle(sbs []*api.Sandbox) []*api.Sandbox {
	var idle []*api.Sandbox
	for _, sb := range sbs {
		if sb.Status.Phase == api.SandboxPaused && sb.Status.CurrentAgent == "" && sb.Metadata.DeletionTimestamp == nil &&
			api.OwnerOf(sb, api.KindSandboxPool) != "" {
			idle = append(idle, sb)
		}
	}
	sort.SliceStable(idle, func(i, j int) bool { return lastUsed(idle[i]).Before(lastUsed(idle[j])) })
	return idle
}

// lastUsed is when a sandbox last did anything: resumed, released, ready
// or started.
func lastUsed(sb *api.Sandbox) time.Time {
	var t time.Time
	for _, x := range []*time.Time{sb.Status.LastResumedAt, sb.Status.ReleasedAt, sb.Status.ReadyAt, sb.Status.StartedAt} {
		if x != nil && x.After(t) {
			t = *x
		}
	}
	return t
}

// relieve moves up to movesPerRound idle desktops to disk, least recently
// used first, and reports how many moved.
func (n *Node) relieve(ctx context.Context, sbs []*api.Sandbox, why string) int {
	moved := 0
	for _, sb := range lruIdle(sbs) {
		if moved == movesPerRound || ctx.Err() != nil {
			break
		}
		ok, err := n.moveToDisk(ctx, sb.Metadata.Name, why)
		if err != nil {
			n.log.Warn("moving an idle desktop to disk", "sandbox", sb.Metadata.Name, "err", err)
			continue
		}
		if ok {
			moved++
		}
	}
	if moved == 0 {
		n.log.Warn("memory pressure, and no idle paused desktop to move to disk", "why", why)
	}
	return moved
}

// moveToDisk saves one idle paused desktop, if it still is one.
func (n *Node) moveToDisk(ctx context.Context, name, why string) (bool, error) {
	unlock := n.locks.lock(name)
	defer unlock()
	o, err := n.st.Get(ctx, api.KindSandbox, name)
	if errors.Is(err, api.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	sb := o.(*api.Sandbox)
	if sb.Status.Phase != api.SandboxPaused || sb.Status.CurrentAgent != "" || sb.Metadata.DeletionTimestamp != nil {
		return false, nil // claimed or changed since the list
	}
	start := n.now()
	if err := n.be.Save(ctx, name); err != nil {
		return false, err
	}
	took := n.now().Sub(start).Round(time.Millisecond)
	msg := fmt.Sprintf("moved to disk (saved in %s), least recently used idle desktop: %s; a claim restores it", took, why)
	n.event(ctx, sb, api.EventNormal, ReasonMovedToDisk, msg)
	n.pressure.moved(n.now().UTC(), why)
	err = n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		s.Phase, s.Reason, s.Message, s.PID = api.SandboxSaved, ReasonMovedToDisk, msg, 0
	})
	if pool := api.OwnerOf(sb, api.KindSandboxPool); pool != "" {
		n.markPool(ctx, pool, msg)
	}
	return true, err
}

// markPool sets the pool's MemoryPressure condition.
func (n *Node) markPool(ctx context.Context, pool, msg string) {
	_, err := reconcile.UpdateStatus(ctx, n.st, api.KindSandboxPool, pool, func(p *api.SandboxPool) bool {
		return api.SetCondition(&p.Status.Conditions, api.Condition{Type: ConditionMemoryPressure, Status: "True", Reason: ReasonMovedToDisk,
			Message: "idle desktops were moved to disk to keep host memory free: " + msg}, n.now())
	})
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		n.log.Warn("pool condition", "pool", pool, "err", err)
	}
}

// Condition and reason of a node that writes its status.
const (
	ConditionReady  = "Ready"
	ReasonHeartbeat = "Heartbeat"
)

// writeNode writes the Node object's status, with its Ready condition
// True, and reports whether the cluster had marked the node lost.
func (n *Node) writeNode(ctx context.Context, c backend.Capacity, sbs []*api.Sandbox, tpls []*api.Template) (wasLost bool, err error) {
	names := templateNames(tpls)
	now := n.now().UTC()
	st := api.NodeStatus{
		Backend: n.be.Name(),
		Memory: api.NodeMemory{TotalMB: c.TotalMemoryMB, AvailableMB: c.AvailableMemoryMB, LimitMB: c.LimitMemoryMB,
			UsedMB: c.UsedMemoryMB, ReservedMB: c.ReservedMemoryMB, FreeMB: c.FreeMemoryMB},
		Sandboxes:     map[string]int{},
		LastHeartbeat: &now,
		Address:       n.opt.Address,
	}
	for _, sb := range sbs {
		st.Sandboxes[orDefault(sb.Status.Phase, api.SandboxPending)]++
	}
	for _, t := range c.Templates {
		st.Templates = append(st.Templates, api.NodeTemplate{Name: orDefault(names[t.ID], "-"), Snapshot: t.ID,
			GuestMB: t.GuestMB, CloneMB: t.CloneMB, ColdMB: t.ColdMB, WorkingSetMB: t.WorkingSetMB, Fit: t.Fit})
	}
	st.Pressure, st.Conditions = n.pressure.status()
	n.nodeMu.Lock()
	last := n.lastNode
	n.nodeMu.Unlock()
	if last == nil {
		if _, err := n.st.Get(ctx, api.KindNode, n.name); errors.Is(err, api.ErrNotFound) {
			o := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindNode}, Metadata: api.ObjectMeta{Name: n.name}}
			if _, err := n.st.Create(ctx, o); err != nil && !errors.Is(err, api.ErrAlreadyExists) {
				return false, err
			}
		}
	}
	if last != nil && !heartbeatDue(&last.Status, &st, n.heartbeatEvery()-n.statusEvery()/2) {
		return false, errNotDue
	}
	ready := api.Condition{Type: ConditionReady, Status: api.ConditionTrue, Reason: ReasonHeartbeat,
		Message: fmt.Sprintf("the node writes its status every %s", n.heartbeatEvery())}
	change := func(o *api.Node) bool {
		old := api.FindCondition(o.Status.Conditions, ConditionReady)
		wasLost = old != nil && old.Status == api.ConditionFalse && old.Reason == reasonNodeLost
		conds := st.Conditions
		if old != nil {
			// Kept for its lastTransitionTime.
			conds = append(append([]api.Condition(nil), conds...), *old)
		}
		api.SetCondition(&conds, ready, now)
		o.Status = st
		o.Status.Conditions = conds
		return true
	}
	// The write starts from the node's own last one, which nobody else
	// changes unless they mark the node lost (then it loses to theirs
	// and is made again on a fresh read): one request per heartbeat.
	var out *api.Node
	if last != nil {
		out, err = reconcile.UpdateStatusFrom(ctx, n.st, api.KindNode, last, change)
	} else {
		out, err = reconcile.UpdateStatus(ctx, n.st, api.KindNode, n.name, change)
	}
	if err != nil {
		out = nil // deleted, say: the next heartbeat reads it again
	}
	n.nodeMu.Lock()
	n.lastNode = out
	n.nodeMu.Unlock()
	return wasLost, err
}

// errNotDue: the Node object was written recently and nothing the
// cluster acts on changed since (writeNode).
var errNotDue = errors.New("the heartbeat is not due")

// heartbeatDue reports whether the node's status st must be written, last
// being its last write: when that is older than within (the heartbeat),
// or when something the cluster acts on changed since: its templates and
// what fits, its pressure and conditions, its address, or its memory by
// more than memoryNoise of the host's. The counts of its sandboxes by
// phase, only shown, wait for the heartbeat.
func heartbeatDue(last, st *api.NodeStatus, within time.Duration) bool {
	if last.LastHeartbeat == nil || st.LastHeartbeat.Sub(*last.LastHeartbeat) >= within {
		return true
	}
	if last.Backend != st.Backend || last.Address != st.Address || !reflect.DeepEqual(last.Templates, st.Templates) ||
		!reflect.DeepEqual(last.Pressure, st.Pressure) {
		return true
	}
	for _, c := range st.Conditions {
		old := api.FindCondition(last.Conditions, c.Type)
		if old == nil || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message {
			return true
		}
	}
	noise := int(float64(st.Memory.TotalMB) * memoryNoise)
	moved := func(a, b int) bool { return a-b > noise || b-a > noise }
	lm, m := last.Memory, st.Memory
	return lm.TotalMB != m.TotalMB || lm.LimitMB != m.LimitMB || moved(lm.AvailableMB, m.AvailableMB) ||
		moved(lm.UsedMB, m.UsedMB) || moved(lm.ReservedMB, m.ReservedMB) || moved(lm.FreeMB, m.FreeMB)
}

// memoryNoise is the share of the host's memory a measure may move by
// between two status rounds without the Node object being written before
// its heartbeat is due.
const memoryNoise = 0.01

// listTemplates lists the Template objects, from the node's watch once it
// has listed them, else from the store. They are the caller's to change.
func (n *Node) listTemplates(ctx context.Context) ([]*api.Template, error) {
	if c := n.cache(api.KindTemplate); c != nil && c.Synced() {
		var out []*api.Template
		c.RangeLatest(func(o api.Object) bool {
			out = append(out, o.(*api.Template))
			return true
		})
		slices.SortFunc(out, func(a, b *api.Template) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
		for i, t := range out {
			out[i] = api.DeepCopy(t)
		}
		return out, nil
	}
	items, _, err := n.st.List(ctx, api.KindTemplate, api.Selector{})
	if err != nil {
		return nil, err
	}
	out := make([]*api.Template, len(items))
	for i, it := range items {
		out[i] = it.(*api.Template)
	}
	return out, nil
}

// templateNames maps snapshot IDs to their Template objects' names.
func templateNames(tpls []*api.Template) map[string]string {
	m := map[string]string{}
	for _, t := range tpls {
		if t.Status.Snapshot != nil {
			m[t.Status.Snapshot.ID] = t.Metadata.Name
		}
		for _, s := range t.Status.Shapes {
			m[s.ID] = t.Metadata.Name
		}
	}
	return m
}

// pressureBook is the policy's record, kept across rounds.
type pressureBook struct {
	mu     sync.Mutex
	count  int
	last   *time.Time
	reason string
	now    string // why the host is under pressure now ("" if not)
	since  time.Time
}

// set records whether the host is under pressure now (why, or "").
func (p *pressureBook) set(why string) (ended bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ended = p.now != "" && why == ""
	if why != "" && p.now == "" {
		p.since = time.Now()
	}
	p.now = why
	return ended
}

// moved records a desktop moved to disk.
func (p *pressureBook) moved(at time.Time, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count++
	p.last, p.reason = &at, why
}

// status is the Node's pressure record and its MemoryPressure condition.
func (p *pressureBook) status() (api.NodePressure, []api.Condition) {
	p.mu.Lock()
	defer p.mu.Unlock()
	np := api.NodePressure{Moved: p.count, LastMoved: p.last, LastReason: p.reason}
	c := api.Condition{Type: ConditionMemoryPressure, Status: api.ConditionFalse, Reason: "EnoughMemory"}
	if p.now != "" {
		c = api.Condition{Type: ConditionMemoryPressure, Status: api.ConditionTrue, Reason: "LowMemory", Message: p.now, LastTransitionTime: p.since.UTC()}
	}
	return np, []api.Condition{c}
}

// clearPools sets MemoryPressure False on the pools that have it True,
// once the host is no longer under pressure.
func (n *Node) clearPools(ctx context.Context) {
	items, _, err := n.st.List(ctx, api.KindSandboxPool, api.Selector{})
	if err != nil {
		return
	}
	for _, it := range items {
		p := it.(*api.SandboxPool)
		if c := api.FindCondition(p.Status.Conditions, ConditionMemoryPressure); c == nil || c.Status != api.ConditionTrue {
			continue
		}
		_, err := reconcile.UpdateStatus(ctx, n.st, api.KindSandboxPool, p.Metadata.Name, func(p *api.SandboxPool) bool {
			return api.SetCondition(&p.Status.Conditions, api.Condition{Type: ConditionMemoryPressure, Status: api.ConditionFalse, Reason: "EnoughMemory",
				Message: "the host has memory again; desktops moved to disk stay there until claimed"}, n.now())
		})
		if err != nil && !errors.Is(err, api.ErrNotFound) {
			n.log.Warn("pool condition", "pool", p.Metadata.Name, "err", err)
		}
	}
}

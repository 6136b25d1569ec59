package controller

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// Pools keeps each SandboxPool's sandboxes: as many as it should have now
// (replicas, raised to keep minReady of them idle and by the queue of
// pending agents, bounded by maxPerHost and scaling.maxReplicas), created
// no faster than refillRate, removed only when idle and only after
// scaleDownDelay, replaced when they fail or their health checks do, and
// recycled after maxAge. A pool whose sandboxes cannot start (no memory,
// no template, no GPU) says why and stops adding more.
type Pools struct {
	st        store.Interface
	log       *slog.Logger
	now       func() time.Time
	sandboxes *reconcile.Cache
	agents    *reconcile.Cache
	pools     *reconcile.Cache
	nodes     *reconcile.Cache

	nodesMu  sync.Mutex
	liveSeen map[string]bool // by node: live when last seen

	countsMu    sync.Mutex
	countsWrote map[string]time.Time // by pool: when its status was last written

	// place chooses the node of a member about to be created
	// (Placement.placeNew); nil creates members unplaced, for placement
	// to place.
	place func(sb *api.Sandbox) (node string, done func())
}

// poolCountsEvery is how often at most a pool's status is written when
// only its counts changed (replicas, ready, warm, busy): each claim and
// each release changes them, and a pool of a thousand busy sandboxes
// would write its status as often as its agents start. A change of
// anything else (desired, the conditions' states, excessSince) is
// written at once.
const poolCountsEvery = time.Second

// selectingIndex holds the pending agents that select sandboxes by labels,
// by the pool label their selector asks for ("" for none): the agents a
// pool's count looks at, rather than every agent ever run.
const selectingIndex = "pending-by-pool-label"

// ownerIndex holds the sandboxes by the pool that owns them: a pool's
// reconcile looks at its own members, not at every sandbox of the fleet.
const ownerIndex = "by-owner-pool"

// NewPools registers the pool controller with m.
func NewPools(m *reconcile.Manager, st store.Interface, log *slog.Logger, now func() time.Time) *Pools {
	if now == nil {
		now = time.Now
	}
	p := &Pools{log: log, now: now, sandboxes: m.Cache(api.KindSandbox), agents: m.Cache(api.KindAgent), pools: m.Cache(api.KindSandboxPool), nodes: m.Cache(api.KindNode),
		liveSeen: map[string]bool{}, countsWrote: map[string]time.Time{}}
	p.agents.AddIndex(selectingIndex, func(o api.Object) []string {
		if a := o.(*api.Agent); a.Spec.SandboxSelector != nil && agentstate.Pending(a) {
			return []string{a.Spec.SandboxSelector.MatchLabels["pool"]}
		}
		return nil
	})
	p.sandboxes.AddIndex(ownerIndex, func(o api.Object) []string {
		if pool := api.OwnerOf(o, api.KindSandboxPool); pool != "" {
			return []string{pool}
		}
		return nil
	})
	// Its own writes of pools are its view of them until the watch
	// brings them back: a pool is read from the watch, never the store.
	p.st = reconcile.Expecting{Interface: st, Caches: func(kind string) *reconcile.Cache {
		if kind == api.KindSandboxPool {
			return p.pools
		}
		return nil
	}}
	m.Register(reconcile.Controller{Name: "pool", For: api.KindSandboxPool, Reconciler: p, Workers: 2,
		Watches: []reconcile.Watch{
			{Kind: api.KindSandbox, Map: func(o api.Object) []string {
				if pool := api.OwnerOf(o, api.KindSandboxPool); pool != "" {
					return []string{pool}
				}
				return nil
			}},
			{Kind: api.KindAgent, Map: p.poolsFor},
			{Kind: api.KindNode, Map: p.nodeChanged},
		}})
	return p
}

// nodeChanged maps a node that came or went (for placement) to every
// pool: maxPerHost caps a pool by the number of nodes. A node's periodic
// status writes map to nothing.
func (p *Pools) nodeChanged(o api.Object) []string {
	n := o.(*api.Node)
	live := n.Metadata.DeletionTimestamp == nil && !nodeLost(n)
	p.nodesMu.Lock()
	was, known := p.liveSeen[n.Metadata.Name]
	p.liveSeen[n.Metadata.Name] = live
	p.nodesMu.Unlock()
	if known && was == live {
		return nil
	}
	var keys []string
	for _, po := range p.pools.List(api.Selector{}) {
		keys = append(keys, po.GetMeta().Name)
	}
	return keys
}

// liveNodes counts the nodes placement may use.
func (p *Pools) liveNodes() int {
	n := 0
	p.nodes.Range(func(o api.Object) bool {
		if nd := o.(*api.Node); nd.Metadata.DeletionTimestamp == nil && !nodeLost(nd) {
			n++
		}
		return true
	})
	return n
}

// poolsFor maps a pending agent to the pools that scale with the queue
// (scaling.scaleUpThreshold) and whose sandboxes it selects: no other pool
// counts pending agents. A finished agent that released its sandbox
// (status.releasedSandbox) maps to that sandbox's pool, which counts it
// warm again before its node writes the release.
func (p *Pools) poolsFor(o api.Object) []string {
	a := o.(*api.Agent)
	if a.Status.ReleasedSandbox != "" && agentstate.Finished(a) {
		if so, ok := p.sandboxes.Get(a.Status.ReleasedSandbox); ok {
			if pool := api.OwnerOf(so, api.KindSandboxPool); pool != "" {
				return []string{pool}
			}
		}
		return nil
	}
	if a.Spec.SandboxSelector == nil || !agentstate.Pending(a) {
		return nil // a bound agent's pool hears of it through the sandbox's claim
	}
	sel := agentstate.SelectorOf(a)
	var keys []string
	for _, po := range p.pools.List(api.Selector{}) {
		if po := po.(*api.SandboxPool); po.Spec.Scaling.ScaleUpThreshold > 0 && sel.Matches(po.Spec.Template.Metadata.Labels) {
			keys = append(keys, po.GetMeta().Name)
		}
	}
	return keys
}

// Reconcile implements Reconciler.
func (p *Pools) Reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	o, err := reconcile.GetLatest(ctx, p.pools, p.st, api.KindSandboxPool, name)
	if errors.Is(err, api.ErrNotFound) {
		p.countsMu.Lock()
		delete(p.countsWrote, name)
		p.countsMu.Unlock()
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	pool := o.(*api.SandboxPool)
	if p.sandboxes.Awaiting(func(so api.Object) bool { return api.OwnerOf(so, api.KindSandboxPool) == name }) {
		// A member this controller created or deleted is in flight: its
		// watch event counts it (and asks for this pool again).
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	// The members in no order: a pool of thousands is counted at every
	// change of one of them; what is done to some of them is ordered.
	members := make([]*api.Sandbox, 0, p.sandboxes.IndexLen(ownerIndex, name))
	p.sandboxes.RangeIn(ownerIndex, name, func(so api.Object) bool {
		members = append(members, so.(*api.Sandbox))
		return true
	})
	if pool.Metadata.DeletionTimestamp != nil {
		return p.deletePool(ctx, pool, members)
	}
	if !hasFinalizer(pool, api.FinalizerSandboxes) {
		out, err := reconcile.EnsureFinalizer(ctx, p.st, pool, api.FinalizerSandboxes)
		if err != nil {
			return reconcile.Result{}, err
		}
		pool = out.(*api.SandboxPool)
	}
	now := p.now()
	s := p.count(pool, members, now)
	if s.live > s.desired && s.unstarted > 0 {
		// Sandboxes that have not started go at once, before any
		// scaleDownDelay: they hold no desktop, and may never get one.
		left, err := p.removeUnstarted(ctx, pool, members, s.live, s.desired)
		if err != nil {
			return reconcile.Result{}, err
		}
		if len(left) < len(members) {
			members = left
			s = p.count(pool, members, now)
		}
	}
	var requeue time.Duration
	soon := func(d time.Duration) {
		if d > 0 && (requeue == 0 || d < requeue) {
			requeue = d
		}
	}

	// Replace what failed, recycle what is too old, in the order of their
	// names.
	type replacement struct {
		sb          *api.Sandbox
		unhealthy   bool
		reason, msg string
	}
	var replace []replacement
	for _, sb := range members {
		if sb.Metadata.DeletionTimestamp != nil {
			continue
		}
		reason, msg, unhealthy := "", "", false
		switch {
		case (sb.Status.Phase == api.SandboxError || sb.Status.Phase == api.SandboxTerminated) && p.heldByItsAgent(sb):
			// The attempt on it ends first (failed, or interrupted by a
			// restart of its node) and its node releases it: replaced now,
			// the agent would lose its sandbox and fail as SandboxLost
			// before its node could say what happened.
		case sb.Status.Phase == api.SandboxError || sb.Status.Phase == api.SandboxTerminated:
			reason, msg = "Replaced", fmt.Sprintf("sandbox %s is %s (%s): replacing it", sb.Metadata.Name, sb.Status.Phase, orDefault(sb.Status.Message, sb.Status.Reason))
		case sb.Status.Reason == "Unhealthy" && sb.Status.CurrentAgent == "":
			unhealthy = true
			reason, msg = "Replaced", fmt.Sprintf("sandbox %s failed its health check: replacing it", sb.Metadata.Name)
		case s.maxAge > 0 && sb.Status.CurrentAgent == "" && now.Sub(sb.Metadata.CreationTimestamp) >= s.maxAge:
			reason, msg = "Recycled", fmt.Sprintf("sandbox %s is older than maxAge (%s): replacing it", sb.Metadata.Name, pool.Spec.MaxAge)
		case s.maxAge > 0 && sb.Status.CurrentAgent == "":
			soon(sb.Metadata.CreationTimestamp.Add(s.maxAge).Sub(now))
		}
		if reason != "" {
			replace = append(replace, replacement{sb, unhealthy, reason, msg})
		}
	}
	slices.SortFunc(replace, func(a, b replacement) int { return strings.Compare(a.sb.Metadata.Name, b.sb.Metadata.Name) })
	for _, r := range replace {
		if r.unhealthy {
			reconcile.Event(ctx, p.st, p.log, pool, api.EventWarning, "Unhealthy", fmt.Sprintf("sandbox %s: %s", r.sb.Metadata.Name, r.sb.Status.Message))
		}
		if err := p.deleteMember(ctx, r.sb); err != nil {
			return reconcile.Result{}, err
		}
		reconcile.Event(ctx, p.st, p.log, pool, api.EventNormal, r.reason, r.msg)
		s.live--
	}

	// Grow, no faster than sandboxes start.
	switch {
	case s.live < s.desired && s.blocked != "":
		// Adding sandboxes would not start them either.
	case s.live < s.desired:
		n := min(s.desired-s.live, max(maxUnstarted(s.started)-s.unstarted, 0))
		if rate := pool.Spec.RefillRate; rate > 0 {
			recent := 0
			for _, sb := range members {
				if now.Sub(sb.Metadata.CreationTimestamp) < time.Second {
					recent++
				}
			}
			n = min(n, max(rate-recent, 0))
			soon(time.Second)
		}
		if err := p.createMembers(ctx, pool, n); err != nil {
			return reconcile.Result{}, err
		}
		if n > 0 {
			reconcile.Event(ctx, p.st, p.log, pool, api.EventNormal, "ScaledUp", fmt.Sprintf("created %d sandbox(es): %d of %d", n, s.live+n, s.desired))
			s.live += n
		}
	}

	// Shrink, idle sandboxes only, once the excess has lasted
	// scaleDownDelay.
	excessSince := pool.Status.ExcessSince
	if s.live > s.desired {
		if excessSince == nil {
			excessSince = &now
		}
		delay := time.Duration(pool.Spec.Scaling.ScaleDownDelay) * time.Second
		if wait := excessSince.Add(delay).Sub(now); wait > 0 {
			soon(wait)
		} else {
			removed := 0
			for _, sb := range idleFirst(members) {
				if s.live-removed <= s.desired {
					break
				}
				if err := p.deleteMember(ctx, sb); err != nil {
					return reconcile.Result{}, err
				}
				removed++
			}
			if removed > 0 {
				reconcile.Event(ctx, p.st, p.log, pool, api.EventNormal, "ScaledDown", fmt.Sprintf("removed %d idle sandbox(es): %d of %d", removed, s.live-removed, s.desired))
				s.live -= removed
			}
			if s.live > s.desired {
				soon(5 * time.Second) // the rest are busy
			}
		}
	}
	if s.live <= s.desired {
		excessSince = nil
	}
	later, err := p.writeStatus(ctx, pool, s, excessSince, now)
	soon(later)
	return reconcile.Result{RequeueAfter: requeue}, err
}

// poolState is what Reconcile counted.
type poolState struct {
	live, desired, ready, warm, busy, pendingAgents int
	// started have run (Running, Paused or Saved); unstarted wait to
	// (no phase yet, Pending or Creating), unplaceable among them for a
	// reason more sandboxes would not fix.
	started, unstarted, unplaceable int
	blocked, blockedMsg             string
	// blockedBy is the unplaceable sandbox blocked is of.
	blockedBy *api.Sandbox
	maxAge    time.Duration
}

// maxUnstarted bounds how many of a pool's sandboxes may wait to start at
// once, given how many have started: 4 (as many as a node clones at
// once), or a tenth of those started when that is more. A pool grows only
// as its sandboxes start, so a pool far larger than its hosts can hold
// stops at what they hold plus this margin, instead of filling the store
// with sandboxes that will never run.
func maxUnstarted(started int) int {
	return max(4, started/10)
}

// unstarted reports whether a sandbox waits for its VM.
func unstarted(sb *api.Sandbox) bool {
	switch sb.Status.Phase {
	case "", api.SandboxPending, api.SandboxCreating:
		return true
	}
	return false
}

// heldByItsAgent reports whether the agent sb's claim names is still bound
// to sb (scheduled or running on it, and not being deleted).
func (p *Pools) heldByItsAgent(sb *api.Sandbox) bool {
	if sb.Status.CurrentAgent == "" {
		return false
	}
	o, ok := p.agents.Get(sb.Status.CurrentAgent)
	if !ok {
		return false
	}
	a := o.(*api.Agent)
	return agentstate.Bound(a) && a.Status.Sandbox == sb.Metadata.Name && a.Metadata.DeletionTimestamp == nil
}

func (p *Pools) count(pool *api.SandboxPool, members []*api.Sandbox, now time.Time) poolState {
	var s poolState
	if d, err := time.ParseDuration(pool.Spec.MaxAge); err == nil {
		s.maxAge = d
	}
	for _, sb := range members {
		if sb.Metadata.DeletionTimestamp != nil {
			continue
		}
		s.live++
		released := sb.Status.CurrentAgent != "" && releasedIn(p.agents, sb)
		held := sb.Status.CurrentAgent != "" && !released
		if held {
			s.busy++
		}
		switch sb.Status.Phase {
		case api.SandboxRunning, api.SandboxPaused, api.SandboxSaved:
			s.started++
			if sb.Status.Healthy() {
				s.ready++
				// A sandbox its agent released is reset and paused,
				// though its status still shows that claim, Running.
				if !held && (sb.Status.Phase != api.SandboxRunning || released) {
					s.warm++
				}
			}
		case "", api.SandboxPending, api.SandboxCreating:
			s.unstarted++
			if sb.Status.Phase != api.SandboxCreating && api.Unsatisfiable(sb.Status.Reason) {
				s.unplaceable++
				if s.blocked == "" || sb.Metadata.Name < s.blockedBy.Metadata.Name {
					// The first by name says why.
					s.blocked, s.blockedBy = sb.Status.Reason, sb
				}
			}
		}
	}
	s.desired = pool.Spec.Replicas
	if t := pool.Spec.Scaling.ScaleUpThreshold; t > 0 {
		// Only a pool that scales with the queue counts it.
		labels := pool.Spec.Template.Metadata.Labels
		countPending := func(ao api.Object) bool {
			if a := ao.(*api.Agent); api.MatchLabels(a.Spec.SandboxSelector.MatchLabels, labels) {
				s.pendingAgents++
			}
			return true
		}
		p.agents.RangeIn(selectingIndex, "", countPending)
		if v := labels["pool"]; v != "" {
			p.agents.RangeIn(selectingIndex, v, countPending)
		}
		if s.pendingAgents >= t {
			s.desired += s.pendingAgents / t
		}
	}
	s.desired = max(s.desired, s.busy+pool.Spec.MinReady)
	if m := pool.Spec.Scaling.MaxReplicas; m > 0 {
		s.desired = min(s.desired, max(m, pool.Spec.Replicas))
	}
	if m := pool.Spec.MaxPerHost; m > 0 {
		// Per node: placement puts at most m on each.
		s.desired = min(s.desired, m*max(p.liveNodes(), 1))
	}
	if s.blocked != "" {
		s.blockedMsg = fmt.Sprintf("%d of %d sandboxes started; %d cannot start (%s), so no more are added; sandbox %s: %s",
			s.started, s.desired, s.unplaceable, s.blocked, s.blockedBy.Metadata.Name, s.blockedBy.Status.Message)
	}
	return s
}

// removeUnstarted brings a pool of live sandboxes towards desired by
// deleting members that have not started and no agent holds, newest
// first, and returns the members left.
func (p *Pools) removeUnstarted(ctx context.Context, pool *api.SandboxPool, members []*api.Sandbox, live, desired int) ([]*api.Sandbox, error) {
	var cands []*api.Sandbox
	for _, sb := range members {
		if sb.Metadata.DeletionTimestamp == nil && sb.Status.CurrentAgent == "" && unstarted(sb) {
			cands = append(cands, sb)
		}
	}
	slices.SortFunc(cands, newestFirst)
	gone := map[string]bool{}
	for _, sb := range cands[:min(live-desired, len(cands))] {
		if err := p.deleteMember(ctx, sb); err != nil {
			return nil, err
		}
		gone[sb.Metadata.Name] = true
	}
	if len(gone) == 0 {
		return members, nil
	}
	left := make([]*api.Sandbox, 0, len(members)-len(gone))
	for _, sb := range members {
		if !gone[sb.Metadata.Name] {
			left = append(left, sb)
		}
	}
	reconcile.Event(ctx, p.st, p.log, pool, api.EventNormal, "ScaledDown", fmt.Sprintf("removed %d sandbox(es) that had not started: %d of %d", len(gone), live-len(gone), desired))
	return left, nil
}

// idleFirst orders the members a scale-down may remove: idle ones only,
// those in the warm tier before running ones, newest first.
func idleFirst(members []*api.Sandbox) []*api.Sandbox {
	var out []*api.Sandbox
	for _, sb := range members {
		if sb.Metadata.DeletionTimestamp == nil && sb.Status.CurrentAgent == "" {
			out = append(out, sb)
		}
	}
	slices.SortFunc(out, func(a, b *api.Sandbox) int {
		ra, rb := a.Status.Phase == api.SandboxRunning, b.Status.Phase == api.SandboxRunning
		if ra != rb {
			if ra {
				return 1
			}
			return -1
		}
		return newestFirst(a, b)
	})
	return out
}

// newestFirst orders sandboxes by creation, newest first, then by name.
func newestFirst(a, b *api.Sandbox) int {
	if c := b.Metadata.CreationTimestamp.Compare(a.Metadata.CreationTimestamp); c != 0 {
		return c
	}
	return strings.Compare(a.Metadata.Name, b.Metadata.Name)
}

// createParallel bounds the members a pool creates at once: a fill of
// hundreds would otherwise wait for each creation's round trip in turn.
const createParallel = 16

// createMembers creates n members of pool, createParallel at a time, and
// returns the first error.
func (p *Pools) createMembers(ctx context.Context, pool *api.SandboxPool, n int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(createParallel)
	for range n {
		g.Go(func() error { return p.createMember(gctx, pool) })
	}
	return g.Wait()
}

func (p *Pools) createMember(ctx context.Context, pool *api.SandboxPool) error {
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = memberName(pool.Metadata.Name)
	sb.Metadata.Labels = copyMap(pool.Spec.Template.Metadata.Labels)
	sb.Metadata.Annotations = copyMap(pool.Spec.Template.Metadata.Annotations)
	sb.Metadata.OwnerReferences = []api.OwnerReference{{Kind: api.KindSandboxPool, Name: pool.Metadata.Name, UID: pool.Metadata.UID}}
	sb.Spec = api.DeepCopy(&api.Sandbox{TypeMeta: sb.TypeMeta, Spec: pool.Spec.Template.Spec}).Spec
	api.Default(sb)
	sb.Status.Phase = api.SandboxPending
	if p.place != nil {
		// Placed as it is created: one write fewer, and its node holds
		// it with the VM finalizer from the start (the node adds it
		// before it clones; the lost-node controller removes it).
		if node, done := p.place(sb); node != "" {
			defer done()
			sb.Status.Node = node
			sb.Metadata.Finalizers = []string{api.FinalizerVM}
		}
	}
	out, err := p.st.Create(ctx, sb)
	if errors.Is(err, api.ErrAlreadyExists) {
		return nil // a name taken by chance: the next round makes another
	}
	if err != nil {
		return err
	}
	p.sandboxes.Expect(out)
	return nil
}

// deleteMember deletes a sandbox and expects the deletion, so that a
// reconcile before the watch brings it does not count the sandbox or
// delete it again.
func (p *Pools) deleteMember(ctx context.Context, sb *api.Sandbox) error {
	out, deleted, err := p.st.Delete(ctx, api.KindSandbox, sb.Metadata.Name, store.DeleteOptions{})
	if errors.Is(err, api.ErrNotFound) {
		p.sandboxes.ExpectDeleted(sb)
		return nil
	}
	if err != nil {
		return err
	}
	if deleted {
		p.sandboxes.ExpectDeleted(sb)
	} else {
		p.sandboxes.Expect(out)
	}
	return nil
}

// deletePool deletes the pool's sandboxes, and lets the pool go once they
// are gone.
func (p *Pools) deletePool(ctx context.Context, pool *api.SandboxPool, members []*api.Sandbox) (reconcile.Result, error) {
	for _, sb := range members {
		if sb.Metadata.DeletionTimestamp == nil {
			if err := p.deleteMember(ctx, sb); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	// The cache may lag: ask the store whether any is left.
	left := 0
	items, _, err := p.st.List(ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, it := range items {
		if api.OwnerOf(it, api.KindSandboxPool) == pool.Metadata.Name {
			left++
		}
	}
	if left > 0 {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	return reconcile.Result{}, reconcile.RemoveFinalizer(ctx, p.st, pool, api.FinalizerSandboxes)
}

func (p *Pools) writeStatus(ctx context.Context, pool *api.SandboxPool, s poolState, excessSince *time.Time, now time.Time) (later time.Duration, err error) {
	_, err = reconcile.UpdateStatusFrom(ctx, p.st, api.KindSandboxPool, pool, func(cur *api.SandboxPool) bool {
		later = 0
		before := api.DeepCopy(cur).Status
		st := &cur.Status
		st.Replicas, st.Desired, st.Ready, st.Warm, st.Busy = s.live, s.desired, s.ready, s.warm, s.busy
		st.ExcessSince = excessSince
		st.ObservedGeneration = cur.Metadata.Generation
		gen := cur.Metadata.Generation
		if s.blocked != "" {
			api.SetCondition(&st.Conditions, api.Condition{Type: "Satisfiable", Status: api.ConditionFalse, Reason: s.blocked, Message: s.blockedMsg, ObservedGeneration: gen}, now)
		} else {
			api.SetCondition(&st.Conditions, api.Condition{Type: "Satisfiable", Status: api.ConditionTrue, Reason: "SandboxesStart", ObservedGeneration: gen}, now)
		}
		idle := s.ready - s.busy
		want := max(cur.Spec.MinReady, 1)
		if idle >= want || (s.ready >= s.desired && s.desired > 0) {
			api.SetCondition(&st.Conditions, api.Condition{Type: "Ready", Status: api.ConditionTrue, Reason: "WarmSandboxes",
				Message: fmt.Sprintf("%d of %d sandboxes ready, %d idle", s.ready, s.desired, idle), ObservedGeneration: gen}, now)
		} else {
			api.SetCondition(&st.Conditions, api.Condition{Type: "Ready", Status: api.ConditionFalse, Reason: "Warming",
				Message: fmt.Sprintf("%d of %d sandboxes ready, %d idle (minReady %d)", s.ready, s.desired, idle, cur.Spec.MinReady), ObservedGeneration: gen}, now)
		}
		changed := !reflect.DeepEqual(before, *st)
		if changed && before.Desired != s.desired && before.ObservedGeneration != 0 {
			p.log.Info("pool target changed", "pool", cur.Metadata.Name, "desired", s.desired, "pendingAgents", s.pendingAgents)
		}
		if changed && reflect.DeepEqual(countless(before), countless(*st)) {
			if wait := p.countsDue(cur.Metadata.Name, now); wait > 0 {
				later = wait
				return false
			}
		}
		if changed {
			p.countsWritten(cur.Metadata.Name, now)
		}
		return changed
	})
	if errors.Is(err, api.ErrNotFound) {
		return 0, nil
	}
	if err == nil && s.blocked != "" {
		if c := api.FindCondition(pool.Status.Conditions, "Satisfiable"); c == nil || c.Status != api.ConditionFalse || c.Reason != s.blocked {
			reconcile.Event(ctx, p.st, p.log, pool, api.EventWarning, s.blocked, s.blockedMsg)
		}
	}
	// The end of a fill is news: ScaledUp events say how it goes, this
	// says when it is done.
	if err == nil && later == 0 && s.desired > 0 && s.ready >= s.desired && pool.Status.Ready < s.desired {
		reconcile.Event(ctx, p.st, p.log, pool, api.EventNormal, "Filled", fmt.Sprintf("all %d sandboxes ready (%d idle)", s.ready, s.ready-s.busy))
	}
	return later, err
}

// countless is a pool's status without its counts and the conditions'
// messages (which quote them): what changes with every claim.
func countless(s api.SandboxPoolStatus) api.SandboxPoolStatus {
	s.Replicas, s.Ready, s.Warm, s.Busy = 0, 0, 0, 0
	s.Conditions = slices.Clone(s.Conditions)
	for i := range s.Conditions {
		s.Conditions[i].Message = ""
	}
	return s
}

// countsDue is how long until pool's counts may be written again (0: now).
func (p *Pools) countsDue(pool string, now time.Time) time.Duration {
	p.countsMu.Lock()
	defer p.countsMu.Unlock()
	return max(p.countsWrote[pool].Add(poolCountsEvery).Sub(now), 0)
}

// countsWritten records that pool's status was written at now.
func (p *Pools) countsWritten(pool string, now time.Time) {
	p.countsMu.Lock()
	defer p.countsMu.Unlock()
	p.countsWrote[pool] = now
}

// memberName is a new sandbox name for a pool: the pool's name and a
// random suffix, within a DNS label.
func memberName(pool string) string {
	const letters = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	prefix := pool
	if len(prefix) > api.MaxNameLength-6 {
		prefix = strings.TrimRight(prefix[:api.MaxNameLength-6], "-")
	}
	return prefix + "-" + string(b)
}

func hasFinalizer(o api.Object, f string) bool {
	for _, x := range o.GetMeta().Finalizers {
		if x == f {
			return true
		}
	}
	return false
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

const (
	// ReasonNodeLost is the reason of a lost node's Ready condition and
	// event, and of what the cluster does to its sandboxes and attempts.
	ReasonNodeLost = "NodeLost"
	// DefaultNodeGrace is how long a node may go without a new heartbeat
	// before it is marked lost. It must exceed the node's own fence
	// (node.DefaultFenceAfter, 20 s) plus one status interval (5 s): a
	// node that cannot write ends its attempts before the cluster runs
	// them again elsewhere.
	DefaultNodeGrace = 40 * time.Second
)

// LostNodes marks a node lost when it stops heartbeating (its Node
// object's status.lastHeartbeat stays the same for longer than the
// grace), or when its Node object is gone while sandboxes are still
// placed on it, and takes its work back: its Ready condition turns False
// (NodeLost) with a Warning event; an agent's attempt running there fails
// as NodeLost, so that its retry policy decides whether it runs again
// elsewhere (an attempt only scheduled there goes back to the queue); its
// pools' sandboxes are deleted, with the node's VM finalizer taken off, so
// that the pools refill on live nodes; a sandbox of its own is kept, in
// phase Error (NodeLost), for its node to adopt if it comes back.
//
// Silence is measured on this process's clock, from when it first saw a
// node's current heartbeat, never by comparing the node's timestamp with
// it: nodes' clocks may differ from this one. A node that comes back
// removes the VMs whose sandboxes were deleted meanwhile (the node's
// sweep).
type LostNodes struct {
	st    store.Interface
	log   *slog.Logger
	now   func() time.Time // timestamps of the writes
	grace time.Duration

	sandboxes *reconcile.Cache
	agents    *reconcile.Cache
	nodes     *reconcile.Cache

	// clock measures silence (time.Now; a fake in tests).
	clock func() time.Time

	mu   sync.Mutex // guards last
	last map[string]heard
}

// heard is the last heartbeat seen of a node and when it was first seen.
type heard struct {
	beat   time.Time // status.lastHeartbeat; zero when none
	exists bool      // the Node object exists
	at     time.Time // by clock
}

// NewLostNodes registers the lost-node controller with m. grace is how
// long a node may go without a new heartbeat (DefaultNodeGrace when 0).
// A sandbox that changes while its node is lost, or has no Node object,
// asks for that node again.
func NewLostNodes(m *reconcile.Manager, st store.Interface, log *slog.Logger, now func() time.Time, grace time.Duration) *LostNodes {
	if now == nil {
		now = time.Now
	}
	if grace <= 0 {
		grace = DefaultNodeGrace
	}
	l := &LostNodes{st: st, log: log, now: now, grace: grace, clock: time.Now,
		sandboxes: m.Cache(api.KindSandbox), agents: m.Cache(api.KindAgent), nodes: m.Cache(api.KindNode), last: map[string]heard{}}
	l.sandboxes.AddIndex(sandboxNodeIndex, func(o api.Object) []string {
		if node := o.(*api.Sandbox).Status.Node; node != "" {
			return []string{node}
		}
		return nil
	})
	m.Register(reconcile.Controller{Name: "lost-node", For: api.KindNode, Reconciler: l, Workers: 1,
		Watches: []reconcile.Watch{{Kind: api.KindSandbox, Map: l.nodeOf}}})
	return l
}

// nodeOf maps a sandbox to its node when that node is lost or has no Node
// object: the sandboxes of live nodes are none of this controller's
// business, and most changes are theirs.
func (l *LostNodes) nodeOf(o api.Object) []string {
	node := o.(*api.Sandbox).Status.Node
	if node == "" {
		return nil
	}
	if n, ok := l.nodes.Get(node); ok && !nodeLost(n.(*api.Node)) {
		return nil
	}
	return []string{node}
}

// silence records what is seen of node now and returns how long its
// heartbeat has not changed.
func (l *LostNodes) silence(node string, exists bool, beat, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.last[node]
	if !ok || h.exists != exists || !h.beat.Equal(beat) {
		h = heard{beat: beat, exists: exists, at: now}
		l.last[node] = h
	}
	return now.Sub(h.at)
}

// heard records what is seen of node (nd nil when it has no Node object)
// and returns how long its heartbeat has not changed; done when there is
// nothing to watch of it (no Node object and no sandbox on it).
func (l *LostNodes) heard(node string, nd *api.Node, owned []*api.Sandbox) (silent time.Duration, done bool) {
	if nd == nil && len(owned) == 0 {
		l.forget(node)
		return 0, true
	}
	var beat time.Time
	if nd != nil {
		beat = heartbeatOf(nd)
	}
	return l.silence(node, nd != nil, beat, l.clock()), false
}

func (l *LostNodes) forget(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, node)
}

// Reconcile implements Reconciler. A node's heartbeats are read from the
// watch cache, and from the store itself only when one seems missed for
// the whole grace: each heartbeat costs the API server no read.
func (l *LostNodes) Reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	var nd *api.Node
	if o, ok := l.nodes.Get(name); ok {
		nd = o.(*api.Node)
	}
	owned := l.sandboxesOn(name)
	silent, done := l.heard(name, nd, owned)
	if !done && silent >= l.grace {
		// The cache may lag behind the store: look there before acting.
		o, err := l.st.Get(ctx, api.KindNode, name)
		switch {
		case errors.Is(err, api.ErrNotFound):
			nd = nil
		case err != nil:
			return reconcile.Result{}, err
		default:
			nd = o.(*api.Node)
		}
		silent, done = l.heard(name, nd, owned)
	}
	if done {
		return reconcile.Result{}, nil
	}
	if silent < l.grace {
		// Asked again when the heartbeat would have been missed for the
		// whole grace; a new one (a write of the Node) asks sooner.
		return reconcile.Result{RequeueAfter: l.grace - silent}, nil
	}
	var beat time.Time
	if nd != nil {
		beat = heartbeatOf(nd)
	}
	why := fmt.Sprintf("no heartbeat from node %s for %s", name, silent.Round(time.Second))
	if nd == nil {
		why = fmt.Sprintf("node %s has no Node object (deleted) and no heartbeat for %s", name, silent.Round(time.Second))
	} else if !nodeLost(nd) {
		marked := false
		out, err := reconcile.UpdateStatus(ctx, l.st, api.KindNode, name, func(cur *api.Node) bool {
			marked = false
			if !heartbeatOf(cur).Equal(beat) {
				return false // it wrote meanwhile: not lost
			}
			marked = true
			return api.SetCondition(&cur.Status.Conditions, api.Condition{Type: "Ready", Status: api.ConditionFalse, Reason: ReasonNodeLost,
				Message: why + "; its agents' attempts fail and its pools refill on other nodes"}, l.now())
		})
		if errors.Is(err, api.ErrNotFound) {
			return reconcile.Result{RequeueAfter: time.Millisecond}, nil // deleted meanwhile: look again
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		if !marked {
			return reconcile.Result{RequeueAfter: time.Millisecond}, nil // a new heartbeat: look again
		}
		l.log.Warn("node lost", "node", name, "why", why, "sandboxes", len(owned))
		reconcile.Event(ctx, l.st, l.log, out, api.EventWarning, ReasonNodeLost, why+fmt.Sprintf("; %d sandbox(es) on it are taken back", len(owned)))
	}
	// The attempts first: a sandbox deleted under a running attempt would
	// fail it as SandboxLost, which it is not.
	if err := l.endAttempts(ctx, name, owned, why); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, l.takeBack(ctx, name, owned, why)
}

// sandboxNodeIndex holds the sandboxes by their node (status.node): a
// look at one node's heartbeat does not go over every sandbox.
const sandboxNodeIndex = "node"

// heartbeatOf is a node's last heartbeat, zero when it has none.
func heartbeatOf(n *api.Node) time.Time {
	if n.Status.LastHeartbeat == nil {
		return time.Time{}
	}
	return *n.Status.LastHeartbeat
}

// sandboxesOn lists the sandboxes placed on node, by name.
func (l *LostNodes) sandboxesOn(node string) []*api.Sandbox {
	var out []*api.Sandbox
	l.sandboxes.RangeLatestIn(sandboxNodeIndex, node, func(o api.Object) bool {
		if sb := o.(*api.Sandbox); sb.Status.Node == node {
			out = append(out, sb)
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Metadata.Name < out[j].Metadata.Name })
	return out
}

// endAttempts ends the attempts bound to the lost node's sandboxes: a
// running one fails as NodeLost (its retry policy decides whether it runs
// again); one only scheduled there goes back to the queue, as nothing of
// it ran. Each write is conditioned on the attempt read, so that an
// attempt the node ended meanwhile is left as it ended.
func (l *LostNodes) endAttempts(ctx context.Context, node string, owned []*api.Sandbox, why string) error {
	on := map[string]bool{}
	for _, sb := range owned {
		on[sb.Metadata.Name] = true
	}
	var bound []*api.Agent
	l.agents.RangeLatest(func(o api.Object) bool {
		if a := o.(*api.Agent); agentstate.Bound(a) && (a.Status.Node == node || on[a.Status.Sandbox]) {
			bound = append(bound, a)
		}
		return true
	})
	for _, a := range bound {
		sandbox, attempts, phase := a.Status.Sandbox, a.Status.Attempts, a.Status.Phase
		var msg string
		out, err := reconcile.UpdateStatus(ctx, l.st, api.KindAgent, a.Metadata.Name, func(cur *api.Agent) bool {
			if !agentstate.Bound(cur) || cur.Status.Sandbox != sandbox || cur.Status.Attempts != attempts || cur.Status.Phase != phase {
				return false
			}
			now := l.now()
			if phase == api.AgentRunning {
				msg = fmt.Sprintf("node %s was lost while it ran on sandbox %s (%s)", node, sandbox, why)
				agentstate.FailAttempt(cur, ReasonNodeLost, msg, now)
			} else {
				msg = fmt.Sprintf("node %s was lost before attempt %d started on sandbox %s (%s); it runs elsewhere", node, attempts+1, sandbox, why)
				agentstate.Interrupt(cur, msg, now)
			}
			return true
		})
		if errors.Is(err, api.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if msg != "" && out.Status.Attempts == attempts {
			reconcile.Event(ctx, l.st, l.log, out, api.EventWarning, ReasonNodeLost, out.Status.Message)
		}
	}
	return nil
}

// takeBack deletes the lost node's pool sandboxes and lets them go (the
// node holds them with its VM finalizer, and it is gone; if it comes
// back, its sweep removes their VMs), and marks its other sandboxes
// Error (NodeLost), keeping them.
func (l *LostNodes) takeBack(ctx context.Context, node string, owned []*api.Sandbox, why string) error {
	deleted := map[string]int{} // by pool
	for _, sb := range owned {
		pool := api.OwnerOf(sb, api.KindSandboxPool)
		if pool == "" && sb.Metadata.DeletionTimestamp == nil {
			if err := l.markKept(ctx, sb, node, why); err != nil {
				return err
			}
			continue
		}
		cur := api.Object(sb)
		if sb.Metadata.DeletionTimestamp == nil {
			out, gone, err := l.st.Delete(ctx, api.KindSandbox, sb.Metadata.Name, store.DeleteOptions{})
			if errors.Is(err, api.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			deleted[pool]++
			if gone {
				continue
			}
			cur = out
		}
		if err := reconcile.RemoveFinalizer(ctx, l.st, cur, api.FinalizerVM); err != nil {
			return err
		}
	}
	pools := make([]string, 0, len(deleted))
	for p := range deleted {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	for _, p := range pools {
		po, err := l.st.Get(ctx, api.KindSandboxPool, p)
		if err != nil {
			continue
		}
		reconcile.Event(ctx, l.st, l.log, po, api.EventWarning, ReasonNodeLost,
			fmt.Sprintf("deleted %d sandbox(es) of node %s (%s): the pool replaces them on other nodes", deleted[p], node, why))
	}
	return nil
}

// markKept marks a sandbox of its own on a lost node Error (NodeLost) and
// lets go of its claim (the agent's attempt ended). It stays: its disk may
// still be on that host, and its node adopts it if it comes back.
func (l *LostNodes) markKept(ctx context.Context, sb *api.Sandbox, node, why string) error {
	msg := fmt.Sprintf("%s; the sandbox is kept: its node adopts it if it comes back, else delete it", why)
	changed := false
	out, err := reconcile.UpdateStatus(ctx, l.st, api.KindSandbox, sb.Metadata.Name, func(cur *api.Sandbox) bool {
		changed = false
		if cur.Status.Node != node || cur.Metadata.DeletionTimestamp != nil || cur.Status.Phase == api.SandboxError && cur.Status.Reason == ReasonNodeLost {
			return false
		}
		cur.Status.Phase, cur.Status.Reason, cur.Status.Message, cur.Status.PID = api.SandboxError, ReasonNodeLost, msg, 0
		cur.Status.CurrentAgent, cur.Status.Claim, cur.Status.ClaimedAt = "", nil, nil
		api.SetCondition(&cur.Status.Conditions, api.Condition{Type: "Ready", Status: api.ConditionFalse, Reason: ReasonNodeLost, Message: msg,
			ObservedGeneration: cur.Metadata.Generation}, l.now())
		changed = true
		return true
	})
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if changed {
		reconcile.Event(ctx, l.st, l.log, out, api.EventWarning, ReasonNodeLost, msg)
	}
	return nil
}

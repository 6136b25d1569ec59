package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// A node that cannot write its Node object may be cut off from the
// cluster, which then marks it lost and runs its agents' attempts again
// elsewhere (the lost-node controller, after its grace). So that no
// attempt runs on two nodes, the node fences itself first: after
// FenceAfter without a successful write it ends the attempts it runs,
// writing nothing of them (they are the cluster's to fail as NodeLost),
// and starts no attempt and no acquire until a write succeeds again. The
// fence runs on a timer, not in the status loop, so that a write that
// hangs fences the node as surely as one that fails.
//
// FenceAfter and the cluster's grace (controller.DefaultNodeGrace, 40 s)
// are both measured on their own process's clock from the last heartbeat;
// the fence must come first with a status interval to spare: FenceAfter +
// StatusInterval < grace (20 s + 5 s < 40 s by default).
//
// When a write succeeds after a fence, or after the cluster marked the
// node lost, the node rejoins: it sweeps its VMs as it does at start
// (those whose sandbox is gone or another node's are removed) and
// reconciles all its sandboxes and agents again, adopting what is still
// placed on it.

// reasonNodeLost is the reason the lost-node controller gives a lost
// node's condition, sandboxes and attempts (controller.ReasonNodeLost).
const reasonNodeLost = "NodeLost"

// errFenced is the cause of the attempts a fence ends.
var errFenced = errors.New("the node fenced itself")

// fenceState is the node's fence.
type fenceState struct {
	mu     sync.Mutex // guards the following fields
	timer  *time.Timer
	fenced bool
	lastOK time.Time      // the last successful write of the Node object
	ended  map[string]int // agent → the attempt the fence ended
}

// fenceAfter is Options.FenceAfter or its default.
func (n *Node) fenceAfter() time.Duration {
	if n.opt.FenceAfter > 0 {
		return n.opt.FenceAfter
	}
	return DefaultFenceAfter
}

// armFence starts the fence's timer; Start calls it. A negative
// FenceAfter turns the fence off.
func (n *Node) armFence() {
	if n.opt.FenceAfter < 0 {
		return
	}
	n.fence.mu.Lock()
	defer n.fence.mu.Unlock()
	n.fence.lastOK = time.Now()
	n.fence.timer = time.AfterFunc(n.fenceAfter(), n.fenceNow)
}

// disarmFence stops the fence's timer; Stop calls it.
func (n *Node) disarmFence() {
	n.fence.mu.Lock()
	defer n.fence.mu.Unlock()
	if n.fence.timer != nil {
		n.fence.timer.Stop()
	}
}

// fenced reports whether the node is fenced.
func (n *Node) fenced() bool {
	n.fence.mu.Lock()
	defer n.fence.mu.Unlock()
	return n.fence.fenced
}

// fenceNow fences the node, unless a write succeeded within FenceAfter
// (the timer fired as one landed).
func (n *Node) fenceNow() {
	after := n.fenceAfter()
	n.fence.mu.Lock()
	if n.fence.fenced || time.Since(n.fence.lastOK) < after || n.runCtx.Err() != nil {
		n.fence.mu.Unlock()
		return
	}
	n.fence.fenced = true
	last := n.fence.lastOK
	n.fence.mu.Unlock()

	n.runs.mu.Lock()
	var names []string
	ended := map[string]int{}
	for name, r := range n.runs.m {
		r.fence()
		names = append(names, name)
		ended[name] = r.attempt
	}
	n.runs.mu.Unlock()
	sort.Strings(names)
	n.fence.mu.Lock()
	n.fence.ended = ended
	n.fence.mu.Unlock()
	n.log.Error("fenced: the node could not write its Node object, so the cluster will mark it lost and run its agents elsewhere; "+
		"it ends the attempts it runs without recording them and starts none until a write succeeds",
		"after", after, "lastWrite", last.UTC().Format(time.RFC3339), "attempts", names)
}

// endedByFence reports whether the fence ended agent's attempt.
func (n *Node) endedByFence(agent string, attempt int) bool {
	n.fence.mu.Lock()
	defer n.fence.mu.Unlock()
	a, ok := n.fence.ended[agent]
	return ok && a == attempt
}

// wrote records a successful write of the Node object, and rejoins the
// cluster if the node was fenced or marked lost (wasLost).
func (n *Node) wrote(ctx context.Context, wasLost bool) {
	n.fence.mu.Lock()
	wasFenced := n.fence.fenced
	n.fence.fenced = false
	n.fence.lastOK = time.Now()
	if n.fence.timer != nil {
		n.fence.timer.Reset(n.fenceAfter())
	}
	n.fence.mu.Unlock()
	if wasFenced || wasLost {
		n.rejoin(ctx, wasFenced, wasLost)
	}
}

// rejoin reconciles the node again after a fence or after the cluster
// marked it lost: VMs whose sandbox is gone or another node's go (the
// start-up sweep), and every sandbox and agent is looked at again, so
// that those still placed here continue.
func (n *Node) rejoin(ctx context.Context, wasFenced, wasLost bool) {
	why := "it had fenced itself"
	if wasLost {
		why = "the cluster had marked it lost"
	}
	n.log.Warn("the node writes its Node object again: sweeping its VMs and reconciling its sandboxes and agents", "why", why, "fenced", wasFenced, "lost", wasLost)
	if o, err := n.st.Get(ctx, api.KindNode, n.name); err == nil {
		n.event(ctx, o, api.EventNormal, "Rejoined", fmt.Sprintf("node %s writes its status again (%s): it keeps the sandboxes still placed on it and removes the VMs of the others", n.name, why))
	}
	if err := n.sweep(ctx); err != nil {
		n.log.Warn("sweep VMs on rejoin", "err", err)
	}
	for _, kq := range []struct {
		kind string
		q    *reconcile.Queue
	}{{api.KindSandbox, n.sandboxes}, {api.KindAgent, n.agentsQ}} {
		if kq.q == nil {
			continue
		}
		items, _, err := n.st.List(ctx, kq.kind, api.Selector{})
		if err != nil {
			n.log.Warn("list on rejoin", "kind", kq.kind, "err", err)
			continue
		}
		for _, it := range items {
			kq.q.Add(it.GetMeta().Name)
		}
	}
}

// sweep deletes the VMs of this host that no Sandbox object owns (a
// sandbox deleted while the node was down or cut off, an interrupted
// create) and those whose sandbox the store says another node owns. It
// touches only this node's backend, and holds each sandbox's lock while
// it decides, so that it never races a clone.
func (n *Node) sweep(ctx context.Context) error {
	vms, err := n.be.List(ctx)
	if err != nil {
		return fmt.Errorf("list VMs: %w", err)
	}
	for _, vm := range vms {
		if err := n.sweepOne(ctx, vm.ID, vm.UID, vm.State); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) sweepOne(ctx context.Context, id, uid, state string) error {
	unlock := n.locks.lock(id)
	defer unlock()
	o, err := n.st.Get(ctx, api.KindSandbox, id)
	if err == nil && (uid == "" || o.GetMeta().UID == uid) {
		owner := o.(*api.Sandbox).Status.Node
		if owner == "" || owner == n.name {
			return nil // this node's: adopted as it runs
		}
		// The store gave the sandbox to another node while this one
		// was away: the VM here is a stale copy.
		n.log.Warn("deleting a VM whose sandbox another node owns", "sandbox", id, "owner", owner)
		if err := n.be.Delete(ctx, id); err != nil {
			n.log.Error("delete a VM of another node's sandbox", "sandbox", id, "err", err)
		}
		return nil
	}
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		return err
	}
	n.log.Warn("deleting an orphaned VM", "sandbox", id, "state", state)
	if err := n.be.Delete(ctx, id); err != nil {
		n.log.Error("delete orphaned VM", "sandbox", id, "err", err)
	}
	return nil
}

package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// The tests of this file restart the node while agents run, on a host
// whose VMs did not survive (a reboot, a unit restart that killed QEMU),
// and call every reconciler themselves, in the order that would lose the
// agents' attempts if any step of the restart were out of order: an
// interrupted attempt must come back Interrupted, never Failed as
// SandboxLost.

// restartRig is a store, the fake backend and a node whose reconcilers
// the test calls; the node writes through afterWrite, which lets a test
// land other controllers' work between two writes of one reconcile.
type restartRig struct {
	t   *testing.T
	ctx context.Context
	st  *store.Store
	be  *fake.Backend
	clk *clock.Fake
	dir string
	log *slog.Logger
	hs  *afterWrite
	nd  *Node
}

// afterWrite is the store with a hook that runs once, right after the
// next status write of an object other than a Node lands (the node's
// heartbeat writes its Node object whenever its status loop runs).
type afterWrite struct {
	store.Interface
	mu   sync.Mutex // guards next
	next func()
}

func (h *afterWrite) UpdateStatus(ctx context.Context, o api.Object) (api.Object, error) {
	out, err := h.Interface.UpdateStatus(ctx, o)
	if err != nil || o.GetTypeMeta().Kind == api.KindNode {
		return out, err
	}
	h.mu.Lock()
	f := h.next
	h.next = nil
	h.mu.Unlock()
	if f != nil {
		f()
	}
	return out, nil
}

func (h *afterWrite) arm(f func()) {
	h.mu.Lock()
	h.next = f
	h.mu.Unlock()
}

func newRestartRig(t *testing.T) *restartRig {
	t.Helper()
	clk := clock.NewFake(time.Now())
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(context.Background(), dir, store.Options{Now: clk.Now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &restartRig{t: t, ctx: context.Background(), st: st, be: fake.New(fake.Options{Now: clk.Now}), clk: clk, dir: dir, log: log,
		hs: &afterWrite{Interface: st}}
	r.nd = r.newNode()
	if _, err := st.Create(r.ctx, yamlObj(t, deskTemplate)); err != nil {
		t.Fatal(err)
	}
	reconcileTemplate(t, r.nd, "desk")
	return r
}

// newNode is a node of this host, as a start of the server makes one.
func (r *restartRig) newNode() *Node {
	nd := New(Options{Store: r.hs, Backend: r.be, Name: "n1", DataDir: r.dir, Logger: r.log, DefaultTemplate: "desk", Now: r.clk.Now})
	r.t.Cleanup(nd.Stop)
	return nd
}

// controllers are the object controllers over the rig's store, with their
// caches filled from it as their watches would: new ones for each look,
// so that no cache lags.
func (r *restartRig) controllers() (*controller.Pools, *controller.Agents, *controller.Scheduler) {
	r.t.Helper()
	m := reconcile.NewManager(r.st, r.log, 0)
	p := controller.NewPools(m, r.st, r.log, r.clk.Now)
	a := controller.NewAgents(m, r.st, r.log, r.clk.Now)
	s := controller.NewScheduler(m, r.st, r.log, r.clk.Now)
	for _, kind := range []string{api.KindSandbox, api.KindAgent, api.KindSandboxPool} {
		m.Cache(kind)
	}
	if err := m.SyncCaches(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	return p, a, s
}

func (r *restartRig) names(kind string) []string {
	r.t.Helper()
	items, _, err := r.st.List(r.ctx, kind, api.Selector{})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, it := range items {
		out = append(out, it.GetMeta().Name)
	}
	return out
}

func (r *restartRig) agent(name string) *api.Agent {
	r.t.Helper()
	o, err := r.st.Get(r.ctx, api.KindAgent, name)
	if err != nil {
		r.t.Fatal(err)
	}
	return o.(*api.Agent)
}

func (r *restartRig) reconcileSandboxes() {
	r.t.Helper()
	for _, name := range r.names(api.KindSandbox) {
		if _, err := r.nd.reconcileSandbox(r.ctx, name); err != nil {
			r.t.Fatalf("reconcile sandbox %s: %v", name, err)
		}
	}
}

func (r *restartRig) reconcilePool() {
	r.t.Helper()
	p, _, _ := r.controllers()
	if _, err := p.Reconcile(r.ctx, "web"); err != nil {
		r.t.Fatal(err)
	}
}

// removeDeleted finishes the deletion of the sandboxes being deleted, as
// the node's sandbox controller does: their VMs go, then the objects.
func (r *restartRig) removeDeleted() {
	r.t.Helper()
	items, _, err := r.st.List(r.ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, it := range items {
		if it.GetMeta().DeletionTimestamp == nil {
			continue
		}
		if err := r.be.Delete(r.ctx, it.GetMeta().Name); err != nil {
			r.t.Fatal(err)
		}
		if err := reconcile.RemoveFinalizer(r.ctx, r.st, it, api.FinalizerVM); err != nil {
			r.t.Fatal(err)
		}
	}
}

// restartMidRun fills a pool of n, runs an attempt of one agent on each
// sandbox, then stops the node and loses the VMs by lose, and starts a new
// node on the same store and backend.
func (r *restartRig) restartMidRun(n int, lose func(t *testing.T, be *fake.Backend, id string)) {
	r.t.Helper()
	if _, err := r.st.Create(r.ctx, yamlObj(r.t, poolYAML("web", n, ""))); err != nil {
		r.t.Fatal(err)
	}
	r.reconcilePool()
	r.reconcileSandboxes()
	for i := 0; i < n; i++ {
		if _, err := r.st.Create(r.ctx, yamlObj(r.t, fmt.Sprintf(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: job-%d}
spec:
  sandboxSelector: {pool: web}
  task:
    steps:
    - {action: type, text: "x"}
`, i))); err != nil {
			r.t.Fatal(err)
		}
	}
	_, _, s := r.controllers()
	if _, err := s.Reconcile(r.ctx, ""); err != nil {
		r.t.Fatal(err)
	}
	// Each attempt starts as the node starts one (it marks the agent
	// Running on its claimed sandbox, then acquires the sandbox), and is
	// cut short there.
	claimed := map[string]string{} // agent -> sandbox whose claim names it
	for _, name := range r.names(api.KindSandbox) {
		if sb, _ := r.st.Get(r.ctx, api.KindSandbox, name); sb.(*api.Sandbox).Status.CurrentAgent != "" {
			claimed[sb.(*api.Sandbox).Status.CurrentAgent] = name
		}
	}
	for _, name := range r.names(api.KindAgent) {
		sandbox := claimed[name]
		if sandbox == "" {
			r.t.Fatalf("agent %s is claimed on no sandbox", name)
		}
		now := r.clk.Now()
		if _, err := reconcile.UpdateStatus(r.ctx, r.st, api.KindAgent, name, func(cur *api.Agent) bool {
			cur.Status.Phase, cur.Status.Reason = api.AgentRunning, "Running"
			cur.Status.Attempts++
			cur.Status.Sandbox = sandbox
			cur.Status.StartedAt, cur.Status.Node = &now, "n1"
			api.SetCondition(&cur.Status.Conditions, api.Condition{Type: "Running", Status: api.ConditionTrue, Reason: "Started"}, now)
			return true
		}); err != nil {
			r.t.Fatal(err)
		}
		if _, err := r.nd.acquire(r.ctx, sandbox, name); err != nil {
			r.t.Fatal(err)
		}
	}
	r.nd.Stop()
	for _, id := range r.names(api.KindSandbox) {
		lose(r.t, r.be, id)
	}
	r.nd = r.newNode()
	if err := r.nd.Start(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

// checkInterrupted checks that every agent's first attempt was put back as
// interrupted, not failed.
func (r *restartRig) checkInterrupted() {
	r.t.Helper()
	for _, name := range r.names(api.KindAgent) {
		a := r.agent(name)
		if a.Status.Phase != api.AgentPending || a.Status.Reason != "Interrupted" || a.Status.Failures != 0 {
			r.t.Errorf("agent %s after the restart: %s/%s (%s), %d failures; want Pending/Interrupted, 0 failures",
				name, a.Status.Phase, a.Status.Reason, a.Status.Message, a.Status.Failures)
		}
	}
}

// losses are the ways a host loses its VMs with the server: gone (a
// reboot that took their state too) or killed (their files stay).
var losses = []struct {
	name string
	lose func(t *testing.T, be *fake.Backend, id string)
}{
	{"VMs gone", func(t *testing.T, be *fake.Backend, id string) {
		if err := be.Delete(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}},
	{"VMs killed", func(t *testing.T, be *fake.Backend, id string) { be.Kill(id) }},
}

// TestRestartWithVMsGoneInterruptsAgents: the new node marks the
// sandboxes whose VMs are gone Error; the pool controller, then the
// node's deletion, then the agent controller look before the node looks
// at the agents (the order that failed them as SandboxLost), or the node
// looks at the agents first. Either way the agents are put back
// Interrupted, run again on fresh sandboxes, and complete with no failure
// counted.
func TestRestartWithVMsGoneInterruptsAgents(t *testing.T) {
	orders := []struct {
		name  string
		first func(r *restartRig)
	}{
		{"controllers first", func(r *restartRig) {
			r.reconcileSandboxes()
			for _, name := range r.names(api.KindSandbox) {
				if sb, _ := r.st.Get(r.ctx, api.KindSandbox, name); sb.(*api.Sandbox).Status.Phase != api.SandboxError {
					r.t.Fatalf("sandbox %s is %s after the restart, want Error", name, sb.(*api.Sandbox).Status.Phase)
				}
			}
			r.reconcilePool()
			r.reconcileSandboxes()
			_, ac, _ := r.controllers()
			for _, name := range r.names(api.KindAgent) {
				if _, err := ac.Reconcile(r.ctx, name); err != nil {
					r.t.Fatal(err)
				}
			}
			r.reconcileAgents()
		}},
		{"node's agents first", func(r *restartRig) {
			r.reconcileAgents()
			r.reconcileSandboxes()
			r.reconcilePool()
		}},
	}
	for _, tt := range losses {
		for _, order := range orders {
			t.Run(tt.name+", "+order.name, func(t *testing.T) {
				r := newRestartRig(t)
				r.restartMidRun(3, tt.lose)
				order.first(r)
				r.checkInterrupted()
				r.runAgain()
			})
		}
	}
}

// reconcileAgents is the node's look at every agent.
func (r *restartRig) reconcileAgents() {
	r.t.Helper()
	for _, name := range r.names(api.KindAgent) {
		if _, err := r.nd.reconcileAgent(r.ctx, name); err != nil {
			r.t.Fatalf("reconcile agent %s: %v", name, err)
		}
	}
}

// runAgain calls every reconciler in turn until the agents have finished,
// and checks that each completed on its second attempt, with no failure.
func (r *restartRig) runAgain() {
	t := r.t
	t.Helper()
	done := func() (bool, string) {
		var states []string
		ok := true
		for _, name := range r.names(api.KindAgent) {
			a := r.agent(name)
			states = append(states, fmt.Sprintf("%s=%s/%s", name, a.Status.Phase, a.Status.Reason))
			// The node writes an attempt's event after its outcome:
			// wait for both.
			ok = ok && agentstate.Finished(a) && len(storeEvents(t, r.st, api.KindAgent, name, "Completed", "Failed")) > 0
		}
		return ok, fmt.Sprint(states)
	}
	deadline := time.Now().Add(20 * time.Second)
	for ok, s := done(); !ok; ok, s = done() {
		if time.Now().After(deadline) {
			t.Fatalf("agents still %s", s)
		}
		p, ac, sc := r.controllers()
		if _, err := p.Reconcile(r.ctx, "web"); err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Reconcile(r.ctx, ""); err != nil {
			t.Fatal(err)
		}
		r.reconcileSandboxes()
		for _, name := range r.names(api.KindAgent) {
			if _, err := ac.Reconcile(r.ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		r.reconcileAgents()
		time.Sleep(10 * time.Millisecond) // the attempts run in the background
	}
	for _, name := range r.names(api.KindAgent) {
		a := r.agent(name)
		if got, want := fmt.Sprintf("%s %d/%d", a.Status.Phase, a.Status.Attempts, a.Status.Failures), api.AgentCompleted+" 2/0"; got != want {
			t.Errorf("agent %s: %s (attempts/failures), want %s (%s)", name, got, want, a.Status.Message)
		}
		evs := storeEvents(t, r.st, api.KindAgent, name, "Interrupted", "SandboxLost", "Failed", "Completed")
		if got, want := fmt.Sprint(evs), "[Interrupted Completed]"; got != want {
			t.Errorf("agent %s: events %s, want %s", name, got, want)
		}
	}
}

// TestRestartInterruptsBeforeReleasing lands the pool controller, the
// node's deletion of a replaced sandbox and the agent controller right
// after the first write of the node's look at an interrupted agent: the
// agent must already be put back then, or the release of its sandbox
// would let the sandbox be replaced and the attempt be failed as
// SandboxLost in between.
func TestRestartInterruptsBeforeReleasing(t *testing.T) {
	for _, tt := range losses {
		t.Run(tt.name, func(t *testing.T) {
			r := newRestartRig(t)
			r.restartMidRun(2, tt.lose)
			r.reconcileSandboxes()
			for _, name := range r.names(api.KindAgent) {
				fired := false
				r.hs.arm(func() {
					fired = true
					r.reconcilePool()
					r.removeDeleted()
					_, ac, _ := r.controllers()
					if _, err := ac.Reconcile(r.ctx, name); err != nil {
						t.Error(err)
					}
				})
				if _, err := r.nd.reconcileAgent(r.ctx, name); err != nil {
					t.Fatal(err)
				}
				if !fired {
					t.Fatalf("the node's look at agent %s wrote nothing", name)
				}
			}
			r.checkInterrupted()
			// The pool replaced the broken sandboxes once they were let go.
			r.reconcilePool()
			r.removeDeleted()
			for _, name := range r.names(api.KindSandbox) {
				o, err := r.st.Get(r.ctx, api.KindSandbox, name)
				if errors.Is(err, api.ErrNotFound) {
					continue
				}
				if sb := o.(*api.Sandbox); sb.Status.Phase == api.SandboxError || sb.Status.CurrentAgent != "" {
					t.Errorf("sandbox %s: %s, claimed by %q; want it replaced", name, sb.Status.Phase, sb.Status.CurrentAgent)
				}
			}
		})
	}
}

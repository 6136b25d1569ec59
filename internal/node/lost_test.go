package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// errPartitioned is what a cut-off node's store calls return.
var errPartitioned = errors.New("partitioned: the store cannot be reached")

// partition is the store as one node reaches it: while cut, every call
// fails and every watch ends, as when the node loses its network.
type partition struct {
	store.Interface
	mu      sync.Mutex // guards the following fields
	cut     bool
	watches map[*cutWatcher]struct{}
}

func (p *partition) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	var ws []*cutWatcher
	if cut {
		for w := range p.watches {
			ws = append(ws, w)
		}
		p.watches = nil
	}
	p.mu.Unlock()
	for _, w := range ws {
		w.end(errPartitioned)
	}
}

func (p *partition) check() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return errPartitioned
	}
	return nil
}

func (p *partition) Get(ctx context.Context, kind, name string) (api.Object, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	return p.Interface.Get(ctx, kind, name)
}

func (p *partition) List(ctx context.Context, kind string, sel api.Selector) ([]api.Object, string, error) {
	if err := p.check(); err != nil {
		return nil, "", err
	}
	return p.Interface.List(ctx, kind, sel)
}

func (p *partition) Create(ctx context.Context, o api.Object) (api.Object, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	return p.Interface.Create(ctx, o)
}

func (p *partition) Update(ctx context.Context, o api.Object) (api.Object, bool, error) {
	if err := p.check(); err != nil {
		return nil, false, err
	}
	return p.Interface.Update(ctx, o)
}

func (p *partition) UpdateStatus(ctx context.Context, o api.Object) (api.Object, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	return p.Interface.UpdateStatus(ctx, o)
}

func (p *partition) Delete(ctx context.Context, kind, name string, opts store.DeleteOptions) (api.Object, bool, error) {
	if err := p.check(); err != nil {
		return nil, false, err
	}
	return p.Interface.Delete(ctx, kind, name, opts)
}

func (p *partition) RecordEvent(ctx context.Context, o api.Object, typ, reason, msg string) error {
	if err := p.check(); err != nil {
		return err
	}
	return p.Interface.RecordEvent(ctx, o, typ, reason, msg)
}

func (p *partition) ListAndWatch(ctx context.Context, kind string, sel api.Selector) ([]api.Object, store.Watcher, error) {
	if err := p.check(); err != nil {
		return nil, nil, err
	}
	wctx, stop := context.WithCancel(ctx)
	items, w, err := p.Interface.ListAndWatch(wctx, kind, sel)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return items, p.track(w, stop), nil
}

func (p *partition) WatchFrom(ctx context.Context, kind string, sel api.Selector, rv string) (store.Watcher, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(ctx)
	w, err := p.Interface.WatchFrom(wctx, kind, sel, rv)
	if err != nil {
		stop()
		return nil, err
	}
	return p.track(w, stop), nil
}

func (p *partition) track(w store.Watcher, stop context.CancelFunc) store.Watcher {
	cw := &cutWatcher{inner: w, stop: stop, ch: make(chan store.WatchEvent), done: make(chan struct{})}
	p.mu.Lock()
	if p.watches == nil {
		p.watches = map[*cutWatcher]struct{}{}
	}
	p.watches[cw] = struct{}{}
	p.mu.Unlock()
	go cw.forward()
	return cw
}

// cutWatcher is a watch that a cut ends with errPartitioned.
type cutWatcher struct {
	inner store.Watcher
	stop  context.CancelFunc
	ch    chan store.WatchEvent
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex // guards err
	err   error
}

func (w *cutWatcher) forward() {
	defer close(w.ch)
	defer w.stop()
	for {
		select {
		case ev, ok := <-w.inner.Events():
			if !ok {
				w.mu.Lock()
				if w.err == nil {
					w.err = w.inner.Err()
				}
				w.mu.Unlock()
				return
			}
			select {
			case w.ch <- ev:
			case <-w.done:
				return
			}
		case <-w.done:
			return
		}
	}
}

func (w *cutWatcher) end(err error) {
	w.once.Do(func() {
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
		close(w.done)
	})
}

func (w *cutWatcher) Events() <-chan store.WatchEvent { return w.ch }
func (w *cutWatcher) From() string                    { return w.inner.From() }
func (w *cutWatcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Short intervals for the lost-node tests: a node writes its status every
// lostStatusInterval, fences after lostFenceAfter without a write, and the
// cluster marks it lost after lostGrace (FenceAfter + StatusInterval <
// grace, as the defaults keep it).
const (
	lostStatusInterval = 100 * time.Millisecond
	lostFenceAfter     = 1500 * time.Millisecond
	lostGrace          = 4 * time.Second
)

// lostRig is a store with the cluster's controllers on it, as on the API
// server, and nodes that each reach it through a partition of their own.
type lostRig struct {
	t     *testing.T
	ctx   context.Context
	st    store.API
	log   *slog.Logger
	nodes map[string]*lostNode
}

type lostNode struct {
	nd   *Node
	be   *fake.Backend
	part *partition
	dir  string
}

func newLostRig(t *testing.T, grace time.Duration) *lostRig {
	t.Helper()
	var st store.API
	if testStore != nil {
		st = testStore(t)
	} else {
		s, err := store.Open(context.Background(), t.TempDir(), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		st = s
	}
	var out io.Writer = io.Discard
	if testing.Verbose() {
		out = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r := &lostRig{t: t, ctx: context.Background(), st: st, log: log, nodes: map[string]*lostNode{}}
	m := reconcile.NewManager(st, log, time.Second)
	controller.Register(m, st, log, controller.Options{NodeGrace: grace})
	if err := m.Start(r.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return r
}

// startNode starts node name with a fake host of memoryMB.
func (r *lostRig) startNode(name string, memoryMB int) *lostNode {
	r.t.Helper()
	ln := &lostNode{be: fake.New(fake.Options{MemoryMB: memoryMB}), part: &partition{Interface: r.st}, dir: r.t.TempDir()}
	m := reconcile.NewManager(ln.part, r.log, time.Second)
	ln.nd = New(Options{Store: ln.part, Backend: ln.be, Name: name, DataDir: ln.dir, Logger: r.log, DefaultTemplate: "desk",
		WaitForPlacement: true, StatusInterval: lostStatusInterval, FenceAfter: lostFenceAfter})
	if err := ln.nd.Start(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	ln.nd.Register(m)
	if err := m.Start(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		ln.part.setCut(false)
		m.Stop()
		ln.nd.Stop()
	})
	r.nodes[name] = ln
	return ln
}

func (r *lostRig) create(y string) {
	r.t.Helper()
	if _, err := r.st.Create(r.ctx, yamlObj(r.t, y)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *lostRig) get(kind, name string) api.Object {
	r.t.Helper()
	o, err := r.st.Get(r.ctx, kind, name)
	if err != nil {
		r.t.Fatalf("get %s %s: %v", kind, name, err)
	}
	return o
}

// sandboxes lists the sandboxes by node.
func (r *lostRig) sandboxes() map[string][]*api.Sandbox {
	r.t.Helper()
	items, _, err := r.st.List(r.ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string][]*api.Sandbox{}
	for _, it := range items {
		sb := it.(*api.Sandbox)
		out[sb.Status.Node] = append(out[sb.Status.Node], sb)
	}
	return out
}

func readyOf(n *api.Node) string {
	c := api.FindCondition(n.Status.Conditions, ConditionReady)
	if c == nil {
		return "none"
	}
	return c.Status + "/" + c.Reason
}

// TestNodeLostAndBack runs two nodes over one store and the cluster's
// controllers. Node n2 runs a pool sandbox, a sandbox of its own and an
// agent's attempt when it is cut off from the store (nothing is deleted):
// it fences itself and ends the attempt unrecorded; after the grace the
// cluster marks it lost, fails the attempt as NodeLost, replaces the
// pool's sandbox on n1, where the agent's retry runs and completes, and
// keeps the sandbox of its own as Error. The attempt never runs on both
// nodes at once. When n2 reaches the store again it is Ready, removes
// the VM of the pool sandbox that was deleted, and adopts its own
// sandbox.
func TestNodeLostAndBack(t *testing.T) {
	r := newLostRig(t, lostGrace)
	// n2 has the most memory: the first sandboxes go there.
	n1 := r.startNode("n1", fake.DefaultMemoryMB)
	n2 := r.startNode("n2", 2*fake.DefaultMemoryMB)
	// Reported: a node's object is made a moment before its first status,
	// and the sandboxes are placed by what that status says.
	waitFor(t, 30*time.Second, 10*time.Millisecond, "both nodes report", func() (bool, string) {
		items, _, err := r.st.List(r.ctx, api.KindNode, api.Selector{})
		reported := 0
		for _, it := range items {
			if it.(*api.Node).Status.LastHeartbeat != nil {
				reported++
			}
		}
		return err == nil && reported == 2, fmt.Sprintf("%d nodes, %d reported (%v)", len(items), reported, err)
	})
	r.create(deskTemplate)
	r.create(poolYAML("web", 1, ""))
	r.create(sandboxYAML("box", ""))
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the pool's sandbox and box run on n2", func() (bool, string) {
		on := r.sandboxes()["n2"]
		ready := 0
		for _, sb := range on {
			if sb.Status.Phase == api.SandboxPaused || sb.Status.Phase == api.SandboxRunning {
				ready++
			}
		}
		return ready == 2, fmt.Sprintf("%d of %d ready on n2", ready, len(on))
	})
	var member string
	for _, sb := range r.sandboxes()["n2"] {
		if sb.Metadata.Name != "box" {
			member = sb.Metadata.Name
		}
	}

	// Never two runs of the agent at once, on either node.
	var most atomic.Int32
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			running := int32(0)
			for _, ln := range []*lostNode{n1, n2} {
				if ln.nd.runs.get("job") != nil {
					running++
				}
			}
			if running > most.Load() {
				most.Store(running)
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stopWatch); <-watched }()

	r.create(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxSelector: {pool: web}
  completion: {maxRetries: 2}
  task:
    steps:
    - {action: type, text: "a"}
    - {action: wait, duration: 3}
    - {action: type, text: "b"}
`)
	waitFor(t, 30*time.Second, 10*time.Millisecond, "the attempt runs on n2", func() (bool, string) {
		return n2.be.Typed(member) == "a", n2.be.Typed(member)
	})
	// The pool spans both nodes from now on.
	scale(t, r.st, "web", 2)
	n2.part.setCut(true)

	waitFor(t, 30*time.Second, 10*time.Millisecond, "n2 fences itself", func() (bool, string) {
		return n2.nd.fenced() && n2.nd.runs.get("job") == nil, fmt.Sprintf("fenced %v", n2.nd.fenced())
	})
	waitFor(t, 30*time.Second, 20*time.Millisecond, "n2 is marked lost", func() (bool, string) {
		n := r.get(api.KindNode, "n2").(*api.Node)
		return readyOf(n) == "False/NodeLost", readyOf(n)
	})
	if !n2.nd.fenced() {
		t.Error("n2 is marked lost and not fenced")
	}
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the agent completes on n1", func() (bool, string) {
		a := r.get(api.KindAgent, "job").(*api.Agent)
		return a.Status.Phase == api.AgentCompleted, fmt.Sprintf("%s (%s) attempt %d on %s", a.Status.Phase, a.Status.Reason, a.Status.Attempts, a.Status.Node)
	})
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the pool has two sandboxes on n1", func() (bool, string) {
		by := r.sandboxes()
		paused := 0
		for _, sb := range by["n1"] {
			if api.OwnerOf(sb, api.KindSandboxPool) == "web" && sb.Status.Phase == api.SandboxPaused && sb.Metadata.DeletionTimestamp == nil {
				paused++
			}
		}
		return paused == 2, fmt.Sprintf("%d paused on n1; by node %d/%d", paused, len(by["n1"]), len(by["n2"]))
	})
	a := r.get(api.KindAgent, "job").(*api.Agent)
	if a.Status.Attempts != 2 || a.Status.Failures != 1 || a.Status.Node != "n1" {
		t.Errorf("job: %d attempts, %d failures, last on %q; want 2, 1, n1", a.Status.Attempts, a.Status.Failures, a.Status.Node)
	}
	evs := storeEvents(t, r.st, api.KindAgent, "job")
	if count(evs, "NodeLost") != 1 || count(evs, "Started") != 2 || count(evs, "Failed") != 0 || count(evs, "Interrupted") != 0 {
		t.Errorf("job's events %v: want one NodeLost, two Started, no Failed or Interrupted (n2 wrote nothing of its attempt)", evs)
		all, _ := r.st.ListEvents(r.ctx, store.EventFilter{Kind: api.KindAgent, Name: "job"})
		for _, ev := range all {
			t.Logf("%s: %s", ev.Reason, ev.Message)
		}
	}
	if got := most.Load(); got != 1 {
		t.Errorf("at most %d runs of the agent at once, want 1", got)
	}
	if b, err := attemptLogOf(n2.nd, "job", 1); err != nil || !strings.Contains(string(b), "fenced") {
		t.Errorf("n2's log of attempt 1 does not say it fenced: %q (%v)", b, err)
	}
	if got := n2.be.Typed(member); got != "a" {
		t.Errorf("n2's sandbox was typed %q, want the fenced attempt's %q only", got, "a")
	}
	if _, err := r.st.Get(r.ctx, api.KindSandbox, member); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("n2's pool sandbox %s: %v, want it deleted", member, err)
	}
	box := r.get(api.KindSandbox, "box").(*api.Sandbox)
	if box.Status.Phase != api.SandboxError || box.Status.Reason != controller.ReasonNodeLost {
		t.Errorf("box %s (%s), want Error (NodeLost)", box.Status.Phase, box.Status.Reason)
	}
	if _, err := n2.be.Inspect(r.ctx, member); err != nil {
		t.Errorf("n2's VM of %s went while n2 was cut off: %v", member, err)
	}

	// n2 comes back.
	n2.part.setCut(false)
	waitFor(t, 30*time.Second, 20*time.Millisecond, "n2 is Ready again", func() (bool, string) {
		n := r.get(api.KindNode, "n2").(*api.Node)
		return readyOf(n) == "True/Heartbeat" && !n2.nd.fenced(), readyOf(n)
	})
	waitFor(t, 30*time.Second, 20*time.Millisecond, "n2 removes the VM of its deleted sandbox and adopts box", func() (bool, string) {
		_, err := n2.be.Inspect(r.ctx, member)
		box := r.get(api.KindSandbox, "box").(*api.Sandbox)
		return errors.Is(err, api.ErrNotFound) && box.Status.Phase == api.SandboxRunning,
			fmt.Sprintf("VM of %s: %v; box %s (%s)", member, err, box.Status.Phase, box.Status.Reason)
	})
	if vms, _ := n2.be.List(r.ctx); len(vms) != 1 {
		t.Errorf("n2 keeps %d VMs, want box's only", len(vms))
	}
	if a := r.get(api.KindAgent, "job").(*api.Agent); a.Status.Phase != api.AgentCompleted || a.Status.Attempts != 2 {
		t.Errorf("job after n2 came back: %s, %d attempts; want Completed, 2", a.Status.Phase, a.Status.Attempts)
	}
}

// scale sets a pool's replicas.
func scale(t *testing.T, st store.Interface, pool string, replicas int) {
	t.Helper()
	o, err := st.Get(context.Background(), api.KindSandboxPool, pool)
	if err != nil {
		t.Fatal(err)
	}
	p := api.DeepCopy(o.(*api.SandboxPool))
	p.Spec.Replicas = replicas
	if _, _, err := st.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// TestNodeFencesAndRejoins cuts a node off from the store for longer than
// its fence and shorter than the cluster's grace: it ends its attempt
// unrecorded and starts none while cut off; when it writes again it puts
// the attempt back (Interrupted, not a failure), and the agent runs again
// and completes. The cluster never marks the node lost.
func TestNodeFencesAndRejoins(t *testing.T) {
	r := newLostRig(t, time.Hour)
	n1 := r.startNode("n1", fake.DefaultMemoryMB)
	r.create(deskTemplate)
	r.create(poolYAML("web", 1, ""))
	r.create(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxSelector: {pool: web}
  task:
    steps:
    - {action: type, text: "a"}
    - {action: wait, duration: 3}
    - {action: type, text: "b"}
`)
	// Running on its acquired sandbox: the Started event says so (an
	// attempt cut off before it would record none).
	waitFor(t, 30*time.Second, 10*time.Millisecond, "the attempt runs", func() (bool, string) {
		a := r.get(api.KindAgent, "job").(*api.Agent)
		started := count(storeEvents(t, r.st, api.KindAgent, "job"), "Started")
		return n1.nd.runs.get("job") != nil && a.Status.Phase == api.AgentRunning && started == 1, fmt.Sprintf("%s, %d Started", a.Status.Phase, started)
	})
	n1.part.setCut(true)
	waitFor(t, 30*time.Second, 10*time.Millisecond, "n1 fences itself and ends the attempt", func() (bool, string) {
		return n1.nd.fenced() && n1.nd.runs.get("job") == nil, fmt.Sprintf("fenced %v", n1.nd.fenced())
	})
	if a := r.get(api.KindAgent, "job").(*api.Agent); a.Status.Phase != api.AgentRunning || a.Status.Attempts != 1 {
		t.Errorf("job while n1 is fenced: %s, attempt %d; want Running, 1, as the node left it", a.Status.Phase, a.Status.Attempts)
	}
	n1.part.setCut(false)
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the agent completes", func() (bool, string) {
		a := r.get(api.KindAgent, "job").(*api.Agent)
		return a.Status.Phase == api.AgentCompleted, fmt.Sprintf("%s (%s) attempt %d", a.Status.Phase, a.Status.Reason, a.Status.Attempts)
	})
	a := r.get(api.KindAgent, "job").(*api.Agent)
	if a.Status.Attempts != 2 || a.Status.Failures != 0 {
		t.Errorf("job: %d attempts, %d failures; want 2, 0", a.Status.Attempts, a.Status.Failures)
	}
	evs := storeEvents(t, r.st, api.KindAgent, "job")
	if count(evs, "Interrupted") != 1 || count(evs, "Started") != 2 || count(evs, "NodeLost") != 0 {
		t.Errorf("job's events %v: want one Interrupted, two Started, no NodeLost", evs)
	}
	if n := r.get(api.KindNode, "n1").(*api.Node); readyOf(n) != "True/Heartbeat" {
		t.Errorf("n1 Ready %s, want True/Heartbeat", readyOf(n))
	}
}

package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// directNode is a node whose reconcilers the test calls itself, with the
// desk template built.
type directNode struct {
	t   *testing.T
	ctx context.Context
	nd  *Node
	st  *store.Store
	be  *fake.Backend
	clk *clock.Fake
}

func newDirectNode(t *testing.T, clk *clock.Fake) *directNode {
	t.Helper()
	d := &directNode{t: t, ctx: context.Background(), clk: clk}
	d.nd, d.st, d.be = newNode(t, clk.Now)
	if _, err := d.st.Create(d.ctx, yamlObj(t, deskTemplate)); err != nil {
		t.Fatal(err)
	}
	reconcileTemplate(t, d.nd, "desk")
	return d
}

func (d *directNode) create(o api.Object) {
	d.t.Helper()
	if _, err := d.st.Create(d.ctx, o); err != nil {
		d.t.Fatal(err)
	}
}

func (d *directNode) reconcile(name string) reconcile.Result {
	d.t.Helper()
	res, err := d.nd.reconcileSandbox(d.ctx, name)
	if err != nil {
		d.t.Fatalf("reconcile sandbox %s: %v", name, err)
	}
	return res
}

func (d *directNode) sandbox(name string) *api.Sandbox {
	d.t.Helper()
	o, err := d.st.Get(d.ctx, api.KindSandbox, name)
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	if err != nil {
		d.t.Fatal(err)
	}
	return o.(*api.Sandbox)
}

func sandboxYAML(name, spec string) string {
	return fmt.Sprintf("apiVersion: hvkube/v1\nkind: Sandbox\nmetadata: {name: %s}\nspec:\n%s", name, spec)
}

func TestSandboxLifecycle(t *testing.T) {
	tests := []struct {
		name   string
		spec   string
		busy   bool
		reason string        // of the event that ends it; "" if it stays
		after  time.Duration // when it ends, counted from its start
	}{
		{"timeoutMinutes", "  lifecycle: {timeoutMinutes: 5}\n", false, "Expired", 5 * time.Minute},
		{"timeoutMinutes ends a busy one too", "  lifecycle: {timeoutMinutes: 5}\n", true, "Expired", 5 * time.Minute},
		{"idleTimeoutMinutes", "  lifecycle: {idleTimeoutMinutes: 10}\n", false, "IdleTimeout", 10 * time.Minute},
		{"idleTimeoutMinutes spares a busy one", "  lifecycle: {idleTimeoutMinutes: 10}\n", true, "", 0},
		{"no lifecycle", "  templateRef: desk\n", false, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The node stamps a new sandbox's start with the wall clock
			// (see TestSandboxTimesFollowTheNodeClock): start the test
			// clock there.
			d := newDirectNode(t, clock.NewFake(time.Now()))
			d.create(yamlObj(t, sandboxYAML("box", tt.spec)))
			d.reconcile("box")
			sb := d.sandbox("box")
			if got, want := sb.Status.Phase, api.SandboxRunning; got != want {
				t.Fatalf("phase %s, want %s (%s)", got, want, sb.Status.Message)
			}
			if tt.busy {
				a := yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxName: box
  type: mcp-agent
  completion: {timeoutMinutes: 1000}
`).(*api.Agent)
				now := d.clk.Now()
				a.Status.Phase, a.Status.Sandbox, a.Status.StartedAt, a.Status.Attempts = api.AgentRunning, "box", &now, 1
				d.create(a)
				if err := d.nd.updateStatus(d.ctx, sb, func(s *api.SandboxStatus) { s.CurrentAgent, s.ClaimedAt = "job", &now }); err != nil {
					t.Fatal(err)
				}
			}

			// A second short of the end (a little more: the start is
			// stamped just after the clock's), it stays, and the node
			// looks again soon enough.
			d.clk.Advance(tt.after - time.Second)
			res := d.reconcile("box")
			if sb := d.sandbox("box"); sb == nil || sb.Metadata.DeletionTimestamp != nil {
				t.Fatal("deleted before its time")
			}
			if tt.reason != "" && (res.RequeueAfter <= 0 || res.RequeueAfter > 2*time.Second) {
				t.Errorf("requeue after %s, want by the end of its lifetime", res.RequeueAfter)
			}

			d.clk.Advance(2 * time.Second)
			d.reconcile("box")
			if tt.reason == "" {
				d.clk.Advance(24 * time.Hour)
				d.reconcile("box")
				if sb := d.sandbox("box"); sb == nil || sb.Metadata.DeletionTimestamp != nil {
					t.Fatal("deleted, want it kept")
				}
				return
			}
			if got := count(storeEvents(t, d.st, api.KindSandbox, "box"), tt.reason); got != 1 {
				t.Errorf("%d %s events, want 1", got, tt.reason)
			}
			// The node holds the object until the VM is gone.
			d.reconcile("box")
			if sb := d.sandbox("box"); sb != nil {
				t.Fatalf("still there: phase %s, deletionTimestamp %v", sb.Status.Phase, sb.Metadata.DeletionTimestamp)
			}
			if _, err := d.be.Inspect(d.ctx, "box"); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("the VM is still there: %v", err)
			}
		})
	}
}

// TestSandboxIdleCountsFromRelease releases a busy sandbox: its idle
// time starts then, not when it started.
func TestSandboxIdleCountsFromRelease(t *testing.T) {
	d := newDirectNode(t, clock.NewFake(time.Now()))
	d.create(yamlObj(t, sandboxYAML("box", "  lifecycle: {idleTimeoutMinutes: 10}\n")))
	d.reconcile("box")
	// An agent that is gone holds the claim: the node releases it.
	if err := d.nd.updateStatus(d.ctx, d.sandbox("box"), func(s *api.SandboxStatus) { s.CurrentAgent = "gone" }); err != nil {
		t.Fatal(err)
	}
	d.clk.Advance(time.Hour)
	d.reconcile("box")
	sb := d.sandbox("box")
	if sb == nil || sb.Metadata.DeletionTimestamp != nil {
		t.Fatal("deleted while claimed")
	}
	if sb.Status.CurrentAgent != "" || sb.Status.ReleasedAt == nil {
		t.Fatalf("claim %q, releasedAt %v: the stale claim was not released", sb.Status.CurrentAgent, sb.Status.ReleasedAt)
	}
	d.clk.Advance(9 * time.Minute)
	d.reconcile("box")
	if sb := d.sandbox("box"); sb == nil || sb.Metadata.DeletionTimestamp != nil {
		t.Fatal("deleted 9 minutes after its release")
	}
	d.clk.Advance(time.Minute)
	d.reconcile("box")
	if sb := d.sandbox("box"); sb == nil || sb.Metadata.DeletionTimestamp == nil {
		t.Fatal("not deleted 10 minutes after its release")
	}
}

// TestSandboxTimesFollowTheNodeClock runs a node whose clock is far from
// the wall clock: lifecycle.timeoutMinutes must count on the node's
// clock, from the start the node recorded.
func TestSandboxTimesFollowTheNodeClock(t *testing.T) {
	d := newDirectNode(t, clock.NewFake(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)))
	d.create(yamlObj(t, sandboxYAML("box", "  lifecycle: {timeoutMinutes: 5}\n")))
	d.reconcile("box")
	if sb := d.sandbox("box"); sb.Status.StartedAt == nil || !sb.Status.StartedAt.Equal(d.clk.Now()) {
		t.Errorf("startedAt %v, want the node's clock %v", sb.Status.StartedAt, d.clk.Now())
	}
	d.clk.Advance(5 * time.Minute)
	d.reconcile("box")
	if sb := d.sandbox("box"); sb == nil || sb.Metadata.DeletionTimestamp == nil {
		t.Fatal("not deleted after lifecycle.timeoutMinutes on the node's clock")
	}
}

func TestSandboxCannotStart(t *testing.T) {
	tests := []struct {
		name   string
		spec   string
		fail   error // of the backend's create
		phase  string
		reason string
	}{
		{"gpu", "  resources: {gpu: true}\n", nil, api.SandboxPending, "NoGPU"},
		{"no template", "  templateRef: nowhere\n", nil, api.SandboxPending, "TemplateNotFound"},
		{"host memory", "  templateRef: desk\n", fmt.Errorf("not enough host memory: %w", api.ErrUnavailable), api.SandboxPending, "InsufficientMemory"},
		{"writable volume", "  volumes: [{name: data, hostPath: /srv/data, sandboxPath: /data}]\n", nil, api.SandboxError, "Unsupported"},
		{"backend refuses", "  templateRef: desk\n", fmt.Errorf("bad resolution: %w", api.ErrInvalid), api.SandboxError, "Unsupported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDirectNode(t, clock.NewFake(time.Now()))
			if tt.fail != nil {
				d.be.FailNext(fake.OpCreate, "box", tt.fail)
			}
			o := yamlObj(t, sandboxYAML("box", tt.spec))
			d.create(o)
			d.reconcile("box")
			sb := d.sandbox("box")
			if got, want := sb.Status.Phase+"/"+sb.Status.Reason, tt.phase+"/"+tt.reason; got != want {
				t.Errorf("phase/reason %s, want %s (%s)", got, want, sb.Status.Message)
			}
			if sb.Status.Message == "" {
				t.Error("no message says why")
			}
			events := count(storeEvents(t, d.st, api.KindSandbox, "box"), tt.reason)
			if events == 0 {
				t.Errorf("no %s event", tt.reason)
			}
			// Looking again at what only a change can fix says nothing new.
			if tt.fail == nil {
				d.reconcile("box")
				if got := count(storeEvents(t, d.st, api.KindSandbox, "box"), tt.reason); got != events {
					t.Errorf("%d %s events after a second look, want %d", got, tt.reason, events)
				}
			}
			if _, err := d.be.Inspect(d.ctx, "box"); !errors.Is(err, api.ErrNotFound) && tt.fail == nil {
				t.Errorf("a VM exists for a sandbox that cannot start: %v", err)
			}
		})
	}
}

func TestSandboxStartAndDelete(t *testing.T) {
	c := newCluster(t)
	c.create(t, yamlObj(t, sandboxYAML("box", "  templateRef: desk\n")))
	eventually(t, "sandbox runs", func() (bool, string) {
		sb := c.sandbox(t, "box")
		return sb.Status.Phase == api.SandboxRunning, sb.Status.Phase + "/" + sb.Status.Reason
	})
	sb := c.sandbox(t, "box")
	if !slices.Contains(sb.Metadata.Finalizers, api.FinalizerVM) {
		t.Errorf("finalizers %v, want %s", sb.Metadata.Finalizers, api.FinalizerVM)
	}
	if got, want := sb.Status.Node, "n1"; got != want {
		t.Errorf("node %q, want %q", got, want)
	}
	if sb.Status.StartedAt == nil || sb.Status.ReadyAt == nil || sb.Status.BackendID == "" {
		t.Errorf("startedAt %v, readyAt %v, backendID %q: not recorded", sb.Status.StartedAt, sb.Status.ReadyAt, sb.Status.BackendID)
	}
	info, err := c.be.Inspect(context.Background(), "box")
	if err != nil || info.State != backend.StateRunning {
		t.Errorf("VM %+v, %v; want running", info, err)
	}
	if got := count(c.events(t, api.KindSandbox, "box"), "Started"); got != 1 {
		t.Errorf("%d Started events, want 1", got)
	}

	if _, _, err := c.st.Delete(context.Background(), api.KindSandbox, "box", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitGone(t, api.KindSandbox, "box")
	if _, err := c.be.Inspect(context.Background(), "box"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("VM after deletion: %v, want not found", err)
	}
}

// TestSandboxVMGone kills the VM of a pool's sandbox behind the node's
// back: the sandbox is Error (VMGone) and the pool replaces it.
func TestSandboxVMGone(t *testing.T) {
	c := newCluster(t)
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: SandboxPool
metadata: {name: web}
spec:
  replicas: 1
  template:
    spec: {templateRef: desk}
`))
	first := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	c.be.Kill(first)
	eventually(t, "the pool replaces the sandbox whose VM is gone", func() (bool, string) {
		m := c.members(t, "web")
		return len(m) == 1 && m[0].Metadata.Name != first && m[0].Status.Phase == api.SandboxPaused, fmt.Sprint(c.events(t, api.KindSandboxPool, "web"))
	})
	if got := count(c.events(t, api.KindSandbox, first), "VMGone"); got < 1 {
		t.Errorf("no VMGone event for %s", first)
	}
	if got := count(c.events(t, api.KindSandboxPool, "web"), "Replaced"); got < 1 {
		t.Error("no Replaced event")
	}
	if got, want := c.waitEvents(t, api.KindSandboxPool, "web", "ScaledUp", 2), 2; got != want {
		t.Errorf("%d ScaledUp events, want %d (the first fill and the replacement)", got, want)
	}
	c.waitGone(t, api.KindSandbox, first)
	if _, err := c.be.Inspect(context.Background(), first); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("the dead VM was not cleaned up: %v", err)
	}
}

// TestSandboxHealthCheck runs a sandbox whose health check fails, then
// passes: it is marked Unhealthy, then Healthy again, with events.
func TestSandboxHealthCheck(t *testing.T) {
	var healthy atomic.Bool
	c := newClusterWith(t, clusterOptions{fake: fake.Options{Exec: func(id string, fs fake.FS, req backend.ExecRequest) (backend.ExecResult, error) {
		if req.Path == "pgrep" {
			if healthy.Load() {
				return backend.ExecResult{Stdout: []byte("4242\n")}, nil
			}
			return backend.ExecResult{ExitCode: 1}, nil
		}
		return guestShell(id, fs, req)
	}}})
	c.create(t, yamlObj(t, sandboxYAML("box", "  healthCheck: {type: process, processName: xterm, intervalSeconds: 1}\n")))
	eventually(t, "sandbox is unhealthy", func() (bool, string) {
		sb := c.sandbox(t, "box")
		return sb.Status.Phase == api.SandboxRunning && sb.Status.Reason == "Unhealthy", sb.Status.Phase + "/" + sb.Status.Reason
	})
	healthy.Store(true)
	eventually(t, "sandbox is healthy again", func() (bool, string) {
		sb := c.sandbox(t, "box")
		return sb.Status.Reason == "Healthy", sb.Status.Phase + "/" + sb.Status.Reason
	})
	evs := c.events(t, api.KindSandbox, "box", "Unhealthy", "Healthy")
	if got, want := fmt.Sprint(evs), "[Unhealthy Healthy]"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if sb := c.sandbox(t, "box"); sb.Status.LastHeartbeat == nil {
		t.Error("no heartbeat recorded while healthy")
	}
}

// TestPoolReplacesUnhealthyIdleSandbox resumes a pool's idle sandbox
// whose health check fails: the pool replaces it.
func TestPoolReplacesUnhealthyIdleSandbox(t *testing.T) {
	c := newCluster(t)
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: SandboxPool
metadata: {name: web}
spec:
  replicas: 1
  template:
    spec:
      templateRef: desk
      healthCheck: {type: process, processName: xterm, intervalSeconds: 1}
`))
	first := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	if err := c.nd.Resume(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool replaces the unhealthy sandbox", func() (bool, string) {
		m := c.members(t, "web")
		return len(m) == 1 && m[0].Metadata.Name != first, fmt.Sprint(c.events(t, api.KindSandboxPool, "web"))
	})
	evs := c.events(t, api.KindSandboxPool, "web", "Unhealthy", "Replaced")
	if len(evs) < 2 || evs[0] != "Unhealthy" || evs[1] != "Replaced" {
		t.Errorf("pool events %s, want Unhealthy, then Replaced", evs)
	}
	// One replacement, however many times the pool looked.
	if got, want := c.waitEvents(t, api.KindSandboxPool, "web", "ScaledUp", 2), 2; got != want {
		t.Errorf("%d ScaledUp events, want %d (the first fill and the replacement)", got, want)
	}
}

// TestSandboxStaleClaimReleased leaves a claim naming an agent that does
// not exist (a lost write): the node releases it.
func TestSandboxStaleClaimReleased(t *testing.T) {
	c := newCluster(t)
	c.create(t, yamlObj(t, sandboxYAML("box", "  templateRef: desk\n")))
	eventually(t, "sandbox runs", func() (bool, string) {
		sb := c.sandbox(t, "box")
		return sb.Status.Phase == api.SandboxRunning, sb.Status.Phase
	})
	if _, err := reconcile.UpdateStatus(context.Background(), c.st, api.KindSandbox, "box", func(sb *api.Sandbox) bool {
		sb.Status.CurrentAgent = "ghost"
		return true
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stale claim is released", func() (bool, string) {
		sb := c.sandbox(t, "box")
		return sb.Status.CurrentAgent == "" && sb.Status.ReleasedAt != nil, sb.Status.CurrentAgent
	})
	if got := c.sandbox(t, "box").Status.Phase; got != api.SandboxRunning {
		t.Errorf("phase %s, want Running: a sandbox of its own stays as it was", got)
	}
}

// TestNodeStartDeletesOrphans starts a node over a backend with a VM that
// no sandbox owns: it is deleted; a VM that one does stays.
func TestNodeStartDeletesOrphans(t *testing.T) {
	c := newCluster(t)
	c.create(t, yamlObj(t, sandboxYAML("box", "  templateRef: desk\n")))
	eventually(t, "sandbox runs", func() (bool, string) {
		sb := c.sandbox(t, "box")
		return sb.Status.Phase == api.SandboxRunning, sb.Status.Phase
	})
	ctx := context.Background()
	tpl, err := c.st.Get(ctx, api.KindTemplate, "desk")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.be.Create(ctx, backend.SandboxSpec{ID: "orphan", TemplateID: tpl.(*api.Template).Status.Snapshot.ID}); err != nil {
		t.Fatal(err)
	}
	c.restart(t)
	if _, err := c.be.Inspect(ctx, "orphan"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("orphaned VM after a start: %v, want deleted", err)
	}
	if _, err := c.be.Inspect(ctx, "box"); err != nil {
		t.Errorf("the sandbox's VM after a start: %v, want kept", err)
	}
}

// jobOnBoxYAML is an mcp-agent, job, that may take only sandbox box.
const jobOnBoxYAML = `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxName: box
  type: mcp-agent
`

// TestSandboxClaimLeftByACrash leaves a claim whose agent never pointed
// back at the sandbox (a crash between the scheduler's two writes): the
// node releases it once the scheduler's grace has passed, not before.
func TestSandboxClaimLeftByACrash(t *testing.T) {
	d := newDirectNode(t, clock.NewFake(time.Now()))
	d.create(yamlObj(t, sandboxYAML("box", "  templateRef: desk\n")))
	d.reconcile("box")
	d.create(yamlObj(t, jobOnBoxYAML))
	now := d.clk.Now()
	if err := d.nd.updateStatus(d.ctx, d.sandbox("box"), func(s *api.SandboxStatus) { s.CurrentAgent, s.ClaimedAt = "job", &now }); err != nil {
		t.Fatal(err)
	}
	d.clk.Advance(10 * time.Second)
	d.reconcile("box")
	if got := d.sandbox("box").Status.CurrentAgent; got != "job" {
		t.Fatalf("claim %q within the grace, want it kept for the agent's write", got)
	}
	d.clk.Advance(30 * time.Second)
	d.reconcile("box")
	if got := d.sandbox("box").Status.CurrentAgent; got != "" {
		t.Fatalf("claim %q past the grace, want it released", got)
	}
}

func TestEphemeralSandboxDestroyedAfterItsAgent(t *testing.T) {
	c := newCluster(t)
	c.create(t, yamlObj(t, sandboxYAML("box", "  templateRef: desk\n  lifecycle: {ephemeral: true}\n")))
	eventually(t, "sandbox box runs", func() (bool, string) {
		sb := c.sandbox(t, "box")
		return sb.Status.Phase == api.SandboxRunning, sb.Status.Phase
	})
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxName: box
  task:
    steps:
    - {action: type, text: "x"}
`))
	c.waitAgent(t, "job", api.AgentCompleted)
	c.waitGone(t, api.KindSandbox, "box")
	if _, err := c.be.Inspect(context.Background(), "box"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("the ephemeral sandbox's VM: %v, want gone", err)
	}
	// Released once, however many times the release is reached while
	// the sandbox goes (the attempt's end, the agent's, the sandbox's).
	if evs := storeEvents(t, c.st, api.KindSandbox, "box", "Released"); len(evs) != 1 {
		t.Errorf("Released events of box: %d, want 1", len(evs))
	}
}

// TestPoolUnsatisfiableOnTheNode runs a pool on a host with memory for one
// sandbox: the others stay Pending (InsufficientMemory), the pool says it
// cannot be satisfied, and it creates no more sandboxes.
func TestPoolUnsatisfiableOnTheNode(t *testing.T) {
	// 80% of 1000 MB: one clone of 512 MB fits, two do not.
	c := newClusterWith(t, clusterOptions{fake: fake.Options{MemoryMB: 1000}})
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: SandboxPool
metadata: {name: web}
spec:
  replicas: 3
  template:
    spec: {templateRef: desk}
`))
	eventually(t, "the pool is unsatisfiable", func() (bool, string) {
		o, err := c.st.Get(context.Background(), api.KindSandboxPool, "web")
		if err != nil {
			return false, err.Error()
		}
		cond := api.FindCondition(o.(*api.SandboxPool).Status.Conditions, "Satisfiable")
		return cond != nil && cond.Status == api.ConditionFalse && cond.Reason == "InsufficientMemory", fmt.Sprintf("%+v", cond)
	})
	c.waitEvents(t, api.KindSandboxPool, "web", "InsufficientMemory", 1)
	// The pool turns unsatisfiable at the first refusal; a second clone
	// may still be in flight then, and is refused in turn.
	eventually(t, "one sandbox runs and two wait for memory", func() (bool, string) {
		phases := map[string]int{}
		for _, sb := range c.members(t, "web") {
			phases[sb.Status.Phase+"/"+sb.Status.Reason]++
		}
		got := fmt.Sprint(phases)
		return got == "map[Paused/Started:1 Pending/InsufficientMemory:2]", got
	})
	// Over a few resyncs, the pool adds nothing.
	time.Sleep(2 * time.Second)
	if got, want := len(c.members(t, "web")), 3; got != want {
		t.Errorf("%d sandboxes, want %d", got, want)
	}
	evs := c.events(t, api.KindSandboxPool, "web")
	if got, want := count(evs, "ScaledUp"), 1; got != want {
		t.Errorf("%d ScaledUp events, want %d", got, want)
	}
	if got, want := count(evs, "InsufficientMemory"), 1; got != want {
		t.Errorf("%d InsufficientMemory events on the pool, want %d", got, want)
	}
}

// TestSandboxNoMemoryRetryWritesNothing retries the clone of a sandbox
// the host has no memory for: a retry that fails as the last one did
// leaves the sandbox Pending and writes nothing (a write would wake the
// sandbox's own controller at once, and it would retry without end).
func TestSandboxNoMemoryRetryWritesNothing(t *testing.T) {
	d := newDirectNode(t, clock.NewFake(time.Now()))
	d.create(yamlObj(t, sandboxYAML("box", "  templateRef: desk\n")))
	noMemory := fmt.Errorf("not enough host memory: %w", api.ErrUnavailable)
	var rv string
	for i := 0; i < 3; i++ {
		d.be.FailNext(fake.OpCreate, "box", noMemory)
		res := d.reconcile("box")
		sb := d.sandbox("box")
		if got, want := sb.Status.Phase+"/"+sb.Status.Reason, "Pending/InsufficientMemory"; got != want {
			t.Fatalf("try %d: phase/reason %s, want %s", i+1, got, want)
		}
		if res.RequeueAfter <= 0 {
			t.Errorf("try %d: requeue after %s, want a later retry", i+1, res.RequeueAfter)
		}
		if i > 0 && sb.Metadata.ResourceVersion != rv {
			t.Errorf("try %d: the sandbox was written again (rv %s -> %s)", i+1, rv, sb.Metadata.ResourceVersion)
		}
		rv = sb.Metadata.ResourceVersion
	}
}

// TestClaimMakesAWarmSandboxRunning: a claim of a paused sandbox makes it
// Running (agentstate.Claim); a health check before the node resumes it
// leaves that alone, and the resume from memory writes nothing more of
// it. The release resets it to Paused.
func TestClaimMakesAWarmSandboxRunning(t *testing.T) {
	d := newDirectNode(t, clock.NewFake(time.Now()))
	d.claimPausedBox()
	claimed := d.sandbox("box")
	if s := claimed.Status; s.Phase != api.SandboxRunning || s.Reason != agentstate.ReasonClaimed || s.CurrentAgent != "job" {
		t.Fatalf("claimed sandbox %s/%s for %q, want Running/%s for job", s.Phase, s.Reason, s.CurrentAgent, agentstate.ReasonClaimed)
	}
	if c := api.FindCondition(claimed.Status.Conditions, "Ready"); c == nil || c.Reason != api.SandboxRunning {
		t.Errorf("Ready condition %+v, want reason Running", c)
	}

	d.reconcile("box") // a health check: the VM is still paused
	if got := d.sandbox("box"); got.Metadata.ResourceVersion != claimed.Metadata.ResourceVersion {
		t.Errorf("a health check before the resume wrote the sandbox: %s/%s", got.Status.Phase, got.Status.Reason)
	}
	if _, err := d.nd.acquire(d.ctx, "box", "job"); err != nil {
		t.Fatal(err)
	}
	if info, _ := d.be.Inspect(d.ctx, "box"); info.State != backend.StateRunning {
		t.Fatalf("VM %s after the acquire, want running", info.State)
	}
	d.reconcile("box")
	if got := d.sandbox("box"); got.Metadata.ResourceVersion != claimed.Metadata.ResourceVersion {
		t.Errorf("the resume from memory wrote the sandbox: %s/%s %q", got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
	if err := d.nd.release(d.ctx, "box", "job"); err != nil {
		t.Fatal(err)
	}
	if s := d.sandbox("box").Status; s.CurrentAgent != "" || s.Phase != api.SandboxRunning {
		// A sandbox of its own stays as its agent left it.
		t.Errorf("released: %s for %q, want Running for nobody", s.Phase, s.CurrentAgent)
	}
}

// TestNodeStartsTheAgentItsClaimNames: the node starts the attempt a claim
// names with one write of the agent conditioned on the version the claim
// recorded, and no read: an agent written since (labelled) is read once
// and started from its version; a claim whose agent was deleted or whose
// spec changed is let go of unused, the sandbox as the claim found it (no
// reset).
func TestNodeStartsTheAgentItsClaimNames(t *testing.T) {
	for _, tt := range []struct {
		name    string
		between func(t *testing.T, d *directNode) // after the claim, before the node looks
		started bool
	}{
		{"as claimed", nil, true},
		{"labelled since", func(t *testing.T, d *directNode) {
			a := d.agent("job")
			a.Metadata.Labels = map[string]string{"team": "x"}
			if _, _, err := d.st.Update(d.ctx, a); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"spec changed since", func(t *testing.T, d *directNode) {
			a := d.agent("job")
			a.Spec.Completion.TimeoutMinutes = 7
			if _, _, err := d.st.Update(d.ctx, a); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"deleted since", func(t *testing.T, d *directNode) {
			if _, _, err := d.st.Delete(d.ctx, api.KindAgent, "job", store.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDirectNode(t, clock.NewFake(time.Now()))
			d.claimPausedBox()
			if tt.between != nil {
				tt.between(t, d)
			}
			resets := d.be.Count(fake.OpReset)
			if _, err := d.nd.reconcileAgent(d.ctx, "job"); err != nil {
				t.Fatal(err)
			}
			sb := d.sandbox("box")
			if !tt.started {
				if o, err := d.st.Get(d.ctx, api.KindAgent, "job"); err == nil && o.(*api.Agent).Status.Phase != "" {
					t.Errorf("agent %s, want it not started", o.(*api.Agent).Status.Phase)
				}
				if s := sb.Status; s.CurrentAgent != "" || s.Claim != nil || s.Phase != api.SandboxPaused {
					t.Errorf("sandbox %s for %q (claim %+v), want Paused for nobody: the claim let go of", s.Phase, s.CurrentAgent, s.Claim)
				}
				if got := d.be.Count(fake.OpReset); got != resets {
					t.Errorf("%d resets of a sandbox no attempt ran on, want none", got-resets)
				}
				return
			}
			a := d.agent("job")
			if s := a.Status; s.Phase != api.AgentRunning || s.Sandbox != "box" || s.Node != d.nd.Name() || s.Attempts != 1 || s.StartedAt == nil {
				t.Fatalf("agent after the node's look: %+v, want Running on box, attempt 1", s)
			}
			if sb.Status.CurrentAgent != "job" {
				t.Errorf("the claim went: %q", sb.Status.CurrentAgent)
			}
			if d.nd.stopRun("job") {
				t.Fatal("the run did not end")
			}
		})
	}
}

// claimPausedBox makes sandbox box, pauses it, and claims it for agent job
// (jobOnBoxYAML) as the scheduler does.
func (d *directNode) claimPausedBox() {
	d.t.Helper()
	d.create(yamlObj(d.t, sandboxYAML("box", "  templateRef: desk\n")))
	d.reconcile("box")
	if err := d.nd.Pause(d.ctx, "box"); err != nil {
		d.t.Fatal(err)
	}
	d.create(yamlObj(d.t, jobOnBoxYAML))
	if _, err := d.st.UpdateStatus(d.ctx, agentstate.Claim(d.sandbox("box"), d.agent("job"), d.clk.Now())); err != nil {
		d.t.Fatal(err)
	}
}

func (d *directNode) agent(name string) *api.Agent {
	d.t.Helper()
	o, err := d.st.Get(d.ctx, api.KindAgent, name)
	if err != nil {
		d.t.Fatal(err)
	}
	return o.(*api.Agent)
}

// TestDeferred: a deferred call stopped before its time is never made; one
// stopped after it began is waited for and reported made.
func TestDeferred(t *testing.T) {
	var calls atomic.Int32
	x := after(time.Hour, func() { calls.Add(1) })
	if made := x.stop(); made || calls.Load() != 0 {
		t.Errorf("stopped before its time: made %v, calls %d", made, calls.Load())
	}
	began := make(chan struct{})
	x = after(time.Millisecond, func() {
		close(began)
		time.Sleep(50 * time.Millisecond)
		calls.Add(1)
	})
	<-began
	if !x.stop() || calls.Load() != 1 {
		t.Errorf("stopped after it began: the call had not returned (calls %d)", calls.Load())
	}
	var none *deferred
	if none.stop() {
		t.Error("a nil deferred reported a call")
	}
}

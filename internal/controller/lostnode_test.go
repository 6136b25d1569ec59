package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// lostEnv is an env with the lost-node controller, whose silence clock is
// the env's fake clock, and a cluster of two nodes: n1, which the cases
// silence, and n2, which stays.
type lostEnv struct {
	*env
	l *LostNodes
}

const testGrace = 40 * time.Second

func newLostEnv(t *testing.T) *lostEnv {
	e := &lostEnv{env: newEnv(t)}
	e.l = NewLostNodes(e.m, e.st, e.log, e.clk.Now, testGrace)
	e.l.clock = e.clk.Now
	for _, name := range []string{"n1", "n2"} {
		nd := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindNode}}
		nd.Metadata.Name = name
		e.create(nd)
		e.beat(name)
	}
	pool := e.create(newPool(t, "web", func(p *api.SandboxPool) { p.Spec.Replicas = 3 })).(*api.SandboxPool)
	member := func(name, node, agent string) {
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = name
		sb.Metadata.Finalizers = []string{api.FinalizerVM}
		if node != "" {
			sb.Metadata.OwnerReferences = []api.OwnerReference{{Kind: api.KindSandboxPool, Name: "web", UID: pool.Metadata.UID}}
		}
		api.Default(sb)
		sb.Status.Phase, sb.Status.Node, sb.Status.CurrentAgent = api.SandboxRunning, orDefault(node, "n1"), agent
		e.create(sb)
	}
	member("web-idle", "n1", "")
	member("web-busy", "n1", "job")
	member("web-sched", "n1", "next")
	member("web-other", "n2", "")
	member("box", "", "")
	bound := func(name, sandbox, phase string, attempts, retries int) {
		a := newAgent(t, name, func(a *api.Agent) { a.Spec.Completion.MaxRetries = retries })
		a.Status.Phase, a.Status.Sandbox, a.Status.Node, a.Status.Attempts = phase, sandbox, "n1", attempts
		at := e.clk.Now()
		a.Status.ScheduledAt = &at
		if phase == api.AgentRunning {
			a.Status.StartedAt = &at
		}
		e.create(a)
	}
	bound("job", "web-busy", api.AgentRunning, 1, 1)
	bound("next", "web-sched", api.AgentScheduled, 0, 0)
	return e
}

// beat writes a new heartbeat of node, as the node does.
func (e *lostEnv) beat(node string) {
	e.t.Helper()
	if _, err := reconcile.UpdateStatus(e.ctx, e.st, api.KindNode, node, func(n *api.Node) bool {
		at := e.clk.Now()
		n.Status.LastHeartbeat = &at
		api.SetCondition(&n.Status.Conditions, api.Condition{Type: "Ready", Status: api.ConditionTrue, Reason: "Heartbeat"}, at)
		return true
	}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *lostEnv) reconcile(node string) reconcile.Result {
	e.t.Helper()
	e.sync()
	res, err := e.l.Reconcile(e.ctx, node)
	if err != nil {
		e.t.Fatalf("reconcile node %s: %v", node, err)
	}
	return res
}

// TestLostNode silences node n1 in several ways and checks what the
// controller does to it, its sandboxes and its agents.
func TestLostNode(t *testing.T) {
	tests := []struct {
		name string
		// silence is what happens to n1 after the first look.
		silence func(e *lostEnv)
		lost    bool
		// requeue is what the last look asks for, when n1 is not lost.
		requeue time.Duration
	}{
		{"within the grace", func(e *lostEnv) { e.clk.Advance(testGrace - time.Second) }, false, time.Second},
		{"past the grace", func(e *lostEnv) { e.clk.Advance(testGrace + time.Second) }, true, 0},
		{"a new heartbeat starts the grace again", func(e *lostEnv) {
			e.clk.Advance(testGrace - time.Second)
			e.beat("n1")
			e.reconcile("n1")
			e.clk.Advance(testGrace - 5*time.Second)
		}, false, 5 * time.Second},
		{"node object deleted, past the grace", func(e *lostEnv) {
			if _, _, err := e.st.Delete(e.ctx, api.KindNode, "n1", store.DeleteOptions{}); err != nil {
				e.t.Fatal(err)
			}
			e.reconcile("n1")
			e.clk.Advance(testGrace + time.Second)
		}, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newLostEnv(t)
			e.reconcile("n1")
			tt.silence(e)
			res := e.reconcile("n1")
			e.reconcile("n2")

			nodeGone := !e.exists(api.KindNode, "n1")
			if !nodeGone {
				nd := e.get(api.KindNode, "n1").(*api.Node)
				if got := nodeLost(nd); got != tt.lost {
					t.Errorf("n1 lost %v, want %v (conditions %+v)", got, tt.lost, nd.Status.Conditions)
				}
				if got, want := len(e.events(api.KindNode, "n1", ReasonNodeLost)), map[bool]int{true: 1, false: 0}[tt.lost]; got != want {
					t.Errorf("%d NodeLost events on n1, want %d", got, want)
				}
			}
			if nodeLost(e.get(api.KindNode, "n2").(*api.Node)) {
				t.Error("n2, which heartbeats, is lost")
			}
			if !tt.lost {
				if res.RequeueAfter != tt.requeue {
					t.Errorf("requeue after %s, want %s (when the heartbeat expires)", res.RequeueAfter, tt.requeue)
				}
				if got := e.live("web"); !slices.Equal(got, []string{"web-busy", "web-idle", "web-other", "web-sched"}) {
					t.Errorf("pool members %v, want all four", got)
				}
				if a := e.agent("job"); a.Status.Phase != api.AgentRunning {
					t.Errorf("job %s, want Running", a.Status.Phase)
				}
				return
			}
			// Pool members on n1 are gone (their VM finalizer taken
			// off); n2's stays.
			if got := e.live("web"); !slices.Equal(got, []string{"web-other"}) {
				t.Errorf("pool members %v, want only web-other", got)
			}
			if got := e.members("web"); len(got) != 1 {
				t.Errorf("%d members in the store, want 1: the deleted ones must not wait for n1", len(got))
			}
			if len(e.events(api.KindSandboxPool, "web", ReasonNodeLost)) != 1 {
				t.Error("no NodeLost event on the pool")
			}
			// A sandbox of its own stays, Error (NodeLost).
			box := e.sandbox("box")
			if box.Status.Phase != api.SandboxError || box.Status.Reason != ReasonNodeLost || !slices.Contains(box.Metadata.Finalizers, api.FinalizerVM) {
				t.Errorf("box: %s (%s), finalizers %v; want Error (NodeLost), kept", box.Status.Phase, box.Status.Reason, box.Metadata.Finalizers)
			}
			// The running attempt failed as NodeLost and retries; the
			// scheduled one goes back to the queue uncounted.
			job := e.agent("job")
			if job.Status.Phase != api.AgentPending || job.Status.Reason != ReasonNodeLost || job.Status.Failures != 1 || job.Status.Sandbox != "" {
				t.Errorf("job: %s (%s), %d failures, sandbox %q; want Pending (NodeLost), 1 failure, none", job.Status.Phase, job.Status.Reason, job.Status.Failures, job.Status.Sandbox)
			}
			next := e.agent("next")
			if next.Status.Phase != api.AgentPending || next.Status.Failures != 0 || next.Status.Sandbox != "" {
				t.Errorf("next: %s (%s), %d failures; want Pending, no failure", next.Status.Phase, next.Status.Reason, next.Status.Failures)
			}

			// Level-based: a second look changes nothing and records no
			// second event.
			e.reconcile("n1")
			if !nodeGone && len(e.events(api.KindNode, "n1", ReasonNodeLost)) != 1 {
				t.Error("a second look recorded another NodeLost event")
			}
			if got := e.agent("job").Status.Failures; got != 1 {
				t.Errorf("job has %d failures after a second look, want 1", got)
			}
		})
	}
}

// TestLostNodeCacheBehind: heartbeats are read from the watch cache; one
// the cache has not seen yet, when the grace seems past, is found in the
// store before the node is marked lost.
func TestLostNodeCacheBehind(t *testing.T) {
	e := newLostEnv(t)
	e.reconcile("n1")
	e.clk.Advance(testGrace + time.Second)
	e.beat("n1") // written, not yet in the cache
	res, err := e.l.Reconcile(e.ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if nd := e.get(api.KindNode, "n1").(*api.Node); nodeLost(nd) {
		t.Fatalf("n1 lost on a stale cache (conditions %+v)", nd.Status.Conditions)
	}
	if res.RequeueAfter != testGrace {
		t.Errorf("requeue after %s, want %s (the grace from the new heartbeat)", res.RequeueAfter, testGrace)
	}
	if a := e.agent("job"); a.Status.Phase != api.AgentRunning {
		t.Errorf("job %s, want Running", a.Status.Phase)
	}
}

// TestLostNodeRunningAgentWithoutRetries: an attempt lost with its node,
// and no retry left, fails the agent.
func TestLostNodeRunningAgentWithoutRetries(t *testing.T) {
	e := newLostEnv(t)
	if _, err := reconcile.UpdateStatus(e.ctx, e.st, api.KindAgent, "job", func(a *api.Agent) bool {
		a.Status.Failures = 1 // of maxRetries 1
		return true
	}); err != nil {
		t.Fatal(err)
	}
	e.reconcile("n1")
	e.clk.Advance(testGrace)
	e.reconcile("n1")
	job := e.agent("job")
	if job.Status.Phase != api.AgentFailed || job.Status.Reason != ReasonNodeLost {
		t.Errorf("job %s (%s), want Failed (NodeLost)", job.Status.Phase, job.Status.Reason)
	}
}

// TestSchedulerSkipsLostNode: the scheduler binds no agent to a sandbox
// of a lost node, which is being taken back.
func TestSchedulerSkipsLostNode(t *testing.T) {
	e := newEnv(t)
	s := NewScheduler(e.m, e.st, e.log, e.clk.Now)
	nd := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindNode}}
	nd.Metadata.Name = "n1"
	nd.Status.Conditions = []api.Condition{{Type: "Ready", Status: api.ConditionFalse, Reason: ReasonNodeLost}}
	e.create(nd)
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "web-a"
	sb.Metadata.Labels = map[string]string{"pool": "web"}
	api.Default(sb)
	sb.Status.Phase, sb.Status.Node = api.SandboxPaused, "n1"
	ready := t0
	sb.Status.ReadyAt = &ready
	e.create(sb)
	e.create(newAgent(t, "job", func(a *api.Agent) {
		a.Spec.SandboxSelector = &api.SandboxSelector{MatchLabels: map[string]string{"pool": "web"}}
	}))
	e.sync()
	if _, err := s.Reconcile(e.ctx, ""); err != nil {
		t.Fatal(err)
	}
	if a := e.agent("job"); a.Status.Sandbox != "" {
		t.Errorf("job bound to %s on a lost node", a.Status.Sandbox)
	}
}

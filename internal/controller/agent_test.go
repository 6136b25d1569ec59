package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// agentEnv is an env with the agent controller.
type agentEnv struct {
	*env
	c *Agents
}

func newAgentEnv(t *testing.T) *agentEnv {
	e := newEnv(t)
	return &agentEnv{env: e, c: NewAgents(e.m, e.st, e.log, e.clk.Now)}
}

func (e *agentEnv) reconcile(name string) reconcile.Result {
	e.t.Helper()
	res, err := e.c.Reconcile(e.ctx, name)
	if err != nil {
		e.t.Fatalf("reconcile agent %s: %v", name, err)
	}
	return res
}

// sandboxFor creates a running sandbox claimed by agent (none when "").
func (e *agentEnv) sandboxFor(name, agent string) {
	e.t.Helper()
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = name
	sb.Metadata.Labels = map[string]string{"pool": "web"}
	api.Default(sb)
	sb.Status.Phase, sb.Status.Node, sb.Status.CurrentAgent = api.SandboxRunning, "n1", agent
	if agent != "" {
		at := e.clk.Now()
		sb.Status.ClaimedAt = &at
	}
	e.create(sb)
}

// running creates an agent bound to sandbox that started its attempt-th
// attempt at started.
func (e *agentEnv) running(name, sandbox string, attempt int, started time.Time, edit func(*api.Agent)) {
	e.t.Helper()
	a := newAgent(e.t, name, edit)
	a.Status.Phase, a.Status.Reason = api.AgentRunning, "Running"
	a.Status.Sandbox, a.Status.Node = sandbox, "n1"
	a.Status.Attempts = attempt
	a.Status.Failures = attempt - 1
	a.Status.ScheduledAt, a.Status.StartedAt = &started, &started
	e.create(a)
}

func TestAgentTTLAfterFinished(t *testing.T) {
	ttl := func(s int) *int { return &s }
	tests := []struct {
		name  string
		phase string
		ttl   *int
		// after is how long after the agent finished it is looked at.
		after       time.Duration
		gone        bool
		wantRequeue time.Duration
	}{
		{"kept without a ttl", api.AgentCompleted, nil, 365 * 24 * time.Hour, false, 0},
		{"before the ttl", api.AgentCompleted, ttl(60), 10 * time.Second, false, 50 * time.Second},
		{"at the ttl", api.AgentCompleted, ttl(60), 60 * time.Second, true, 0},
		{"failed, past the ttl", api.AgentFailed, ttl(60), time.Hour, true, 0},
		{"cancelled, past the ttl", api.AgentCancelled, ttl(60), time.Hour, true, 0},
		{"ttl zero", api.AgentCompleted, ttl(0), 0, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newAgentEnv(t)
			a := newAgent(t, "job", func(a *api.Agent) { a.Spec.TTLSecondsAfterFinished = tt.ttl })
			done := e.clk.Now()
			a.Status.Phase, a.Status.CompletedAt = tt.phase, &done
			e.create(a)
			e.clk.Advance(tt.after)
			res := e.reconcile("job")
			if res.RequeueAfter != tt.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tt.wantRequeue)
			}
			// The agent carries the run finalizer: the delete marks it and
			// the next look lets it go.
			e.reconcile("job")
			if got := !e.exists(api.KindAgent, "job"); got != tt.gone {
				t.Fatalf("gone %v, want %v", got, tt.gone)
			}
			if got, want := len(e.events(api.KindAgent, "job", "Expired")), map[bool]int{true: 1, false: 0}[tt.gone]; got != want {
				t.Errorf("%d Expired events, want %d", got, want)
			}
		})
	}
}

// TestAgentTTLLosesARace changes a finished agent between the TTL
// check's read and its delete: the conditioned delete fails, and no
// Expired event may say otherwise.
func TestAgentTTLLosesARace(t *testing.T) {
	e := newEnv(t)
	hs := &hookStore{Interface: e.st}
	c := NewAgents(e.m, hs, e.log, e.clk.Now)
	ttl := 0
	a := newAgent(t, "job", func(a *api.Agent) { a.Spec.TTLSecondsAfterFinished = &ttl })
	done := e.clk.Now()
	a.Status.Phase, a.Status.CompletedAt = api.AgentCompleted, &done
	e.create(a)
	hs.beforeDelete = func(string, string) {
		cur := e.agent("job")
		cur.Metadata.Labels = map[string]string{"seen": "yes"}
		if _, _, err := e.st.Update(e.ctx, cur); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Reconcile(e.ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if e.exists(api.KindAgent, "job") {
		if got := len(e.events(api.KindAgent, "job", "Expired")); got != 0 {
			t.Errorf("%d Expired events for an agent that was not deleted, want 0", got)
		}
	}
}

func TestAgentDeadlineBackstop(t *testing.T) {
	tests := []struct {
		name       string
		maxRetries int
		wantPhase  string
	}{
		{"no retries", 0, api.AgentFailed},
		{"a retry left", 1, api.AgentPending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newAgentEnv(t)
			e.sandboxFor("sb-1", "job")
			e.running("job", "sb-1", 1, e.clk.Now(), func(a *api.Agent) {
				a.Spec.Completion.TimeoutMinutes = 1
				a.Spec.Completion.MaxRetries = tt.maxRetries
			})

			// Within timeout + the node's grace nothing happens; the
			// controller looks again by the deadline.
			e.clk.Advance(2 * time.Minute)
			res := e.reconcile("job")
			if got := e.agent("job").Status.Phase; got != api.AgentRunning {
				t.Fatalf("before the deadline: phase %s, want Running", got)
			}
			if got, want := res.RequeueAfter, time.Minute; got != want {
				t.Errorf("requeue after %s, want %s", got, want)
			}

			e.clk.Advance(time.Minute + time.Second)
			e.reconcile("job")
			a := e.agent("job")
			if got, want := a.Status.Phase, tt.wantPhase; got != want {
				t.Fatalf("past the deadline: phase %s, want %s", got, want)
			}
			if got, want := a.Status.Reason, "DeadlineExceeded"; got != want {
				t.Errorf("reason %q, want %q", got, want)
			}
			if got, want := [2]int{a.Status.Attempts, a.Status.Failures}, [2]int{1, 1}; got != want {
				t.Errorf("attempts/failures %v, want %v", got, want)
			}
			if evs := e.events(api.KindAgent, "job", "DeadlineExceeded"); len(evs) != 1 || evs[0].Type != api.EventWarning {
				t.Errorf("DeadlineExceeded events %v, want one Warning", evs)
			}
			// Looked at again, a Failed or Pending agent stays as it is.
			before := a.Metadata.ResourceVersion
			e.reconcile("job")
			if got := e.agent("job").Metadata.ResourceVersion; got != before {
				t.Errorf("a second look wrote the agent again (rv %s -> %s)", before, got)
			}
		})
	}
}

func TestAgentScheduledNeverStarted(t *testing.T) {
	e := newAgentEnv(t)
	e.sandboxFor("sb-1", "job")
	a := newAgent(t, "job", func(a *api.Agent) { a.Spec.Completion.TimeoutMinutes = 1 })
	at := e.clk.Now()
	a.Status.Phase, a.Status.Sandbox, a.Status.ScheduledAt = api.AgentScheduled, "sb-1", &at
	e.create(a)
	e.clk.Advance(3*time.Minute + time.Second)
	e.reconcile("job")
	if got, want := e.agent("job").Status.Reason, "DeadlineExceeded"; got != want {
		t.Errorf("reason %q, want %q: a node that never starts the attempt is caught too", got, want)
	}
}

func TestAgentSandboxLost(t *testing.T) {
	tests := []struct {
		name string
		// claim is what the sandbox's claim names; "-" deletes the sandbox.
		claim string
		// since is how long ago the agent was scheduled.
		since time.Duration
		lost  bool
	}{
		{"sandbox deleted", "-", time.Second, true},
		{"claim names another agent", "other", 31 * time.Second, true},
		{"claim cleared", "", 31 * time.Second, true},
		{"claim not written yet", "other", 10 * time.Second, false},
		{"claim holds", "job", 10 * time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newAgentEnv(t)
			if tt.claim != "-" {
				e.sandboxFor("sb-1", tt.claim)
			}
			e.running("job", "sb-1", 1, e.clk.Now(), func(a *api.Agent) { a.Spec.Completion.MaxRetries = 1 })
			e.clk.Advance(tt.since)
			res := e.reconcile("job")
			a := e.agent("job")
			if got := a.Status.Reason == "SandboxLost"; got != tt.lost {
				t.Fatalf("lost %v, want %v (phase %s, reason %s)", got, tt.lost, a.Status.Phase, a.Status.Reason)
			}
			if !tt.lost {
				if res.RequeueAfter <= 0 {
					t.Errorf("requeue after %s, want a look again", res.RequeueAfter)
				}
				return
			}
			// With a retry left, the agent waits for a fresh sandbox.
			if got, want := a.Status.Phase, api.AgentPending; got != want {
				t.Errorf("phase %s, want %s", got, want)
			}
			if a.Status.Sandbox != "" || a.Status.StartedAt != nil || a.Status.ScheduledAt != nil {
				t.Errorf("binding kept: sandbox %q, startedAt %v, scheduledAt %v", a.Status.Sandbox, a.Status.StartedAt, a.Status.ScheduledAt)
			}
			if c := api.FindCondition(a.Status.Conditions, "Scheduled"); c == nil || c.Status != api.ConditionFalse || c.Reason != "SandboxLost" {
				t.Errorf("Scheduled condition %+v, want False/SandboxLost", c)
			}
			if evs := e.events(api.KindAgent, "job", "SandboxLost"); len(evs) != 1 || evs[0].Type != api.EventWarning {
				t.Errorf("SandboxLost events %v, want one Warning", evs)
			}
		})
	}
}

// TestAgentRetriesUntilFailed loses the agent's sandbox again and again:
// each attempt the node starts and loses is a failure, and the agent is
// Failed once the retries are used up.
func TestAgentRetriesUntilFailed(t *testing.T) {
	e := newAgentEnv(t)
	e.running("job", "gone-1", 1, e.clk.Now(), func(a *api.Agent) { a.Spec.Completion.MaxRetries = 2 })
	for attempt := 1; attempt <= 3; attempt++ {
		if attempt > 1 {
			// The scheduler binds it again and the node starts the
			// attempt, on another sandbox that is lost too.
			if _, err := reconcile.UpdateStatus(e.ctx, e.st, api.KindAgent, "job", func(a *api.Agent) bool {
				now := e.clk.Now()
				a.Status.Phase, a.Status.Sandbox = api.AgentRunning, fmt.Sprintf("gone-%d", attempt)
				a.Status.Attempts++
				a.Status.ScheduledAt, a.Status.StartedAt = &now, &now
				return true
			}); err != nil {
				t.Fatal(err)
			}
		}
		e.clk.Advance(time.Second)
		e.reconcile("job")
		a := e.agent("job")
		want := api.AgentPending
		if attempt == 3 {
			want = api.AgentFailed
		}
		if a.Status.Phase != want || a.Status.Attempts != attempt || a.Status.Failures != attempt {
			t.Fatalf("after attempt %d: phase %s, attempts %d, failures %d; want %s, %d, %d",
				attempt, a.Status.Phase, a.Status.Attempts, a.Status.Failures, want, attempt, attempt)
		}
	}
	a := e.agent("job")
	if a.Status.CompletedAt == nil {
		t.Error("a Failed agent has no completedAt")
	}
	if !strings.Contains(a.Status.Message, "no retries left of 2") {
		t.Errorf("message %q, want it to say the retries are used up", a.Status.Message)
	}
	if c := api.FindCondition(a.Status.Conditions, "Failed"); c == nil || c.Status != api.ConditionTrue {
		t.Errorf("Failed condition %+v, want True", c)
	}
}

func TestFailAttempt(t *testing.T) {
	start := t0.Add(-90 * time.Second)
	tests := []struct {
		name           string
		maxRetries     int
		failuresBefore int
		wantPhase      string
		wantFailures   int
		wantCompleted  bool
		wantMessage    string
	}{
		{"no retries", 0, 0, api.AgentFailed, 1, true, "attempt 3 failed: boom"},
		{"first of two retries", 2, 0, api.AgentPending, 1, false, "(1 of 2 retries used)"},
		{"last retry", 2, 1, api.AgentPending, 2, false, "(2 of 2 retries used)"},
		{"retries used up", 2, 2, api.AgentFailed, 3, true, "no retries left of 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAgent(t, "job", func(a *api.Agent) { a.Spec.Completion.MaxRetries = tt.maxRetries })
			a.Status.Phase, a.Status.Sandbox, a.Status.Node = api.AgentRunning, "sb", "n1"
			a.Status.Attempts, a.Status.Failures = 3, tt.failuresBefore
			a.Status.StartedAt, a.Status.ScheduledAt = &start, &start
			agentstate.FailAttempt(a, "Failed", "boom", t0)
			if got := a.Status.Phase; got != tt.wantPhase {
				t.Errorf("phase %s, want %s", got, tt.wantPhase)
			}
			if got, want := [2]int{a.Status.Attempts, a.Status.Failures}, [2]int{3, tt.wantFailures}; got != want {
				t.Errorf("attempts/failures %v, want %v: a failure does not start an attempt", got, want)
			}
			if got := a.Status.CompletedAt != nil; got != tt.wantCompleted {
				t.Errorf("completedAt set %v, want %v", got, tt.wantCompleted)
			}
			if !strings.Contains(a.Status.Message, tt.wantMessage) {
				t.Errorf("message %q, want it to contain %q", a.Status.Message, tt.wantMessage)
			}
			if tt.wantPhase == api.AgentPending {
				if a.Status.Sandbox != "" || a.Status.Node != "" || a.Status.StartedAt != nil {
					t.Errorf("a retried agent keeps its binding: %q %q %v", a.Status.Sandbox, a.Status.Node, a.Status.StartedAt)
				}
				return
			}
			if got, want := a.Status.Result.DurationSeconds, 90.0; got != want {
				t.Errorf("durationSeconds %v, want %v", got, want)
			}
		})
	}
}

func TestInterruptIsNotAFailure(t *testing.T) {
	a := newAgent(t, "job", nil)
	start := t0.Add(-time.Minute)
	a.Status.Phase, a.Status.Sandbox, a.Status.Node = api.AgentRunning, "sb", "n1"
	a.Status.Attempts, a.Status.StartedAt = 1, &start
	agentstate.Interrupt(a, "node restarted", t0)
	if got, want := a.Status.Phase+"/"+a.Status.Reason, "Pending/Interrupted"; got != want {
		t.Errorf("phase/reason %s, want %s", got, want)
	}
	if got, want := [2]int{a.Status.Attempts, a.Status.Failures}, [2]int{1, 0}; got != want {
		t.Errorf("attempts/failures %v, want %v", got, want)
	}
	if a.Status.Sandbox != "" || a.Status.StartedAt != nil {
		t.Errorf("binding kept: %q %v", a.Status.Sandbox, a.Status.StartedAt)
	}
	if !agentstate.Pending(a) {
		t.Error("an interrupted agent is not pending: the scheduler would not place it again")
	}
}

func TestAgentDeletion(t *testing.T) {
	tests := []struct {
		name string
		// setup creates the agent "job" (and what it needs).
		setup func(e *agentEnv)
		gone  bool
	}{
		{"pending", func(e *agentEnv) { e.create(newAgent(e.t, "job", nil)) }, true},
		{"finished", func(e *agentEnv) {
			a := newAgent(e.t, "job", nil)
			a.Status.Phase = api.AgentCompleted
			e.create(a)
		}, true},
		{"bound, its sandbox gone", func(e *agentEnv) { e.running("job", "sb-1", 1, e.clk.Now(), nil) }, true},
		// The node stops the run, releases the sandbox and lets the agent go.
		{"bound, its sandbox there", func(e *agentEnv) {
			e.sandboxFor("sb-1", "job")
			e.running("job", "sb-1", 1, e.clk.Now(), nil)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newAgentEnv(t)
			tt.setup(e)
			if _, _, err := e.st.Delete(e.ctx, api.KindAgent, "job", store.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			res := e.reconcile("job")
			if got := !e.exists(api.KindAgent, "job"); got != tt.gone {
				t.Fatalf("gone %v, want %v", got, tt.gone)
			}
			if !tt.gone && res.RequeueAfter <= 0 {
				t.Errorf("requeue after %s, want a look again while the node holds it", res.RequeueAfter)
			}
		})
	}
}

// TestAgentWrittenStraightGetsItsFinalizer: an agent written to the store
// without the run finalizer the API sets (kubectl apply on Kubernetes)
// gets it from the controller while it has not finished, so that its
// deletion waits for its run; a finished one is left as it is.
func TestAgentWrittenStraightGetsItsFinalizer(t *testing.T) {
	for _, tt := range []struct {
		name  string
		phase string
		want  bool
	}{
		{"pending", "", true},
		{"running", api.AgentRunning, true},
		{"completed", api.AgentCompleted, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newAgentEnv(t)
			if tt.phase == api.AgentRunning {
				e.sandboxFor("sb-1", "job")
				e.running("job", "sb-1", 1, e.clk.Now(), nil)
			} else {
				a := newAgent(e.t, "job", nil)
				a.Status.Phase = tt.phase
				e.create(a)
			}
			o, err := e.st.Get(e.ctx, api.KindAgent, "job")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := reconcile.EditMeta(e.ctx, e.st, o, func(m *api.ObjectMeta) { m.Finalizers = nil }); err != nil {
				t.Fatal(err)
			}
			e.reconcile("job")
			o, err = e.st.Get(e.ctx, api.KindAgent, "job")
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(o.GetMeta().Finalizers, api.FinalizerRun); got != tt.want {
				t.Errorf("finalizers %v: has %s %v, want %v", o.GetMeta().Finalizers, api.FinalizerRun, got, tt.want)
			}
		})
	}
}

func TestAgentGoneIsNoError(t *testing.T) {
	e := newAgentEnv(t)
	if res := e.reconcile("nobody"); res != (reconcile.Result{}) {
		t.Errorf("reconcile of a missing agent: %+v, want nothing", res)
	}
}

// TestAttemptEndWithdrawsQuestion: a question still unanswered when its
// attempt ends goes with it; an answered one stays on record.
func TestAttemptEndWithdrawsQuestion(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	answered := now.Add(-time.Minute)
	for _, tt := range []struct {
		name     string
		end      func(a *api.Agent)
		answered bool
		wantGone bool
	}{
		{"completed, pending", func(a *api.Agent) { agentstate.Complete(a, &api.AgentResult{Success: true}, now) }, false, true},
		{"failed, pending", func(a *api.Agent) { agentstate.FailAttempt(a, "Failed", "boom", now) }, false, true},
		{"interrupted, pending", func(a *api.Agent) { agentstate.Interrupt(a, "restart", now) }, false, true},
		{"completed, answered", func(a *api.Agent) { agentstate.Complete(a, &api.AgentResult{Success: true}, now) }, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &api.Agent{Status: api.AgentStatus{Phase: api.AgentRunning, Attempts: 1,
				HumanRequest: &api.HumanRequest{ID: "q1", Question: "?", AskedAt: now.Add(-time.Hour)}}}
			api.SetCondition(&a.Status.Conditions, api.Condition{Type: api.ConditionWaitingForHuman, Status: api.ConditionTrue, Reason: "Asked"}, now)
			if tt.answered {
				a.Status.HumanRequest.Answer, a.Status.HumanRequest.AnsweredAt = "yes", &answered
			}
			tt.end(a)
			if gone := a.Status.HumanRequest == nil; gone != tt.wantGone {
				t.Fatalf("request gone = %v, want %v", gone, tt.wantGone)
			}
			c := api.FindCondition(a.Status.Conditions, api.ConditionWaitingForHuman)
			if tt.wantGone && (c.Status != api.ConditionFalse || c.Reason != "Withdrawn") {
				t.Fatalf("condition %+v", c)
			}
			if !tt.wantGone && c.Reason != "Asked" {
				t.Fatalf("condition changed: %+v", c)
			}
		})
	}
}

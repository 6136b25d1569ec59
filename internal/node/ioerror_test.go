package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/clock"
)

// backendState is the run state the backend reports of a sandbox.
func (d *directNode) backendState(name string) string {
	d.t.Helper()
	info, err := d.be.Inspect(d.ctx, name)
	if err != nil {
		d.t.Fatal(err)
	}
	return info.State
}

// ioErrorCondition is the sandbox's IOError condition, or nil.
func ioErrorCondition(sb *api.Sandbox) *api.Condition {
	return api.FindCondition(sb.Status.Conditions, reasonIOError)
}

// TestIOErrorResumedOnceThereIsRoom: a running sandbox whose guest the
// hypervisor stopped on a failed disk write is reported (event and
// condition IOError), tried again soon and then less often while the disk
// is full, and running again (event Resumed) as soon as it is not.
func TestIOErrorResumedOnceThereIsRoom(t *testing.T) {
	d := newDirectNode(t, clock.NewFake(time.Now()))
	d.create(yamlObj(t, sandboxYAML("box", "  templateRef: desk\n")))
	d.reconcile("box")
	if got := d.sandbox("box").Status.Phase; got != api.SandboxRunning {
		t.Fatalf("phase %s, want Running", got)
	}

	d.be.SetDiskFull(true)
	d.be.StopOnWriteError("box")
	stoppedAt := d.clk.Now()
	res := d.reconcile("box")
	sb := d.sandbox("box")
	if sb.Status.Phase != api.SandboxRunning || sb.Status.Reason != reasonIOError || !strings.Contains(sb.Status.Message, "disk is still full") {
		t.Fatalf("status %s/%s %q, want Running/IOError saying why it cannot run", sb.Status.Phase, sb.Status.Reason, sb.Status.Message)
	}
	if c := ioErrorCondition(sb); c == nil || c.Status != api.ConditionTrue {
		t.Fatalf("IOError condition %+v, want True", c)
	}
	if got := d.backendState("box"); got != backend.StateIOError {
		t.Fatalf("backend state %s, want still IOError", got)
	}
	if res.RequeueAfter != time.Second {
		t.Errorf("first retry after %s, want 1s", res.RequeueAfter)
	}

	// Tries again, less often, without another event.
	resumes := d.be.Count("resume")
	var last time.Duration
	for _, step := range []time.Duration{time.Second, 3 * time.Second, 8 * time.Second, 30 * time.Second} {
		d.clk.Advance(step)
		res = d.reconcile("box")
		if res.RequeueAfter < last || res.RequeueAfter > interval(sb) {
			t.Errorf("%s after the stop: retry after %s (last %s), want growing up to %s", d.clk.Now().Sub(stoppedAt), res.RequeueAfter, last, interval(sb))
		}
		last = res.RequeueAfter
	}
	if got := d.be.Count("resume") - resumes; got != 4 {
		t.Errorf("%d resumes tried in four looks, want 4", got)
	}
	if got := count(storeEvents(t, d.st, api.KindSandbox, "box"), reasonIOError); got != 1 {
		t.Errorf("%d IOError events, want 1", got)
	}
	if c := ioErrorCondition(d.sandbox("box")); c == nil || !c.LastTransitionTime.Equal(stoppedAt.UTC()) {
		t.Errorf("IOError condition %+v, want True since %s", c, stoppedAt.UTC())
	}

	d.be.SetDiskFull(false)
	d.clk.Advance(last)
	d.reconcile("box")
	sb = d.sandbox("box")
	if sb.Status.Phase != api.SandboxRunning || sb.Status.Reason != "Resumed" {
		t.Fatalf("after room came back: %s/%s %q, want Running/Resumed", sb.Status.Phase, sb.Status.Reason, sb.Status.Message)
	}
	if got := d.backendState("box"); got != backend.StateRunning {
		t.Fatalf("backend state %s, want Running", got)
	}
	if c := ioErrorCondition(sb); c == nil || c.Status != api.ConditionFalse || c.Reason != "Resumed" {
		t.Errorf("IOError condition %+v, want False (Resumed)", c)
	}
	if got := count(storeEvents(t, d.st, api.KindSandbox, "box"), "Resumed"); got != 1 {
		t.Errorf("%d Resumed events, want 1", got)
	}
	// Healthy again: the next look is an ordinary one.
	d.clk.Advance(interval(sb))
	d.reconcile("box")
	if sb := d.sandbox("box"); sb.Status.Reason != "Resumed" || sb.Status.Phase != api.SandboxRunning {
		t.Errorf("next look: %s/%s", sb.Status.Phase, sb.Status.Reason)
	}
}

// TestIOErrorPausedSandboxLeftPaused: a sandbox meant to stand still is
// not run by the node; its next resume retries the write.
func TestIOErrorPausedSandboxLeftPaused(t *testing.T) {
	d := newDirectNode(t, clock.NewFake(time.Now()))
	d.create(yamlObj(t, sandboxYAML("box", "  templateRef: desk\n")))
	d.reconcile("box")
	d.be.StopOnWriteError("box")
	if err := d.nd.updateStatus(d.ctx, d.sandbox("box"), func(s *api.SandboxStatus) { s.Phase = api.SandboxPaused }); err != nil {
		t.Fatal(err)
	}
	resumes := d.be.Count("resume")
	d.reconcile("box")
	if got := d.be.Count("resume") - resumes; got != 0 {
		t.Errorf("%d resumes of a paused sandbox", got)
	}
	if sb := d.sandbox("box"); sb.Status.Phase != api.SandboxPaused {
		t.Errorf("phase %s, want Paused", sb.Status.Phase)
	}
}

// TestIOErrorFailsTheAttempt: an agent's attempt on a sandbox stopped on a
// failed write fails with reason IOError once the stop has lasted
// IOErrorGrace, or just before its deadline if that comes first, rather
// than hang until its deadline and fail without saying why; its run is
// cancelled, which releases the sandbox.
func TestIOErrorFailsTheAttempt(t *testing.T) {
	tests := []struct {
		name    string
		timeout string        // completion.timeoutMinutes
		started time.Duration // how long before the stop the attempt started
		failAt  time.Duration // after the stop
	}{
		{"grace", "60", 0, IOErrorGrace},
		{"deadline first", "1", 50 * time.Second, 10*time.Second - ioErrorBeforeDeadline},
		{"deadline at hand", "1", 59*time.Second + 500*time.Millisecond, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDirectNode(t, clock.NewFake(time.Now()))
			d.create(yamlObj(t, sandboxYAML("box", "  templateRef: desk\n")))
			d.reconcile("box")
			a := yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxName: box
  type: mcp-agent
  completion: {timeoutMinutes: `+tt.timeout+`}
`).(*api.Agent)
			started := d.clk.Now().Add(-tt.started)
			a.Status.Phase, a.Status.Sandbox, a.Status.StartedAt, a.Status.Attempts, a.Status.Node = api.AgentRunning, "box", &started, 1, "n1"
			d.create(a)
			if err := d.nd.updateStatus(d.ctx, d.sandbox("box"), func(s *api.SandboxStatus) { s.CurrentAgent, s.ClaimedAt = "job", &started }); err != nil {
				t.Fatal(err)
			}
			// The attempt's run on this node.
			runCtx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d.nd.runs.mu.Lock()
			d.nd.runs.m["job"] = &run{attempt: 1, cancel: cancel, done: make(chan struct{})}
			d.nd.runs.mu.Unlock()
			defer func() {
				d.nd.runs.mu.Lock()
				delete(d.nd.runs.m, "job")
				d.nd.runs.mu.Unlock()
			}()

			d.be.SetDiskFull(true)
			d.be.StopOnWriteError("box")
			stop := d.clk.Now()
			for {
				res := d.reconcile("box")
				ag := getAgent(t, d, "job")
				elapsed := d.clk.Now().Sub(stop)
				if ag.Status.Phase != api.AgentRunning {
					if elapsed < tt.failAt {
						t.Fatalf("the attempt failed %s after the stop, want at %s", elapsed, tt.failAt)
					}
					if ag.Status.Phase != api.AgentFailed || ag.Status.Reason != reasonIOError || !strings.Contains(ag.Status.Message, "failed disk write") {
						t.Fatalf("agent %s/%s %q, want Failed/IOError saying why", ag.Status.Phase, ag.Status.Reason, ag.Status.Message)
					}
					break
				}
				if runCtx.Err() != nil {
					t.Fatal("the run was cancelled while its attempt goes on")
				}
				if elapsed >= tt.failAt+time.Second {
					t.Fatalf("the attempt still runs %s after the stop, want it failed at %s", elapsed, tt.failAt)
				}
				if res.RequeueAfter <= 0 {
					t.Fatal("no look again while the guest is stopped")
				}
				d.clk.Advance(res.RequeueAfter)
			}
			if runCtx.Err() == nil {
				t.Error("the failed attempt's run was not cancelled")
			}
			if got := count(storeEvents(t, d.st, api.KindAgent, "job"), reasonIOError); got != 1 {
				t.Errorf("%d IOError events of the agent, want 1", got)
			}
		})
	}
}

func getAgent(t *testing.T, d *directNode, name string) *api.Agent {
	t.Helper()
	o, err := d.st.Get(d.ctx, api.KindAgent, name)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*api.Agent)
}

package node

import (
	"context"
	"fmt"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// A sandbox's guest that writes to a full disk is stopped by the
// hypervisor (backend.StateIOError): the write is held, not failed in the
// guest. Nothing runs it again by itself, so without the node an agent on
// it would hang until its deadline. The node notices the state when it
// observes the sandbox, says so (event and condition IOError), and tries
// to resume the guest, soon and then less often, until the write goes
// through (event Resumed). An agent's attempt does not wait for it past
// IOErrorGrace or its own deadline: the attempt fails with reason IOError,
// and the sandbox is released; a reset throws its overlay away, which
// gives some of the room back.

// IOErrorGrace is how long an agent's attempt waits for its sandbox's
// guest, stopped on a failed disk write, to run again before the attempt
// fails with reason IOError (sooner if its deadline comes first). A
// sandbox with no agent waits for room as long as it takes.
const IOErrorGrace = 30 * time.Second

// ioErrorBeforeDeadline is how long before an attempt's deadline the node
// fails it when its guest is still stopped on a failed write: before the
// run's own deadline would fail it without saying why.
const ioErrorBeforeDeadline = time.Second

// reasonIOError is the event reason, the sandbox status reason and the
// condition type of a guest stopped on a failed disk write. The condition
// is True while it is stopped, since its lastTransitionTime.
const reasonIOError = "IOError"

// ioErrorRetry is how long the node waits before it tries again to resume
// a guest stopped on a failed write for stopped so far: about half of it,
// from a second up to the sandbox's health-check interval.
func ioErrorRetry(sb *api.Sandbox, stopped time.Duration) time.Duration {
	return min(max(stopped/2, time.Second), interval(sb))
}

// ioStoppedSince is when sb's guest stopped on a failed write, as its
// IOError condition says, or the zero time if it does not say so.
func ioStoppedSince(sb *api.Sandbox) time.Time {
	if c := api.FindCondition(sb.Status.Conditions, reasonIOError); c != nil && c.Status == api.ConditionTrue {
		return c.LastTransitionTime
	}
	return time.Time{}
}

// observeIOError handles a sandbox whose VM is stopped on a failed disk
// write (info.State is backend.StateIOError). The caller holds the
// sandbox's lock. A sandbox meant to be paused or saved is left as it is:
// its next resume retries the write. A running one is resumed if it can
// be; if it cannot, its agent's attempt may fail (failIOErrorAttempt), and
// the node looks again soon.
func (n *Node) observeIOError(ctx context.Context, sb *api.Sandbox, info backend.Info) (reconcile.Result, error) {
	name := sb.Metadata.Name
	if sb.Status.Phase != api.SandboxRunning {
		return reconcile.Result{RequeueAfter: interval(sb)}, n.updateStatus(ctx, sb, func(s *api.SandboxStatus) { s.PID = info.PID })
	}
	now := n.now().UTC()
	since := ioStoppedSince(sb)
	if since.IsZero() {
		since = now
		n.event(ctx, sb, api.EventWarning, reasonIOError, "the guest stopped: a write to its disk failed (is the host's disk full?); it runs again once writes succeed")
	}
	// Whether the guest runs again is what the backend says after the
	// try: a resume that ran it but did not hear its agent still ran it
	// (the health check judges the guest), and one that succeeded may
	// have been stopped again right after.
	err := n.be.Resume(ctx, name)
	after, ierr := n.be.Inspect(ctx, name)
	if ierr == nil {
		info = after
	}
	if ierr == nil && after.State == backend.StateRunning {
		msg := fmt.Sprintf("the guest runs again after a failed disk write (stopped for %s)", now.Sub(since).Round(time.Second))
		n.event(ctx, sb, api.EventNormal, "Resumed", msg)
		return reconcile.Result{RequeueAfter: interval(sb)}, n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
			s.Phase, s.Reason, s.Message, s.PID = api.SandboxRunning, "Resumed", msg, info.PID
			s.LastResumedAt = &now
			api.SetCondition(&s.Conditions, api.Condition{Type: reasonIOError, Status: api.ConditionFalse, Reason: "Resumed", Message: msg, ObservedGeneration: sb.Metadata.Generation}, now)
		})
	}
	if err == nil {
		err = ierr
	}
	if err == nil {
		err = fmt.Errorf("it is %s after the resume", info.State)
	}
	msg := fmt.Sprintf("the guest stopped on a failed disk write and cannot run yet (is the host's disk full?): %v", err)
	retry := ioErrorRetry(sb, now.Sub(since))
	if until, ferr := n.failIOErrorAttempt(ctx, sb, since, now, msg); ferr != nil {
		return reconcile.Result{}, ferr
	} else if until > 0 {
		retry = min(retry, until)
	}
	return reconcile.Result{RequeueAfter: retry}, n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		s.Phase, s.Reason, s.Message, s.PID = api.SandboxRunning, reasonIOError, msg, info.PID
		api.SetCondition(&s.Conditions, api.Condition{Type: reasonIOError, Status: api.ConditionTrue, Reason: reasonIOError, Message: msg, ObservedGeneration: sb.Metadata.Generation}, since)
	})
}

// failIOErrorAttempt fails the attempt of the agent that holds sb, whose
// guest has been stopped on a failed write since, once it cannot wait
// longer: the stop has lasted IOErrorGrace, or the attempt's deadline is
// less than ioErrorBeforeDeadline away. The attempt's run on this node is
// cancelled, which releases the sandbox once the caller lets go of its
// lock. It returns how long until it would fail the attempt, or 0 when
// there is none or it failed it.
func (n *Node) failIOErrorAttempt(ctx context.Context, sb *api.Sandbox, since, now time.Time, why string) (time.Duration, error) {
	agent := sb.Status.CurrentAgent
	if agent == "" {
		return 0, nil
	}
	o, err := n.st.Get(ctx, api.KindAgent, agent)
	if err != nil {
		return 0, nil // gone: checkClaim releases the sandbox
	}
	a := o.(*api.Agent)
	if a.Status.Phase != api.AgentRunning || a.Status.Sandbox != sb.Metadata.Name {
		return 0, nil
	}
	failAt := since.Add(IOErrorGrace)
	if a.Status.StartedAt != nil {
		if last := a.Status.StartedAt.Add(agentstate.Timeout(a) - ioErrorBeforeDeadline); last.Before(failAt) {
			failAt = last
		}
	}
	if now.Before(failAt) {
		return failAt.Sub(now), nil
	}
	attempt := a.Status.Attempts
	msg := fmt.Sprintf("sandbox %s %s (stopped for %s)", sb.Metadata.Name, why, now.Sub(since).Round(time.Second))
	failed := false
	out, err := n.updateAgent(ctx, agent, func(cur *api.Agent) bool {
		failed = cur.Status.Phase == api.AgentRunning && cur.Status.Attempts == attempt && cur.Status.Sandbox == sb.Metadata.Name
		if failed {
			agentstate.FailAttempt(cur, reasonIOError, msg, now)
		}
		return failed
	})
	if err != nil || !failed {
		return 0, err
	}
	n.event(ctx, out, api.EventWarning, reasonIOError, fmt.Sprintf("attempt %d: %s", attempt, msg))
	// The run notices the cancel in its guest call and releases the
	// sandbox; it must not be waited for here, under the sandbox's lock.
	if r := n.runs.get(agent); r != nil && r.attempt == attempt {
		r.cancel()
	}
	return 0, nil
}

// clearIOError marks a sandbox's IOError condition over, if it was set,
// once its VM is no longer stopped on a failed write (reset, saved,
// stopped or resumed by an operation).
func clearIOError(s *api.SandboxStatus, generation int64, now time.Time) {
	if c := api.FindCondition(s.Conditions, reasonIOError); c != nil && c.Status == api.ConditionTrue {
		api.SetCondition(&s.Conditions, api.Condition{Type: reasonIOError, Status: api.ConditionFalse, Reason: "Cleared",
			Message: "the VM is no longer stopped on a failed disk write", ObservedGeneration: generation}, now)
	}
}

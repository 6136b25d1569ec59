package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// Agents keeps the Job-like bookkeeping of agents that needs no VM: it
// lets deleted agents go once nothing runs them, deletes finished ones
// after ttlSecondsAfterFinished, and fails the attempt of an agent whose
// sandbox is gone (or, for an mcp-agent, broken) or whose node missed its
// deadline. Placing agents is the Scheduler's; running them is the node's.
type Agents struct {
	st  store.Interface
	log *slog.Logger
	now func() time.Time
}

// NewAgents registers the agent controller with m. A sandbox's change wakes
// the agent it is claimed by.
func NewAgents(m *Manager, st store.Interface, log *slog.Logger, now func() time.Time) *Agents {
	if now == nil {
		now = time.Now
	}
	a := &Agents{st: st, log: log, now: now}
	m.Register(Controller{Name: "agent", For: api.KindAgent, Reconciler: a, Workers: 4,
		Watches: []Watch{{Kind: api.KindSandbox, Map: func(o api.Object) []string {
			if cur := o.(*api.Sandbox).Status.CurrentAgent; cur != "" {
				return []string{cur}
			}
			return nil
		}}}})
	return a
}

// Finished reports whether an agent has ended for good.
func Finished(a *api.Agent) bool {
	switch a.Status.Phase {
	case api.AgentCompleted, api.AgentFailed, api.AgentCancelled:
		return true
	}
	return false
}

// Bound reports whether an agent holds a sandbox: scheduled or running.
func Bound(a *api.Agent) bool {
	return (a.Status.Phase == api.AgentScheduled || a.Status.Phase == api.AgentRunning) && a.Status.Sandbox != ""
}

// Timeout is how long one attempt of the agent may take: at most
// api.MaxAgentTimeout, even for an agent stored before that bound was
// checked, so that neither the deadline nor a token's life computed from
// it overflows.
func Timeout(a *api.Agent) time.Duration {
	m := a.Spec.Completion.TimeoutMinutes
	if m <= 0 {
		m = api.DefaultAgentTimeout
	}
	return time.Duration(min(m, api.MaxAgentTimeoutMinutes)) * time.Minute
}

// nodeGrace is how long past an attempt's deadline the controller waits
// for the node to end it before it ends it itself (the node may be gone).
const nodeGrace = 2 * time.Minute

// claimGrace is how long a claim may name an agent that does not point
// back at the sandbox: the scheduler writes the claim first and the
// agent right after.
const claimGrace = 30 * time.Second

// Reconcile implements Reconciler.
func (c *Agents) Reconcile(ctx context.Context, name string) (Result, error) {
	o, err := c.st.Get(ctx, api.KindAgent, name)
	if errors.Is(err, api.ErrNotFound) {
		return Result{}, nil
	}
	if err != nil {
		return Result{}, err
	}
	a := o.(*api.Agent)
	now := c.now()
	switch {
	case a.Metadata.DeletionTimestamp != nil:
		if Bound(a) {
			// The node stops the run and releases the sandbox, then lets
			// the agent go; unless the sandbox is gone.
			if _, err := c.st.Get(ctx, api.KindSandbox, a.Status.Sandbox); !errors.Is(err, api.ErrNotFound) {
				return Result{RequeueAfter: 10 * time.Second}, err
			}
		}
		return Result{}, RemoveFinalizer(ctx, c.st, a, api.FinalizerRun)
	case Finished(a):
		if ttl := a.Spec.TTLSecondsAfterFinished; ttl != nil && a.Status.CompletedAt != nil {
			at := a.Status.CompletedAt.Add(time.Duration(*ttl) * time.Second)
			if now.Before(at) {
				return Result{RequeueAfter: at.Sub(now)}, nil
			}
			_, _, err := c.st.Delete(ctx, api.KindAgent, name, store.DeleteOptions{ResourceVersion: a.Metadata.ResourceVersion})
			switch {
			case errors.Is(err, api.ErrConflict):
				return Result{RequeueAfter: time.Millisecond}, nil // changed meanwhile: look again
			case errors.Is(err, api.ErrNotFound):
				return Result{}, nil
			case err != nil:
				return Result{}, err
			}
			Event(ctx, c.st, c.log, a, api.EventNormal, "Expired", fmt.Sprintf("deleted %ds after it finished (ttlSecondsAfterFinished)", *ttl))
		}
		return Result{}, nil
	case Bound(a):
		return c.watchBound(ctx, a, now)
	}
	return Result{}, nil
}

// watchBound fails the attempt of a bound agent whose sandbox is gone or
// no longer claimed by it, or whose deadline passed with no word from its
// node.
func (c *Agents) watchBound(ctx context.Context, a *api.Agent, now time.Time) (Result, error) {
	lost := ""
	so, err := c.st.Get(ctx, api.KindSandbox, a.Status.Sandbox)
	switch {
	case errors.Is(err, api.ErrNotFound):
		lost = fmt.Sprintf("sandbox %s was deleted", a.Status.Sandbox)
	case err != nil:
		return Result{}, err
	default:
		sb := so.(*api.Sandbox)
		switch {
		case sb.Status.CurrentAgent != a.Metadata.Name && a.Status.ScheduledAt != nil && now.Sub(*a.Status.ScheduledAt) > claimGrace:
			lost = fmt.Sprintf("sandbox %s is no longer claimed by this agent", a.Status.Sandbox)
		case a.Spec.Type == "mcp-agent" && (sb.Status.Phase == api.SandboxError || sb.Status.Phase == api.SandboxTerminated):
			// The pool keeps a broken sandbox while its agent holds it,
			// and the node ends the attempts it runs itself; an
			// mcp-agent's attempt is the external agent's, and ends here.
			lost = fmt.Sprintf("sandbox %s is %s (%s)", a.Status.Sandbox, sb.Status.Phase, orDefault(sb.Status.Message, sb.Status.Reason))
		}
	}
	start := a.Status.StartedAt
	if start == nil {
		start = a.Status.ScheduledAt
	}
	deadline := time.Time{}
	if start != nil {
		deadline = start.Add(Timeout(a) + nodeGrace)
	}
	reason := "SandboxLost"
	if lost == "" && !deadline.IsZero() && now.After(deadline) {
		reason, lost = "DeadlineExceeded", fmt.Sprintf("no result within %s of the attempt's start", Timeout(a))
	}
	if lost == "" {
		next := time.Minute
		if !deadline.IsZero() {
			next = min(next, deadline.Sub(now))
		}
		return Result{RequeueAfter: max(next, time.Second)}, nil
	}
	attempt := a.Status.Attempts
	out, err := UpdateStatus(ctx, c.st, api.KindAgent, a.Metadata.Name, func(cur *api.Agent) bool {
		if !Bound(cur) || cur.Status.Attempts != attempt || cur.Status.Sandbox != a.Status.Sandbox {
			return false // the node got there first
		}
		FailAttempt(cur, reason, lost, now)
		return true
	})
	if err != nil {
		return Result{}, err
	}
	Event(ctx, c.st, c.log, out, api.EventWarning, reason, lost)
	return Result{}, nil
}

// FailAttempt records a failed attempt on a: it goes back to Pending for a
// fresh sandbox while it has retries left (completion.maxRetries), and is
// Failed after that.
func FailAttempt(a *api.Agent, reason, msg string, now time.Time) {
	failAttempt(a, reason, msg, now, true)
}

// FailFinally fails the running attempt of a and the agent with it,
// whatever retries are left: for a failure that a retry would meet again
// (the node refuses what the agent asks).
func FailFinally(a *api.Agent, reason, msg string, now time.Time) {
	failAttempt(a, reason, msg, now, false)
}

func failAttempt(a *api.Agent, reason, msg string, now time.Time, retry bool) {
	notRunning(a, reason, now)
	a.Status.Failures++
	a.Status.ObservedGeneration = a.Metadata.Generation
	if retry && a.Status.Failures <= a.Spec.Completion.MaxRetries {
		a.Status.Phase, a.Status.Reason = api.AgentPending, reason
		a.Status.Message = fmt.Sprintf("attempt %d failed: %s; retrying on a fresh sandbox (%d of %d retries used)", a.Status.Attempts, msg, a.Status.Failures, a.Spec.Completion.MaxRetries)
		a.Status.Sandbox, a.Status.Node = "", ""
		a.Status.ScheduledAt, a.Status.StartedAt = nil, nil
		api.SetCondition(&a.Status.Conditions, api.Condition{Type: "Scheduled", Status: api.ConditionFalse, Reason: reason, Message: a.Status.Message, ObservedGeneration: a.Metadata.Generation}, now)
		return
	}
	a.Status.Phase, a.Status.Reason = api.AgentFailed, reason
	a.Status.Message = fmt.Sprintf("attempt %d failed: %s", a.Status.Attempts, msg)
	if retry && a.Spec.Completion.MaxRetries > 0 {
		a.Status.Message += fmt.Sprintf(" (no retries left of %d)", a.Spec.Completion.MaxRetries)
	}
	a.Status.CompletedAt = &now
	if a.Status.Result == nil {
		a.Status.Result = &api.AgentResult{}
	}
	if a.Status.StartedAt != nil {
		a.Status.Result.DurationSeconds = now.Sub(*a.Status.StartedAt).Seconds()
	}
	api.SetCondition(&a.Status.Conditions, api.Condition{Type: "Failed", Status: api.ConditionTrue, Reason: reason, Message: a.Status.Message, ObservedGeneration: a.Metadata.Generation}, now)
}

// Interrupt puts a bound agent whose run was cut short by its node (a
// restart of the server) back to Pending. It is not a failure of the
// agent: the attempt runs again from the start on a clean sandbox.
func Interrupt(a *api.Agent, msg string, now time.Time) {
	notRunning(a, "Interrupted", now)
	a.Status.Phase, a.Status.Reason = api.AgentPending, "Interrupted"
	a.Status.Message = msg
	a.Status.Sandbox, a.Status.Node = "", ""
	a.Status.ScheduledAt, a.Status.StartedAt = nil, nil
	a.Status.ObservedGeneration = a.Metadata.Generation
	api.SetCondition(&a.Status.Conditions, api.Condition{Type: "Scheduled", Status: api.ConditionFalse, Reason: "Interrupted", Message: msg, ObservedGeneration: a.Metadata.Generation}, now)
}

// Complete records a finished run on a.
func Complete(a *api.Agent, res *api.AgentResult, now time.Time) {
	notRunning(a, "Completed", now)
	a.Status.Result = res
	a.Status.CompletedAt = &now
	a.Status.ObservedGeneration = a.Metadata.Generation
	if res.Success {
		a.Status.Phase, a.Status.Reason, a.Status.Message = api.AgentCompleted, "Completed", ""
		api.SetCondition(&a.Status.Conditions, api.Condition{Type: "Complete", Status: api.ConditionTrue, Reason: "Completed", ObservedGeneration: a.Metadata.Generation}, now)
	}
}

// notRunning turns the Running condition off, if the agent has one, and
// withdraws a question the attempt asked that nobody answered.
func notRunning(a *api.Agent, reason string, now time.Time) {
	withdrawHumanRequest(a, reason, now)
	if c := api.FindCondition(a.Status.Conditions, "Running"); c != nil && c.Status == api.ConditionTrue {
		api.SetCondition(&a.Status.Conditions, api.Condition{Type: "Running", Status: api.ConditionFalse, Reason: reason, ObservedGeneration: a.Metadata.Generation}, now)
	}
}

// withdrawHumanRequest ends an unanswered human request with the attempt
// that asked it: the question is the attempt's, and a retry starts over.
// The HumanRequested event keeps it in the audit log.
func withdrawHumanRequest(a *api.Agent, reason string, now time.Time) {
	if !a.Status.HumanRequest.Pending() {
		return
	}
	a.Status.HumanRequest = nil
	api.SetCondition(&a.Status.Conditions, api.Condition{Type: api.ConditionWaitingForHuman, Status: api.ConditionFalse, Reason: "Withdrawn",
		Message: "the attempt ended unanswered (" + reason + ")", ObservedGeneration: a.Metadata.Generation}, now)
}

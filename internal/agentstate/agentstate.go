// Package agentstate is the agent's state machine: which phase an agent
// is in and the transitions between them (bound to a sandbox, an attempt
// failed, interrupted or completed). The scheduler, the agent controller,
// the node that runs agents and the API server all move agents through
// it; it writes nothing itself.
package agentstate

import (
	"fmt"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

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

// MCPDeadline is when the running attempt of an mcp-agent ends if nothing
// completes it, with the reason and message it then ends with: its
// timeout after its start, or, with completion.heartbeatSeconds, that
// long after its last heartbeat (or its start), whichever comes first.
func MCPDeadline(a *api.Agent, now time.Time) (deadline time.Time, reason, msg string) {
	deadline, reason = now, "DeadlineExceeded"
	msg = fmt.Sprintf("nothing completed it within %s", Timeout(a))
	if a.Status.StartedAt == nil {
		return deadline, reason, msg
	}
	deadline = a.Status.StartedAt.Add(Timeout(a))
	if h := a.Spec.Completion.HeartbeatSeconds; h > 0 {
		last := *a.Status.StartedAt
		if hb := a.Status.HeartbeatAt; hb != nil && hb.After(last) {
			last = *hb
		}
		if d := last.Add(time.Duration(h) * time.Second); d.Before(deadline) {
			deadline, reason = d, "HeartbeatLost"
			msg = fmt.Sprintf("no heartbeat from its agent for %ds (spec.completion.heartbeatSeconds)", h)
		}
	}
	return deadline, reason, msg
}

// ReasonClaimed is the reason of a sandbox that its claim made Running.
const ReasonClaimed = "Claimed"

// ClaimGrace is how long a claim may name an agent that does not point
// back at the sandbox: the scheduler writes the claim first and the
// agent right after.
const ClaimGrace = 30 * time.Second

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

// Pending reports whether the agent waits for a sandbox.
func Pending(a *api.Agent) bool {
	return (a.Status.Phase == "" || a.Status.Phase == api.AgentPending) && a.Metadata.DeletionTimestamp == nil
}

// SelectorOf is the label selector of an agent's sandboxSelector.
func SelectorOf(a *api.Agent) api.Selector {
	if a.Spec.SandboxSelector == nil {
		return api.Selector{}
	}
	return api.SelectorFromMap(a.Spec.SandboxSelector.MatchLabels)
}

// Claim returns seen with its claim for a and a bound to it, both as of
// what the round read (their resourceVersions are the writes' conditions).
//
// A sandbox warm in memory (paused, or running) is Running from its claim
// on: its node resumes it in milliseconds, writing nothing more unless the
// resume does not go as planned (a restore, a new VM, an error). One on
// disk (saved) stays Saved until its node has restored it, which starts a
// new process and is written then.
func Claim(seen *api.Sandbox, a *api.Agent, now time.Time) (*api.Sandbox, *api.Agent) {
	sb := api.DeepCopy(seen)
	sb.Status.CurrentAgent = a.Metadata.Name
	sb.Status.ClaimedAt = &now
	if sb.Status.Phase == api.SandboxPaused || sb.Status.Phase == api.SandboxRunning {
		sb.Status.Phase, sb.Status.Reason = api.SandboxRunning, ReasonClaimed
		sb.Status.Message = fmt.Sprintf("in use by agent %s", a.Metadata.Name)
		sb.Status.LastResumedAt = &now
		api.SetCondition(&sb.Status.Conditions, sb.ReadyCondition(), now)
	}
	ag := api.DeepCopy(a)
	ag.Status.Phase, ag.Status.Reason = api.AgentScheduled, "Scheduled"
	ag.Status.Message = fmt.Sprintf("bound to sandbox %s", sb.Metadata.Name)
	ag.Status.Sandbox, ag.Status.Node = sb.Metadata.Name, sb.Status.Node
	ag.Status.ScheduledAt = &now
	ag.Status.ObservedGeneration = ag.Metadata.Generation
	api.SetCondition(&ag.Status.Conditions, api.Condition{Type: "Scheduled", Status: api.ConditionTrue, Reason: "Bound",
		Message: ag.Status.Message, ObservedGeneration: ag.Metadata.Generation}, now)
	return sb, ag
}

// Package agentstate is the agent's state machine: which phase an agent
// is in and the transitions between them (bound to a sandbox, an attempt
// failed, interrupted or completed). The scheduler, the agent controller,
// the node that runs agents and the API server all move agents through
// it; it writes nothing itself.
package agentstate

import (
	"encoding/json"
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
// back at the sandbox: the claim is written first, and the agent when
// the sandbox's node starts its attempt.
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
	if a.Status.Sandbox != "" {
		a.Status.FailedSandbox = a.Status.Sandbox
	}
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

// Phase is a's phase as people read it: Pending before it has one.
func Phase(a *api.Agent) string {
	if a.Status.Phase == "" {
		return api.AgentPending
	}
	return a.Status.Phase
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

// Claim returns seen with its claim for a, as of what the round read
// (seen's resourceVersion is the write's condition). The claim is the
// whole binding: it records a's version and next attempt
// (api.AgentClaim), and the sandbox's node starts that attempt with one
// write of the agent conditioned on that version (StartPatch), without
// reading it. Until then the agent stays Pending; the scheduler counts an
// agent a claim names as taken (ClaimedAgents).
//
// A sandbox warm in memory (paused, or running) is Running from its claim
// on: its node resumes it in milliseconds, writing nothing more unless the
// resume does not go as planned (a restore, a new VM, an error). One on
// disk (saved) stays Saved until its node has restored it, which starts a
// new process and is written then.
func Claim(seen *api.Sandbox, a *api.Agent, now time.Time) *api.Sandbox {
	sb := api.DeepCopy(seen)
	sb.Status.CurrentAgent = a.Metadata.Name
	sb.Status.Claim = &api.AgentClaim{UID: a.Metadata.UID, ResourceVersion: a.Metadata.ResourceVersion,
		Generation: a.Metadata.Generation, Attempt: a.Status.Attempts + 1}
	sb.Status.ClaimedAt = &now
	if sb.Status.Phase == api.SandboxPaused || sb.Status.Phase == api.SandboxRunning {
		sb.Status.Phase, sb.Status.Reason = api.SandboxRunning, ReasonClaimed
		sb.Status.Message = fmt.Sprintf("in use by agent %s", a.Metadata.Name)
		sb.Status.LastResumedAt = &now
		api.SetCondition(&sb.Status.Conditions, sb.ReadyCondition(), now)
	}
	return sb
}

// startStatus is the part of an agent's status an attempt's start writes.
// Null fields are written as null (cleared); a field it leaves out keeps
// its value (failures, the last result, the last heartbeat).
type startStatus struct {
	Phase              string            `json:"phase"`
	Reason             string            `json:"reason"`
	Message            string            `json:"message"`
	ObservedGeneration int64             `json:"observedGeneration"`
	Conditions         []api.Condition   `json:"conditions"`
	Sandbox            string            `json:"sandbox"`
	Node               string            `json:"node"`
	Attempts           int               `json:"attempts"`
	ScheduledAt        *time.Time        `json:"scheduledAt"`
	StartedAt          *time.Time        `json:"startedAt"`
	CompletedAt        *time.Time        `json:"completedAt"`
	HumanRequest       *api.HumanRequest `json:"humanRequest"`
	ReleasedSandbox    *string           `json:"releasedSandbox"`
}

// StartPatch is the JSON merge patch of an agent's status that starts the
// attempt sb's claim names, on sb, at now: Running on sb's node, its
// attempt counted, its conditions those of a running attempt (Scheduled
// and Running; what a Pending agent's conditions said of its last attempt
// is over). It is written conditioned on the version the claim read
// (api.AgentClaim.ResourceVersion): an agent changed since is read again.
func StartPatch(sb *api.Sandbox, now time.Time) ([]byte, error) {
	c := sb.Status.Claim
	if c == nil {
		return nil, fmt.Errorf("sandbox %s: the claim of agent %s records no version of it", sb.Metadata.Name, sb.Status.CurrentAgent)
	}
	scheduled := now
	if sb.Status.ClaimedAt != nil {
		scheduled = *sb.Status.ClaimedAt
	}
	msg := fmt.Sprintf("attempt %d on sandbox %s", c.Attempt, sb.Metadata.Name)
	st := startStatus{Phase: api.AgentRunning, Reason: "Running", Message: msg, ObservedGeneration: c.Generation,
		Sandbox: sb.Metadata.Name, Node: sb.Status.Node, Attempts: c.Attempt, ScheduledAt: &scheduled, StartedAt: &now}
	api.SetCondition(&st.Conditions, api.Condition{Type: "Scheduled", Status: api.ConditionTrue, Reason: "Bound",
		Message: fmt.Sprintf("bound to sandbox %s", sb.Metadata.Name), ObservedGeneration: c.Generation}, scheduled)
	api.SetCondition(&st.Conditions, api.Condition{Type: "Running", Status: api.ConditionTrue, Reason: "Started",
		Message: msg, ObservedGeneration: c.Generation}, now)
	return json.Marshal(st)
}

// Released reports whether sb is free for another claim although its
// claim still names a: a finished on it, and its node reset it before it
// wrote that outcome (api.AgentStatus.ReleasedSandbox). a is the agent
// the claim names as the caller's cache shows it (nil when it has none).
// A person's hold (status.control) keeps the sandbox: its node writes
// that release itself.
func Released(sb *api.Sandbox, a *api.Agent) bool {
	c := sb.Status.Claim
	return a != nil && c != nil && Finished(a) && a.Status.ReleasedSandbox == sb.Metadata.Name &&
		a.Metadata.Name == sb.Status.CurrentAgent && a.Metadata.UID == c.UID && a.Status.Attempts == c.Attempt &&
		sb.Status.Control == nil
}

// Startable reports whether a, as read, may start an attempt on sb's
// claim: the claim's agent (same UID, and the spec the scheduler matched
// against the sandbox: same generation), Pending and not being deleted.
// An attempt ended since the claim read the agent does not matter: the
// claim holds the sandbox for whichever attempt comes next.
func Startable(a *api.Agent, sb *api.Sandbox) bool {
	c := sb.Status.Claim
	return c != nil && Pending(a) && a.Metadata.Name == sb.Status.CurrentAgent && a.Metadata.UID == c.UID &&
		a.Metadata.Generation == c.Generation
}

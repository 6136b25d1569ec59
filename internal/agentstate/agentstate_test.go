package agentstate

import (
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// TestClaimAndPhases: a claim binds the agent to the sandbox it names on
// both sides, and the phase predicates follow the agent through an
// attempt that fails with a retry left and one that completes.
func TestClaimAndPhases(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name, a.Metadata.Generation = "job", 3
	a.Spec.Completion.MaxRetries = 1
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name, sb.Status.Node = "desk-1", "n1"
	if !Pending(a) || Bound(a) || Finished(a) {
		t.Fatalf("a new agent: pending %v bound %v finished %v, want pending only", Pending(a), Bound(a), Finished(a))
	}
	claimed, bound := Claim(sb, a, now)
	if claimed.Status.CurrentAgent != "job" || claimed.Status.ClaimedAt == nil || sb.Status.CurrentAgent != "" {
		t.Fatalf("claim: sandbox %+v (the one read: %+v)", claimed.Status, sb.Status)
	}
	if bound.Status.Phase != api.AgentScheduled || bound.Status.Sandbox != "desk-1" || bound.Status.Node != "n1" || bound.Status.ObservedGeneration != 3 || !Bound(bound) || Pending(bound) {
		t.Fatalf("claim: agent %+v", bound.Status)
	}
	if a.Status.Phase != "" {
		t.Fatalf("claim changed the agent it read: %+v", a.Status)
	}
	FailAttempt(bound, "SandboxLost", "gone", now)
	if bound.Status.Phase != api.AgentPending || bound.Status.Sandbox != "" || !Pending(bound) || Finished(bound) {
		t.Fatalf("a failed attempt with a retry left: %+v", bound.Status)
	}
	Complete(bound, &api.AgentResult{Success: true}, now)
	if bound.Status.Phase != api.AgentCompleted || !Finished(bound) || Bound(bound) {
		t.Fatalf("a completed agent: %+v", bound.Status)
	}
}

// TestMCPDeadline: an mcp-agent's attempt ends at its timeout, or sooner
// when it takes heartbeats and the last one (or its start) is older than
// heartbeatSeconds.
func TestMCPDeadline(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := start.Add(d); return &t }
	for _, c := range []struct {
		name      string
		timeout   int // minutes
		heartbeat int // seconds
		last      *time.Time
		want      time.Time
		reason    string
	}{
		{"timeout only", 30, 0, nil, start.Add(30 * time.Minute), "DeadlineExceeded"},
		{"no heartbeat yet", 30, 60, nil, start.Add(time.Minute), "HeartbeatLost"},
		{"a heartbeat moves it", 30, 60, at(10 * time.Minute), start.Add(11 * time.Minute), "HeartbeatLost"},
		{"never past the timeout", 30, 60, at(29*time.Minute + 30*time.Second), start.Add(30 * time.Minute), "DeadlineExceeded"},
		{"an earlier attempt's heartbeat counts not", 30, 60, at(-time.Hour), start.Add(time.Minute), "HeartbeatLost"},
	} {
		a := &api.Agent{}
		a.Spec.Completion.TimeoutMinutes, a.Spec.Completion.HeartbeatSeconds = c.timeout, c.heartbeat
		a.Status.StartedAt, a.Status.HeartbeatAt = &start, c.last
		got, reason, msg := MCPDeadline(a, start)
		if !got.Equal(c.want) || reason != c.reason || msg == "" {
			t.Errorf("%s: %s %s %q, want %s %s", c.name, got, reason, msg, c.want, c.reason)
		}
	}
}

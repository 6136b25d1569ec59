package agentstate

import (
	"encoding/json"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/hvkube/hvkube/internal/api"
)

// TestClaimAndPhases: a claim names the agent on the sandbox and records
// the version and attempt it read; the start written from it alone makes
// the agent Running on that sandbox; and the phase predicates follow the
// agent through an attempt that fails with a retry left and one that
// completes.
func TestClaimAndPhases(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name, a.Metadata.Generation, a.Metadata.UID, a.Metadata.ResourceVersion = "job", 3, "u1", "41"
	a.Spec.Completion.MaxRetries = 1
	a.Status.Conditions = []api.Condition{{Type: "Scheduled", Status: api.ConditionFalse, Reason: "Interrupted"}}
	a.Status.Result = &api.AgentResult{DurationSeconds: 7}
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name, sb.Status.Node, sb.Status.Phase = "desk-1", "n1", api.SandboxPaused
	if !Pending(a) || Bound(a) || Finished(a) {
		t.Fatalf("a new agent: pending %v bound %v finished %v, want pending only", Pending(a), Bound(a), Finished(a))
	}
	claimed := Claim(sb, a, now)
	want := api.AgentClaim{UID: "u1", ResourceVersion: "41", Generation: 3, Attempt: 1}
	if s := claimed.Status; s.CurrentAgent != "job" || s.ClaimedAt == nil || s.Claim == nil || *s.Claim != want || s.Phase != api.SandboxRunning || sb.Status.CurrentAgent != "" {
		t.Fatalf("claim: sandbox %+v (the one read: %+v)", claimed.Status, sb.Status)
	}
	if !Startable(a, claimed) {
		t.Fatalf("the agent the claim read is not startable from it")
	}
	retried := api.DeepCopy(a)
	retried.Status.Attempts, retried.Status.Failures = 1, 1
	if !Startable(retried, claimed) {
		t.Errorf("an agent whose attempt failed since the claim read it (a retry) is not startable from it")
	}
	for _, c := range []struct {
		name   string
		change func(*api.Agent)
	}{
		{"another agent of the name", func(a *api.Agent) { a.Metadata.UID = "u2" }},
		{"its spec changed", func(a *api.Agent) { a.Metadata.Generation++ }},
		{"started since", func(a *api.Agent) { a.Status.Phase, a.Status.Attempts = api.AgentRunning, 1 }},
		{"being deleted", func(a *api.Agent) { a.Metadata.DeletionTimestamp = &now }},
	} {
		b := api.DeepCopy(a)
		c.change(b)
		if Startable(b, claimed) {
			t.Errorf("%s: startable from the claim", c.name)
		}
	}

	later := now.Add(time.Second)
	patch, err := StartPatch(claimed, later)
	if err != nil {
		t.Fatal(err)
	}
	// The patch as a store merges it (RFC 7386), into the agent as the
	// claim read it.
	started := mergeStatus(t, a, patch)
	s := started.Status
	if s.Phase != api.AgentRunning || s.Sandbox != "desk-1" || s.Node != "n1" || s.Attempts != 1 || s.ObservedGeneration != 3 ||
		s.StartedAt == nil || !s.StartedAt.Equal(later) || s.ScheduledAt == nil || !s.ScheduledAt.Equal(now) || !Bound(started) {
		t.Fatalf("started: %+v", s)
	}
	if c := api.FindCondition(s.Conditions, "Scheduled"); c == nil || c.Status != api.ConditionTrue {
		t.Errorf("Scheduled condition %+v, want True", c)
	}
	if c := api.FindCondition(s.Conditions, "Running"); c == nil || c.Status != api.ConditionTrue || c.Reason != "Started" {
		t.Errorf("Running condition %+v, want True (Started)", c)
	}
	if s.Result == nil || s.Result.DurationSeconds != 7 {
		t.Errorf("the start dropped the last result: %+v", s.Result)
	}
	if _, err := StartPatch(sb, later); err == nil {
		t.Errorf("a start from a sandbox with no claim: no error")
	}

	FailAttempt(started, "SandboxLost", "gone", now)
	if started.Status.Phase != api.AgentPending || started.Status.Sandbox != "" || started.Status.FailedSandbox != "desk-1" || !Pending(started) || Finished(started) {
		t.Fatalf("a failed attempt with a retry left: %+v", started.Status)
	}
	Complete(started, &api.AgentResult{Success: true}, now)
	if started.Status.Phase != api.AgentCompleted || !Finished(started) || Bound(started) {
		t.Fatalf("a completed agent: %+v", started.Status)
	}
}

// mergeStatus applies a JSON merge patch of the status to a copy of a.
func mergeStatus(t *testing.T, a *api.Agent, patch []byte) *api.Agent {
	t.Helper()
	base, err := json.Marshal(a.Status)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := jsonpatch.MergePatch(base, patch)
	if err != nil {
		t.Fatal(err)
	}
	out := api.DeepCopy(a)
	out.Status = api.AgentStatus{}
	if err := json.Unmarshal(merged, &out.Status); err != nil {
		t.Fatal(err)
	}
	return out
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

// TestReleased: a sandbox is free for another claim while its claim still
// names an agent only when that agent finished the attempt the claim
// started and said the sandbox was reset before it (releasedSandbox), and
// no person holds the sandbox; the next start clears what it said.
func TestReleased(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	done := func(edit func(a *api.Agent, sb *api.Sandbox)) (*api.Agent, *api.Sandbox) {
		a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
		a.Metadata.Name, a.Metadata.UID, a.Metadata.ResourceVersion, a.Metadata.Generation = "job", "u1", "7", 1
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = "sb"
		sb = Claim(sb, a, now)
		a.Status.Phase, a.Status.Sandbox, a.Status.Attempts, a.Status.ReleasedSandbox = api.AgentCompleted, "sb", 1, "sb"
		if edit != nil {
			edit(a, sb)
		}
		return a, sb
	}
	tests := []struct {
		name string
		edit func(a *api.Agent, sb *api.Sandbox)
		want bool
	}{
		{"completed, released", nil, true},
		{"failed for good, released", func(a *api.Agent, _ *api.Sandbox) { a.Status.Phase = api.AgentFailed }, true},
		{"not said", func(a *api.Agent, _ *api.Sandbox) { a.Status.ReleasedSandbox = "" }, false},
		{"another sandbox said", func(a *api.Agent, _ *api.Sandbox) { a.Status.ReleasedSandbox = "other" }, false},
		{"still running", func(a *api.Agent, _ *api.Sandbox) { a.Status.Phase = api.AgentRunning }, false},
		{"pending again", func(a *api.Agent, _ *api.Sandbox) { a.Status.Phase = api.AgentPending }, false},
		{"a later attempt", func(a *api.Agent, _ *api.Sandbox) { a.Status.Attempts = 2 }, false},
		{"another agent of the name", func(a *api.Agent, _ *api.Sandbox) { a.Metadata.UID = "u2" }, false},
		{"claimed by another", func(_ *api.Agent, sb *api.Sandbox) { sb.Status.CurrentAgent = "other" }, false},
		{"no claim recorded", func(_ *api.Agent, sb *api.Sandbox) { sb.Status.Claim = nil }, false},
		{"held by a person", func(_ *api.Agent, sb *api.Sandbox) {
			sb.Status.Control = &api.SandboxControl{ID: "c", Holder: "alice", Since: now}
		}, false},
	}
	for _, tt := range tests {
		a, sb := done(tt.edit)
		if got := Released(sb, a); got != tt.want {
			t.Errorf("%s: Released %v, want %v", tt.name, got, tt.want)
		}
	}
	if Released(&api.Sandbox{}, nil) {
		t.Error("Released with no agent in the cache")
	}

	// The next start clears it.
	a, sb := done(nil)
	a.Status.Phase = api.AgentPending
	next := Claim(sb, a, now)
	patch, err := StartPatch(next, now)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(a.Status)
	merged, err := jsonpatch.MergePatch(doc, patch)
	if err != nil {
		t.Fatal(err)
	}
	var st api.AgentStatus
	if err := json.Unmarshal(merged, &st); err != nil {
		t.Fatal(err)
	}
	if st.ReleasedSandbox != "" || st.Phase != api.AgentRunning {
		t.Errorf("after the start: phase %s, releasedSandbox %q; want Running and nothing said", st.Phase, st.ReleasedSandbox)
	}
}

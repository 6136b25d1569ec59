package node

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/drivers/fake"
)

// checkpointAgent is a workflow agent with checkpoints on pool web: it
// types a, b and c between short waits, then waits last seconds.
func checkpointAgent(last string) string {
	return `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  type: workflow
  sandboxSelector: {pool: web}
  checkpoint: {everyMinutes: 1}
  task:
    steps:
    - {action: type, text: "a"}
    - {action: wait, duration: 0.3}
    - {action: type, text: "b"}
    - {action: wait, duration: 0.3}
    - {action: type, text: "c"}
    - {action: wait, duration: ` + last + `}
`
}

// TestNodeRestartResumesFromCheckpoint: an agent with checkpoints whose
// node restarts mid-run goes on from its latest checkpoint, the same
// attempt, without running its done steps again; it completes once, and
// its result says where it went on from.
func TestNodeRestartResumesFromCheckpoint(t *testing.T) {
	c := newClusterWith(t, clusterOptions{checkpointUnit: 100 * time.Millisecond})
	c.create(t, yamlObj(t, poolYAML("web", 1, "")))
	member := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	c.create(t, yamlObj(t, checkpointAgent("2")))
	eventually(t, "a checkpoint after the second wait, and the agent in its last wait", func() (bool, string) {
		a := c.agent(t, "job")
		ck := a.Status.Checkpoint
		return c.be.Typed(member) == "abc" && ck != nil && ck.Steps >= 4, fmt.Sprintf("typed %q, checkpoint %+v", c.be.Typed(member), ck)
	})
	before := c.agent(t, "job").Status.Checkpoint
	if before.Attempt != 1 || before.Count < 1 || len(before.Results) != before.Steps || !before.Results[0].OK {
		t.Errorf("checkpoint %+v: want attempt 1 with the results of its steps done", before)
	}
	c.restart(t)
	a := c.waitAgent(t, "job", api.AgentCompleted)
	if got, want := [2]int{a.Status.Attempts, a.Status.Failures}, [2]int{1, 0}; got != want {
		t.Errorf("attempts/failures %v, want %v: the attempt goes on", got, want)
	}
	if a.Status.Result == nil || a.Status.Result.ResumedFrom == nil || len(a.Status.Result.Steps) != 6 {
		t.Fatalf("result %+v: want 6 steps and where it went on from", a.Status.Result)
	}
	ck := a.Status.Checkpoint
	if ck == nil || ck.Resumes != 1 || ck.ResumedAt == nil || ck.Attempt != 1 {
		t.Errorf("checkpoint after the resume %+v, want one resume", ck)
	}
	if got := c.be.Count(fake.OpRestoreCkpt); got != 1 {
		t.Errorf("%d checkpoint restores, want 1", got)
	}
	// a and b were typed once: the done steps did not run again (c is
	// typed again if the checkpoint came before it).
	if typed := c.be.Typed(member); !strings.HasPrefix(typed, "abc") || strings.Count(typed, "a") != 1 || strings.Count(typed, "b") != 1 {
		t.Errorf("typed %q, want a and b once", typed)
	}
	c.waitEvents(t, api.KindAgent, "job", "Completed", 1) // recorded just after the status
	evs := c.events(t, api.KindAgent, "job", "Interrupted", "ResumedFromCheckpoint", "Completed", "Failed")
	if got, want := fmt.Sprint(evs), "[ResumedFromCheckpoint Completed]"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	c.waitReleased(t, member, api.SandboxPaused)
	// Nothing runs it again.
	time.Sleep(500 * time.Millisecond)
	if got := count(c.events(t, api.KindAgent, "job"), "Completed"); got != 1 {
		t.Errorf("%d Completed events, want 1", got)
	}
}

// checkpointedJob is a cluster with a pool of one, member, whose agent
// job (checkpointAgent) has a checkpoint and is in its last wait.
func checkpointedJob(t *testing.T) (c *cluster, member string) {
	t.Helper()
	c = newClusterWith(t, clusterOptions{checkpointUnit: 100 * time.Millisecond})
	c.create(t, yamlObj(t, poolYAML("web", 1, "")))
	member = c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	c.create(t, yamlObj(t, checkpointAgent("2")))
	eventually(t, "a checkpoint, and the agent in its last wait", func() (bool, string) {
		ck := c.agent(t, "job").Status.Checkpoint
		return c.be.Typed(member) == "abc" && ck != nil, fmt.Sprintf("typed %q", c.be.Typed(member))
	})
	return c, member
}

// TestCheckpointLostStartsOver: when the checkpoint cannot be brought back
// (here the backend refuses), the attempt is put back and runs again from
// the start, as without checkpoints.
func TestCheckpointLostStartsOver(t *testing.T) {
	c, member := checkpointedJob(t)
	c.be.FailNext(fake.OpRestoreCkpt, member, fmt.Errorf("the checkpoint's files are gone: %w", api.ErrNotFound))
	c.restart(t)
	a := c.waitAgent(t, "job", api.AgentCompleted)
	if got, want := [2]int{a.Status.Attempts, a.Status.Failures}, [2]int{2, 0}; got != want {
		t.Errorf("attempts/failures %v, want %v: put back, not failed", got, want)
	}
	if a.Status.Result == nil || a.Status.Result.ResumedFrom != nil {
		t.Errorf("result %+v: want one run from the start", a.Status.Result)
	}
	c.waitEvents(t, api.KindAgent, "job", "Completed", 1)
	evs := c.events(t, api.KindAgent, "job", "CheckpointLost", "Interrupted", "Completed")
	if got, want := fmt.Sprint(evs), "[CheckpointLost Interrupted Completed]"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
}

// TestCheckpointRestoredAgain: a restored desktop whose guest does not
// answer in time (a busy host) is restored from its checkpoint once more,
// and the attempt goes on from it rather than starting over.
func TestCheckpointRestoredAgain(t *testing.T) {
	c, member := checkpointedJob(t)
	c.be.FailNext(fake.OpResume, member, errors.New("resume: guest agent: qga guest-ping: context deadline exceeded"))
	c.restart(t)
	a := c.waitAgent(t, "job", api.AgentCompleted)
	if got, want := [2]int{a.Status.Attempts, a.Status.Failures}, [2]int{1, 0}; got != want {
		t.Errorf("attempts/failures %v, want %v: the attempt goes on", got, want)
	}
	if a.Status.Result == nil || a.Status.Result.ResumedFrom == nil {
		t.Errorf("result %+v: want it to go on from the checkpoint", a.Status.Result)
	}
	if got := c.be.Count(fake.OpRestoreCkpt); got != 2 {
		t.Errorf("%d checkpoint restores, want 2", got)
	}
}

package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// Checkpoints of long attempts (spec.checkpoint). While an attempt runs,
// its desktop is saved every spec.checkpoint.everyMinutes
// (backend.Checkpointer: the guest stands stopped for the copy), between
// two steps of a workflow, and the agent's status records it with the
// steps done and their results. When the node starts again and finds the
// attempt Running but not run by it (the server or the host restarted),
// it brings the desktop back to the latest checkpoint and goes on from
// there, the same attempt: a workflow from the step after the last one
// done, a command from its start, on the desktop as it was, with
// HVKUBE_RESUMED_FROM in its environment. The result's resumedFrom says
// so. Without a checkpoint of the running attempt, the attempt is put
// back and runs again from the start, as before.

// progress is where an attempt's workflow is: its steps done, with their
// results. A checkpoint of a workflow is taken between two steps, by the
// workflow itself: the interval only marks one due.
type progress struct {
	results []api.StepResult
	due     atomic.Bool
	// taken hears of each checkpoint taken while due.
	taken chan struct{}
	// take takes a checkpoint with the results of the steps done; nil
	// when the attempt takes none.
	take func(results []api.StepResult)
}

func newProgress() *progress { return &progress{taken: make(chan struct{}, 1)} }

// between takes the checkpoint that is due, if one is: the workflow calls
// it before each step.
func (p *progress) between() {
	if p.take != nil && p.due.Swap(false) {
		p.take(slices.Clone(p.results))
		select {
		case p.taken <- struct{}{}:
		default:
		}
	}
}

// checkpointer returns the backend's checkpoints when a asks for them and
// the backend can take them.
func (n *Node) checkpointer(a *api.Agent) (backend.Checkpointer, bool) {
	if a.Spec.Checkpoint == nil || a.Spec.Type == "mcp-agent" {
		return nil, false
	}
	ck, ok := n.be.(backend.Checkpointer)
	return ck, ok
}

// checkpointEvery is a's interval between checkpoints.
func (n *Node) checkpointEvery(a *api.Agent) time.Duration {
	unit := time.Minute
	if n.checkpointUnit > 0 {
		unit = n.checkpointUnit
	}
	return time.Duration(a.Spec.Checkpoint.EveryMinutes) * unit
}

// checkpointLoop takes a's checkpoints until ctx ends, when a asks for
// them and the backend can, each an interval after the last ended: a
// workflow's are marked due for the workflow to take between two steps
// (pg), others' are taken at once.
func (n *Node) checkpointLoop(ctx context.Context, a *api.Agent, pg *progress, lg *runLog) {
	if a.Spec.Checkpoint == nil || a.Spec.Type == "mcp-agent" {
		return
	}
	ck, ok := n.checkpointer(a)
	if !ok {
		lg.printf("checkpoints: the %s backend cannot take them; the attempt runs without", n.be.Name())
		return
	}
	every := n.checkpointEvery(a)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if a.Spec.Type == "workflow" {
			pg.due.Store(true)
			select {
			case <-ctx.Done():
				return
			case <-pg.taken:
			}
		} else {
			n.checkpoint(ctx, ck, a, nil, lg)
		}
		// The interval runs from the end of the checkpoint.
		t.Reset(every)
	}
}

// checkpoint saves the attempt's desktop and records it, with the results
// of the workflow's steps done.
func (n *Node) checkpoint(ctx context.Context, ck backend.Checkpointer, a *api.Agent, results []api.StepResult, lg *runLog) {
	name, sandbox, attempt := a.Metadata.Name, a.Status.Sandbox, a.Status.Attempts
	stopped, err := ck.Checkpoint(ctx, sandbox)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return
	case errors.Is(err, api.ErrConflict):
		// Saved to disk meanwhile (an idle save while the agent waits
		// for a person): the saved state stands for now.
		lg.printf("no checkpoint now: %v", err)
		return
	default:
		lg.printf("checkpoint failed: %v", err)
		n.event(ctx, a, api.EventWarning, "CheckpointFailed", fmt.Sprintf("attempt %d: %v", attempt, n.maskText(sandbox, err.Error())))
		return
	}
	at := n.now().UTC()
	out, err := n.updateAgent(ctx, name, func(cur *api.Agent) bool {
		if cur.Status.Phase != api.AgentRunning || cur.Status.Attempts != attempt {
			return false
		}
		c := &api.CheckpointStatus{Attempt: attempt, At: at, Count: 1, Steps: len(results), Results: results}
		if old := cur.Status.Checkpoint; old != nil && old.Attempt == attempt {
			c.Count, c.Resumes, c.ResumedAt = old.Count+1, old.Resumes, old.ResumedAt
		}
		cur.Status.Checkpoint = c
		return true
	})
	if err != nil {
		lg.printf("checkpoint taken, but not recorded: %v", err)
		return
	}
	msg := fmt.Sprintf("attempt %d: desktop saved with %d steps done; the guest stood stopped %s", attempt, len(results), stopped.Round(time.Millisecond))
	if a.Spec.Type != "workflow" {
		msg = fmt.Sprintf("attempt %d: desktop saved; the guest stood stopped %s", attempt, stopped.Round(time.Millisecond))
	}
	lg.printf("checkpoint: %s", msg)
	n.event(ctx, out, api.EventNormal, "Checkpointed", msg)
}

// checkpointOf returns the checkpoint a's running attempt can go on from
// on this node, or nil.
func (n *Node) checkpointOf(a *api.Agent) *api.CheckpointStatus {
	c := a.Status.Checkpoint
	if c == nil || c.Attempt != a.Status.Attempts {
		return nil
	}
	if _, ok := n.checkpointer(a); !ok {
		return nil
	}
	return c
}

// resumeRun goes on with a's running attempt from its checkpoint c, once:
// the agent's status records the resume, conditioned on what was read.
func (n *Node) resumeRun(ctx context.Context, a *api.Agent, c *api.CheckpointStatus, now time.Time) (reconcile.Result, error) {
	if n.runs.get(a.Metadata.Name) != nil {
		return reconcile.Result{}, nil
	}
	attempt := a.Status.Attempts
	out, err := reconcile.UpdateStatusFrom(ctx, n.st, api.KindAgent, a, func(cur *api.Agent) bool {
		cc := cur.Status.Checkpoint
		if cur.Status.Phase != api.AgentRunning || cur.Status.Attempts != attempt || cc == nil || cc.Attempt != attempt || !cc.At.Equal(c.At) {
			return false
		}
		cc.Resumes++
		cc.ResumedAt = &now
		cur.Status.Message = fmt.Sprintf("attempt %d goes on from its checkpoint of %s (%d steps done) after node %s restarted", attempt, cc.At.Format(time.RFC3339), cc.Steps, n.name)
		return true
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	cc := out.Status.Checkpoint
	if out.Status.Phase != api.AgentRunning || cc == nil || cc.ResumedAt == nil || !cc.ResumedAt.Equal(now) {
		return reconcile.Result{}, nil // changed meanwhile: back here through the watch
	}
	n.event(ctx, out, api.EventNormal, "ResumedFromCheckpoint", out.Status.Message)
	return n.launch(out, now, cc), nil
}

// restoreTries is how many times a checkpoint is restored before its
// attempt starts over.
const restoreTries = 2

// restoreCheckpoint brings the attempt's sandbox back to its checkpoint
// and runs it, as acquire does a clean one.
func (n *Node) restoreCheckpoint(ctx context.Context, name, agent string, c *api.CheckpointStatus) error {
	ck, _ := n.be.(backend.Checkpointer)
	unlock := n.locks.lock(name)
	defer unlock()
	sb, err := n.claimedBy(ctx, name, agent)
	if err != nil {
		return err
	}
	start := n.now()
	// A restored guest that is slow to answer (a busy host) is brought
	// back from the checkpoint once more before the attempt gives up
	// what it did since the start.
	for try := 1; ; try++ {
		err = ck.RestoreCheckpoint(ctx, name)
		if err == nil {
			err = n.be.Resume(ctx, name)
		}
		if err == nil {
			break
		}
		if try == restoreTries || errors.Is(err, api.ErrNotFound) || ctx.Err() != nil {
			return err
		}
		n.log.Warn("a checkpoint's restore failed: trying again", "sandbox", name, "agent", agent, "err", err)
	}
	n.setHolder(name, agent)
	took := n.now().Sub(start)
	pid := n.pidAfter(ctx, sb, false)
	msg := fmt.Sprintf("restored the checkpoint of %s for agent %s in %s", c.At.Format(time.RFC3339), agent, took.Round(time.Millisecond))
	n.event(ctx, sb, api.EventNormal, "Acquired", msg)
	return n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		now := n.now().UTC()
		s.Phase, s.Reason, s.Message, s.PID = api.SandboxRunning, "Acquired", fmt.Sprintf("in use by agent %s (from its checkpoint)", agent), pid
		s.LastResumedAt = &now
	})
}

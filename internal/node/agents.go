package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// run is an agent's attempt in progress on this node.
type run struct {
	attempt int
	cancel  context.CancelFunc
	// fence ends the attempt with errFenced as its cause: it writes
	// nothing.
	fence func()
	done  chan struct{}
}

// runs tracks the attempts this node runs, so that none runs twice at once
// and a deleted agent's run is stopped.
type runs struct {
	mu sync.Mutex // guards m
	m  map[string]*run
	wg sync.WaitGroup
}

func (r *runs) get(name string) *run {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[name]
}

// reconcileAgent runs the agents bound to this node's sandboxes: it starts
// an attempt on a sandbox claimed for the agent (or a Scheduled agent's,
// bound the older way), stops the attempt of a deleted one, ends an
// mcp-agent whose deadline passed, and puts back an agent whose attempt a
// restart of this node cut short. It reads the agent as the node's watch
// shows it, unless a write of the node's own is in flight (read): what
// others wrote since arrives in order, and each write here is conditioned
// on what it read. An agent claimed and not started yet is not in the
// node's watch: the claim says what the node needs of it.
func (n *Node) reconcileAgent(ctx context.Context, name string) (reconcile.Result, error) {
	if sb := n.claimOf(ctx, name); sb != nil {
		var cached *api.Agent
		if c := n.cache(api.KindAgent); c != nil {
			if o, ok := c.Latest(name); ok {
				cached = o.(*api.Agent)
			}
		} else if o, err := n.st.Get(ctx, api.KindAgent, name); err == nil {
			cached = o.(*api.Agent) // a node driven directly keeps no cache
		}
		if n.toStart(sb, cached) {
			return n.startClaimed(ctx, sb, cached)
		}
	}
	o, err := n.read(ctx, api.KindAgent, name)
	return n.reconcileAgentAs(ctx, name, o, err)
}

// reconcileAgentAs is reconcileAgent on agent name as read (o, err).
func (n *Node) reconcileAgentAs(ctx context.Context, name string, o api.Object, err error) (reconcile.Result, error) {
	if errors.Is(err, api.ErrNotFound) {
		if n.stopRun(name) {
			return reconcile.Result{}, nil // back here when the run has ended
		}
		n.removeAgentFiles(name)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	a := o.(*api.Agent)
	if r := n.runs.get(name); r != nil && takenAway(a, r.attempt) {
		// The cluster ended this attempt (its node was lost) or runs a
		// newer one elsewhere: it stops here too.
		n.log.Warn("ending an attempt the cluster took away from this node", "agent", name, "attempt", r.attempt, "reason", a.Status.Reason)
		r.cancel()
	}
	if n.fenced() {
		// Nothing starts, and nothing is put back, until the node writes
		// its Node object again (rejoin looks at every agent then).
		return reconcile.Result{RequeueAfter: n.statusEvery()}, nil
	}
	if a.Status.Node != "" && a.Status.Node != n.name {
		return reconcile.Result{}, nil // another node's
	}
	now := n.now()
	switch {
	case a.Metadata.DeletionTimestamp != nil && a.Status.Node == "" && n.opt.WaitForPlacement && n.runs.get(name) == nil:
		// Bound to no node: in a cluster its finalizer is the agent
		// controller's to remove (a node's write to it is refused).
		return reconcile.Result{}, nil
	case a.Metadata.DeletionTimestamp != nil:
		if sb := n.claimOf(ctx, name); sb != nil && !agentstate.Bound(a) {
			// Claimed, not started: the claim goes with it.
			if err := n.dropClaim(ctx, sb, "it is being deleted"); err != nil {
				return reconcile.Result{}, err
			}
		}
		if n.stopRun(name) {
			// The attempt releases its sandbox as it ends (a reset takes
			// seconds), and the agent comes back here then: no worker
			// waits for it.
			return reconcile.Result{}, nil
		}
		if agentstate.Bound(a) {
			if err := n.release(ctx, a.Status.Sandbox, name); err != nil {
				return reconcile.Result{}, err
			}
			if !agentstate.Finished(a) {
				n.event(ctx, a, api.EventNormal, "Cancelled", fmt.Sprintf("deleted while %s; sandbox %s released", a.Status.Phase, a.Status.Sandbox))
			}
		}
		return reconcile.Result{}, reconcile.RemoveFinalizer(ctx, n.st, a, api.FinalizerRun)
	case agentstate.Finished(a):
		// A run that ended while the node stopped may still hold its
		// sandbox; release is a no-op once the claim is gone.
		if a.Status.Sandbox != "" && n.runs.get(name) == nil {
			return reconcile.Result{}, n.release(ctx, a.Status.Sandbox, name)
		}
		return reconcile.Result{}, nil
	case agentstate.Pending(a):
		return reconcile.Result{}, nil
	case a.Status.Phase == api.AgentScheduled && a.Status.Sandbox != "":
		return n.startRun(ctx, a, now)
	case a.Status.Phase == api.AgentRunning && a.Status.Sandbox != "":
		if r := n.runs.get(name); r != nil && r.attempt == a.Status.Attempts {
			return reconcile.Result{}, nil
		}
		if a.Spec.Type == "mcp-agent" {
			return n.watchMCP(ctx, a, now)
		}
		// Running here, but not by this process: the server restarted
		// during the attempt. It goes on from its checkpoint if it has
		// one (checkpoint.go), else runs again from the start on a clean
		// sandbox; it is not the agent's failure.
		if c := n.checkpointOf(a); c != nil {
			return n.resumeRun(ctx, a, c, now)
		}
		return n.interrupt(ctx, a, now)
	}
	return reconcile.Result{}, nil
}

// takenAway reports whether the stored agent says the attempt this node
// runs is no longer its to run: failed as NodeLost, or followed by a newer
// attempt (which another node started: this one starts none while a run
// of the agent lasts).
func takenAway(a *api.Agent, attempt int) bool {
	if a.Status.Attempts > attempt {
		return true
	}
	return a.Status.Attempts == attempt && a.Status.Phase != api.AgentRunning && a.Status.Reason == reasonNodeLost
}

// interrupt puts back an agent whose attempt a restart of this node cut
// short, then releases its sandbox. The order matters: while the claim
// stands, the pool keeps the sandbox (even one whose VM did not survive
// the restart) and the agent controller sees the agent hold it; a claim
// released first would let the sandbox be replaced and the attempt be
// failed as SandboxLost before it is marked Interrupted.
func (n *Node) interrupt(ctx context.Context, a *api.Agent, now time.Time) (reconcile.Result, error) {
	name, sandbox, attempt := a.Metadata.Name, a.Status.Sandbox, a.Status.Attempts
	interrupted := false
	out, err := n.updateAgent(ctx, name, func(cur *api.Agent) bool {
		interrupted = false
		if cur.Status.Phase != api.AgentRunning || cur.Status.Attempts != attempt || cur.Status.Sandbox != sandbox {
			return false // ended meanwhile: its claim goes as any ended attempt's does
		}
		msg := fmt.Sprintf("attempt %d was cut short when node %s restarted; it runs again on a clean sandbox", attempt, n.name)
		if n.endedByFence(name, attempt) {
			msg = fmt.Sprintf("attempt %d was ended when node %s fenced itself (it could not write its Node object for %s); it runs again on a clean sandbox", attempt, n.name, n.fenceAfter())
		}
		agentstate.Interrupt(cur, msg, now)
		interrupted = true
		return true
	})
	if err != nil || !interrupted {
		return reconcile.Result{}, err
	}
	n.event(ctx, out, api.EventWarning, "Interrupted", out.Status.Message)
	if err := n.release(ctx, sandbox, name); err != nil {
		// A retry would find the agent Pending and do nothing: the claim
		// left is checkClaim's, and a sandbox whose VM is gone the pool's.
		n.log.Warn("release the sandbox of an interrupted attempt", "agent", name, "sandbox", sandbox, "err", err)
	}
	return reconcile.Result{}, nil
}

// startRun marks a Scheduled agent Running, conditioned on the status it
// read (so one attempt starts once), and runs the attempt in the
// background. An mcp-agent's attempt is the external agent's: it only gets
// its sandbox running and a deadline.
func (n *Node) startRun(ctx context.Context, a *api.Agent, now time.Time) (reconcile.Result, error) {
	if n.runs.get(a.Metadata.Name) != nil {
		return reconcile.Result{}, nil // the last attempt is still ending
	}
	if n.fenced() {
		return reconcile.Result{RequeueAfter: n.statusEvery()}, nil
	}
	sb, err := n.claimed(ctx, a.Status.Sandbox)
	if err != nil {
		return reconcile.Result{}, err
	}
	if sb.Status.CurrentAgent != a.Metadata.Name {
		// The claim is written first and the agent right after, and the
		// two watches need not bring them in that order: the claim's
		// watch event asks for the agent again (Register). Look again
		// now and then in any case, until the agent controller gives up
		// on a claim that never came.
		return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
	}
	sandbox := a.Status.Sandbox
	started, err := reconcile.UpdateStatusFrom(ctx, n.st, api.KindAgent, a, func(cur *api.Agent) bool {
		if cur.Status.Phase != api.AgentScheduled || cur.Status.Sandbox != sandbox || cur.Metadata.DeletionTimestamp != nil {
			return false
		}
		cur.Status.Phase, cur.Status.Reason = api.AgentRunning, "Running"
		cur.Status.Message = fmt.Sprintf("attempt %d on sandbox %s", cur.Status.Attempts+1, sandbox)
		cur.Status.Attempts++
		cur.Status.StartedAt = &now
		cur.Status.Node = n.name
		cur.Status.ObservedGeneration = cur.Metadata.Generation
		api.SetCondition(&cur.Status.Conditions, api.Condition{Type: "Running", Status: api.ConditionTrue, Reason: "Started",
			Message: cur.Status.Message, ObservedGeneration: cur.Metadata.Generation}, now)
		return true
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	if started.Status.Phase != api.AgentRunning || started.Status.StartedAt == nil || !started.Status.StartedAt.Equal(now) {
		return reconcile.Result{}, nil
	}
	return n.launch(started, now, nil), nil
}

// launch runs the attempt started (the agent as its start wrote it, at
// now) in the background; from, when set, is the checkpoint it goes on
// from (the agent as its resume wrote it).
func (n *Node) launch(started *api.Agent, now time.Time, from *api.CheckpointStatus) reconcile.Result {
	r := &run{attempt: started.Status.Attempts, done: make(chan struct{})}
	// Context deadlines run on the wall clock, whatever the node's clock.
	fctx, fence := context.WithCancelCause(n.runCtx)
	rctx, cancel := context.WithTimeout(fctx, agentstate.Timeout(started))
	r.cancel = cancel
	r.fence = func() { fence(errFenced) }
	n.runs.mu.Lock()
	n.runs.m[started.Metadata.Name] = r
	n.runs.mu.Unlock()
	n.runs.wg.Add(1)
	go func() {
		defer n.runs.wg.Done()
		defer close(r.done)
		defer fence(nil)
		defer cancel()
		n.attempt(rctx, started, from)
		n.runs.mu.Lock()
		if n.runs.m[started.Metadata.Name] == r {
			delete(n.runs.m, started.Metadata.Name)
		}
		n.runs.mu.Unlock()
		if n.agentsQ != nil {
			n.agentsQ.Add(started.Metadata.Name)
		}
	}()
	return reconcile.Result{}
}

// stopRun cancels the attempt of agent name, if this node runs one, and
// reports whether it is still ending: the run puts the agent back in the
// queue when it has. Without a queue (a node driven directly) it waits
// for the run to end and reports false.
func (n *Node) stopRun(name string) bool {
	r := n.runs.get(name)
	if r == nil {
		return false
	}
	r.cancel()
	if n.agentsQ != nil {
		return true
	}
	<-r.done
	return false
}

// startedEvent says that a's attempt started, once its sandbox is
// acquired (how: what was done): the one event of a claim's start, its
// sandbox's included.
func (n *Node) startedEvent(ctx context.Context, a *api.Agent, how string) {
	msg := a.Status.Message + ": " + how
	if at := a.Status.ScheduledAt; at != nil {
		msg += fmt.Sprintf(", claimed %s before", n.now().Sub(*at).Round(time.Millisecond))
	}
	n.event(ctx, a, api.EventNormal, "Started", msg)
}

// attempt runs one attempt of a, writes its outcome, and releases the
// sandbox. A run cut short by the node stopping writes nothing: the next
// start of the node runs the attempt again, from its checkpoint if it has
// one (from, then).
func (n *Node) attempt(ctx context.Context, a *api.Agent, from *api.CheckpointStatus) {
	name, sandbox, attempt := a.Metadata.Name, a.Status.Sandbox, a.Status.Attempts
	bg := context.WithoutCancel(ctx)
	dir := n.attemptDir(name, attempt)
	lg := n.newRunLog(a, attempt)
	defer lg.Close()
	lg.printf("attempt %d of agent %s (%s) on sandbox %s, node %s", attempt, name, a.Spec.Type, sandbox, n.name)
	start := n.now()
	var res *api.AgentResult
	pg := newProgress()
	var err error
	if from != nil {
		if err = n.restoreCheckpoint(ctx, sandbox, name, from); err != nil {
			lg.printf("the checkpoint of %s could not be restored: %v; the attempt runs again from the start", from.At.Format(time.RFC3339), err)
			n.event(bg, a, api.EventWarning, "CheckpointLost", fmt.Sprintf("attempt %d: the checkpoint of %s could not be restored: %v", attempt, from.At.Format(time.RFC3339), err))
			if _, err := n.interrupt(bg, a, n.now()); err != nil {
				lg.printf("could not put the attempt back: %v", err)
			}
			return
		}
		pg.results = slices.Clone(from.Results)
		lg.printf("sandbox %s restored to the checkpoint of %s (%d steps done) in %s", sandbox, from.At.Format(time.RFC3339), from.Steps, n.now().Sub(start).Round(time.Millisecond))
	} else {
		var how string
		if how, err = n.acquire(ctx, sandbox, name); err == nil {
			lg.printf("sandbox %s %s", sandbox, how)
			n.startedEvent(bg, a, how)
		}
	}
	if err == nil {
		err = n.claimSession(ctx, a, lg)
	}
	if ck, ok := n.checkpointer(a); ok {
		pg.take = func(results []api.StepResult) { n.checkpoint(ctx, ck, a, results, lg) }
	}
	if err == nil {
		cctx, stop := context.WithCancel(ctx)
		loop := make(chan struct{})
		go func() {
			defer close(loop)
			n.checkpointLoop(cctx, a, pg, lg)
		}()
		res, err = n.execute(ctx, a, dir, lg, pg)
		stop()
		<-loop
	}
	if res != nil && from != nil {
		at := from.At
		res.ResumedFrom = &at
	}
	if err != nil {
		err = maskedError{err, n.maskText(sandbox, err.Error())}
	}
	if res == nil {
		res = &api.AgentResult{}
	}
	if n.runCtx.Err() != nil {
		lg.printf("the node is stopping: the attempt will run again when it starts")
		return
	}
	if errors.Is(context.Cause(ctx), errFenced) {
		// Neither the outcome nor the release: the cluster fails the
		// attempt as NodeLost, or this node puts it back when it writes
		// again.
		lg.printf("the node fenced itself (it could not write its Node object for %s): the attempt ends here, unrecorded", n.fenceAfter())
		return
	}
	if errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, errEndedElsewhere) {
		lg.printf("ended: %v", err)
		if errors.Is(err, errEndedElsewhere) {
			n.addArtifacts(bg, name, attempt, res.Artifacts, lg)
		}
		n.releaseLogged(bg, sandbox, name, lg)
		return
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && err == nil {
		err = fmt.Errorf("no result within %s", agentstate.Timeout(a))
	}
	n.collect(bg, a, sandbox, dir, res, lg)
	res.DurationSeconds = n.now().Sub(start).Seconds()
	if err == nil && !res.Success {
		err = errors.New("the agent reported failure")
	}
	now := n.now()
	reason := "Failed"
	var lost heartbeatLost
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		reason = "DeadlineExceeded"
	case errors.As(err, &lost):
		reason = "HeartbeatLost"
	}
	written := func(out *api.Agent, uerr error) {
		switch {
		case uerr != nil:
			lg.printf("could not record the outcome: %v", uerr)
		case err == nil:
			lg.printf("completed in %.1fs", res.DurationSeconds)
			n.event(bg, out, api.EventNormal, "Completed", fmt.Sprintf("attempt %d succeeded in %.1fs on sandbox %s", attempt, res.DurationSeconds, sandbox))
		default:
			lg.printf("failed: %v", err)
			n.event(bg, out, api.EventWarning, reason, fmt.Sprintf("attempt %d: %v", attempt, err))
		}
	}
	released := n.finishAttempt(bg, sandbox, name, lg, func(cur *api.Agent) bool {
		if cur.Status.Phase != api.AgentRunning || cur.Status.Attempts != attempt {
			return false // deleted, or ended by the controller meanwhile
		}
		if err == nil {
			agentstate.Complete(cur, res, now)
		} else {
			cur.Status.Result = res
			failAttempt(cur, reason, err.Error(), now)
		}
		return true
	}, written)
	if !released {
		n.releaseLogged(bg, sandbox, name, lg)
	}
}

// finishAttempt writes an attempt's outcome (end changes the agent as
// read; false leaves it) and tells written how that went, at once. A
// pool's sandbox kept warm in memory is reset first, under its lock, and
// an outcome that ends the agent says so
// (api.AgentStatus.ReleasedSandbox): the scheduler may claim the sandbox
// for another agent at once, and that claim's write is the release's
// (deferRelease). The reset costs the outcome a few milliseconds (a spare
// swapped in) and saves a write of the sandbox per claim; one that takes
// longer than earlyReleaseWait is not waited for: the outcome is written
// without it, and the release after it, as any other. released says the
// sandbox was given back here, written or deferred.
func (n *Node) finishAttempt(ctx context.Context, sandbox, agent string, lg *runLog, end func(*api.Agent) bool, written func(*api.Agent, error)) (released bool) {
	if !n.releasesEarly(ctx, sandbox, agent) {
		written(n.updateAgent(ctx, agent, end))
		return false
	}
	type undone struct {
		r   *releasing
		err error
	}
	undo := make(chan undone, 1)
	marked := make(chan bool, 1)
	done := make(chan struct{})
	// The attempt lasts until its sandbox is released (written or
	// deferred): while it does, the node starts no other attempt of the
	// agent on the claim the release clears.
	defer func() { <-done }()
	n.deferred.begin(sandbox)
	go func() {
		defer close(done)
		unlock := n.locks.lock(sandbox)
		defer unlock()
		// Ended before the lock goes: the next claim's acquire, which
		// waits for it, must find the sandbox given back (deferred, or
		// written), not still being released, or its agent's first
		// input would be refused as to a paused desktop.
		defer n.deferred.end(sandbox)
		r, err := n.undoClaim(ctx, sandbox, agent, false)
		undo <- undone{r, err}
		if r == nil {
			return
		}
		if <-marked {
			n.deferRelease(r)
			return
		}
		if err := n.writeRelease(ctx, r); err != nil {
			lg.printf("release sandbox %s: %v", sandbox, err)
			n.log.Warn("release sandbox", "sandbox", sandbox, "agent", agent, "err", err)
		}
	}()
	var u undone
	early := false
	t := time.NewTimer(earlyReleaseWait)
	select {
	case u = <-undo:
		early = true
	case <-t.C:
	}
	t.Stop()
	mark := false
	out, err := n.updateAgent(ctx, agent, func(cur *api.Agent) bool {
		mark = false
		if !end(cur) {
			return false
		}
		if early && u.r != nil && u.r.deferrable && agentstate.Finished(cur) {
			cur.Status.ReleasedSandbox, mark = sandbox, true
		}
		return true
	})
	written(out, err)
	if !early {
		u = <-undo // the release goes on after the outcome, as any other
	}
	if u.err != nil {
		// Given back again after the outcome, as any release.
		lg.printf("release sandbox %s: %v", sandbox, u.err)
		return false
	}
	if u.r != nil {
		marked <- mark && err == nil
	}
	return true
}

// earlyReleaseWait bounds how long an attempt's outcome waits for the
// reset of its sandbox (finishAttempt): a spare swapped in takes
// milliseconds, a reset in place a few hundred.
const earlyReleaseWait = 250 * time.Millisecond

// releasesEarly reports whether the attempt of agent on sandbox gives it
// back before its outcome (finishAttempt): a pool's sandbox reset to its
// clean snapshot and kept in memory, held by no person, claimed by agent
// as the node knows it, and the node not told to write every release at
// once (Options.ReleaseWriteDelay). A release that saves or destroys the
// sandbox takes longer, or would show the sandbox gone before the
// outcome: it comes after it.
func (n *Node) releasesEarly(ctx context.Context, sandbox, agent string) bool {
	if n.opt.ReleaseWriteDelay < 0 || n.sessionPending(sandbox) {
		// The session's file still being written (a slow guest) would
		// hold the outcome back: the release waits for it after.
		return false
	}
	if h := n.holder(sandbox); h != "" && h != agent {
		return false
	}
	o, err := n.read(ctx, api.KindSandbox, sandbox)
	if err != nil {
		return false
	}
	sb := o.(*api.Sandbox)
	if sb.Status.CurrentAgent != agent || sb.Status.Control != nil || sb.Metadata.DeletionTimestamp != nil || sb.Spec.Lifecycle.Ephemeral {
		return false
	}
	policy, warmTier := n.releasePolicy(ctx, sb)
	return policy == "reset" && warmTier != "saved"
}

// addArtifacts lists files the node kept of an attempt that was ended
// through the API (its screen recording) in the result written there.
func (n *Node) addArtifacts(ctx context.Context, agent string, attempt int, files []string, lg *runLog) {
	if len(files) == 0 {
		return
	}
	_, err := n.updateAgent(ctx, agent, func(cur *api.Agent) bool {
		if cur.Status.Attempts != attempt || cur.Status.Result == nil {
			return false
		}
		cur.Status.Result.Artifacts = append(cur.Status.Result.Artifacts, files...)
		return true
	})
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		lg.printf("could not list %v in the result: %v", files, err)
	}
}

func (n *Node) releaseLogged(ctx context.Context, sandbox, agent string, lg *runLog) {
	if err := n.release(ctx, sandbox, agent); err != nil {
		lg.printf("release sandbox %s: %v", sandbox, err)
		n.log.Warn("release sandbox", "sandbox", sandbox, "agent", agent, "err", err)
	}
}

// watchMCP follows an mcp-agent's attempt: the external agent completes it
// through the API; the node ends it when its deadline passes.
func (n *Node) watchMCP(ctx context.Context, a *api.Agent, now time.Time) (reconcile.Result, error) {
	deadline, reason, msg := agentstate.MCPDeadline(a, now)
	if now.Before(deadline) {
		return reconcile.Result{RequeueAfter: deadline.Sub(now)}, nil
	}
	attempt := a.Status.Attempts
	out, err := n.updateAgent(ctx, a.Metadata.Name, func(cur *api.Agent) bool {
		if cur.Status.Phase != api.AgentRunning || cur.Status.Attempts != attempt {
			return false
		}
		// A heartbeat may have come since a was read.
		if d, _, _ := agentstate.MCPDeadline(cur, now); now.Before(d) {
			return false
		}
		failAttempt(cur, reason, msg, now)
		return true
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	if out.Status.Phase == api.AgentRunning && out.Status.Attempts == attempt {
		d, _, _ := agentstate.MCPDeadline(out, now)
		return reconcile.Result{RequeueAfter: max(d.Sub(now), time.Second)}, nil
	}
	n.event(ctx, out, api.EventWarning, reason, msg)
	return reconcile.Result{}, n.release(ctx, a.Status.Sandbox, a.Metadata.Name)
}

// agentsDir holds the agents' logs (attemptlog.go) and their attempts'
// directories.
func (n *Node) agentsDir() string {
	return filepath.Join(n.opt.DataDir, "agents")
}

// attemptDir is where an attempt's screenshots, recording and artifacts
// go, made by the first of them: its log is beside it (attemptlog.go).
func (n *Node) attemptDir(agent string, attempt int) string {
	return filepath.Join(n.agentsDir(), agent, strconv.Itoa(attempt))
}

// removeAgentFiles removes what the node kept of an agent that is gone.
func (n *Node) removeAgentFiles(agent string) {
	if n.opt.DataDir != "" {
		n.journal.remove(agent)
		n.logs.remove(n.agentsDir(), agent)
		os.RemoveAll(filepath.Join(n.agentsDir(), agent))
	}
}

// AgentFile opens the file rel of the agent's latest attempt on this
// node: a slash-separated path such as "agent.log" or "artifacts/out.txt"
// (api.ValidateRelPath), which must stay inside the attempt's directory,
// symbolic links included. A name that is no regular file there (missing,
// a directory, a link out of it) is ErrNotFound. Errors name rel, never
// the node's own paths.
func (n *Node) AgentFile(ctx context.Context, agent, rel string) (io.ReadCloser, error) {
	if err := api.ValidateRelPath("path", rel); err != nil {
		return nil, err
	}
	o, err := n.st.Get(ctx, api.KindAgent, agent)
	if err != nil {
		return nil, err
	}
	a := o.(*api.Agent)
	attempt := a.Status.Attempts
	if attempt == 0 {
		return nil, fmt.Errorf("agent %s has not run yet: %w", agent, api.ErrNotFound)
	}
	notFound := func(why string) error {
		return fmt.Errorf("agent %s has no file %s in attempt %d%s: %w", agent, rel, attempt, why, api.ErrNotFound)
	}
	// failed says why rel cannot be opened without the path in err, which
	// is the node's: ErrNotFound when the name is at fault, else the
	// system's error (too many open files, an I/O error).
	failed := func(err error) error {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		var errno syscall.Errno
		switch {
		case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENAMETOOLONG):
			return notFound("")
		case !errors.As(err, &errno):
			return notFound(" (" + err.Error() + ")") // the root refused it: a link out of the directory
		}
		return fmt.Errorf("agent %s: open %s of attempt %d: %w", agent, rel, attempt, err)
	}
	var f *os.File
	if rel == "agent.log" {
		if rc, ok := n.journal.open(journalKey(agent, a.Metadata.UID), attempt); ok {
			return rc, nil
		}
		// Logs written before the journal: beside the attempt's directory
		// (attemptlog.go), or in it for the layout before that.
		if f, err = openIn(n.agentsDir(), attemptLogName(agent, attempt)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, failed(err)
		}
	}
	if f == nil {
		if f, err = openIn(n.attemptDir(agent, attempt), filepath.FromSlash(rel)); err != nil {
			return nil, failed(err)
		}
	}
	st, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, failed(err)
	case st.IsDir():
		f.Close()
		return nil, notFound(" (it is a directory)")
	case !st.Mode().IsRegular():
		f.Close()
		return nil, notFound(" (it is not a regular file)")
	}
	return f, nil
}

// openIn opens name, which may not leave dir (symbolic links included).
func openIn(dir, name string) (*os.File, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close() // files opened through it stay open
	return root.Open(name)
}

// failAttempt fails a's attempt for reason: HeartbeatLost fails it for
// good (its external agent is gone: a retry would wait for nobody), any
// other reason as its retries allow.
func failAttempt(a *api.Agent, reason, msg string, now time.Time) {
	if reason == "HeartbeatLost" {
		agentstate.FailFinally(a, reason, msg, now)
		return
	}
	agentstate.FailAttempt(a, reason, msg, now)
}

// updateAgent applies change to agent name as read returns it and writes
// its status, conditioned on what it read: again on a fresh read if
// another writer came first (reconcile.UpdateStatusFrom).
func (n *Node) updateAgent(ctx context.Context, name string, change func(*api.Agent) bool) (*api.Agent, error) {
	o, err := n.read(ctx, api.KindAgent, name)
	if err != nil {
		return nil, err
	}
	return reconcile.UpdateStatusFrom(ctx, n.st, api.KindAgent, o.(*api.Agent), change)
}

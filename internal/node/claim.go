package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/secrets"
	"github.com/hvkube/hvkube/internal/store"
)

// claimed reads sandbox name as the node's watch shows it (read). The
// node acts only on claims its watch has brought: a claim the watch has
// not brought yet asks for its agent again when it comes (Register maps
// each sandbox to the agent it names), so the node never acquires a
// sandbox for an agent while its view still shows the claim before.
func (n *Node) claimed(ctx context.Context, name string) (*api.Sandbox, error) {
	o, err := n.read(ctx, api.KindSandbox, name)
	if err != nil {
		return nil, err
	}
	return o.(*api.Sandbox), nil
}

// holders records, per sandbox, the agent this node last acquired it for
// and has not released it from: the node's own word, which its watch may
// lag. It is empty after a start of the node.
type holders struct {
	mu sync.Mutex // guards m
	m  map[string]string
}

// holder is the agent this node acquired sandbox name for and has not
// released it from, "" when none (or not since the node started).
func (n *Node) holder(name string) string {
	n.held.mu.Lock()
	defer n.held.mu.Unlock()
	return n.held.m[name]
}

// setHolder records that sandbox name was acquired for agent, or ("")
// released.
func (n *Node) setHolder(name, agent string) {
	n.held.mu.Lock()
	defer n.held.mu.Unlock()
	if agent == "" {
		delete(n.held.m, name)
		return
	}
	if n.held.m == nil {
		n.held.m = map[string]string{}
	}
	n.held.m[name] = agent
}

// acquire makes the sandbox an agent was bound to run, with seed 001's
// fallback chain: resume it (from RAM or disk); if that fails, return it to
// its clean snapshot and resume; if that fails too, throw its VM away and
// clone a new one. Each step's failure is an event of the sandbox, and so
// is an acquire that needed one; a plain resume is said only in the
// agent's Started event (how, returned: what was done, and how long it
// took). The guest clock is set by the backend's Resume.
func (n *Node) acquire(ctx context.Context, name, agent string) (how string, err error) {
	if n.fenced() {
		return "", fmt.Errorf("node %s is fenced (it cannot write its Node object): %w", n.name, api.ErrUnavailable)
	}
	unlock := n.locks.lock(name)
	defer unlock()
	sb, err := n.claimedBy(ctx, name, agent)
	if err != nil {
		return "", err
	}
	start := n.now()
	how, kind := "resumed", "resume"
	err = n.be.Resume(ctx, name)
	if err != nil {
		n.event(ctx, sb, api.EventWarning, "ResumeFailed", fmt.Sprintf("resume for agent %s: %v; restoring the clean snapshot", agent, err))
		how, kind = "restored the clean snapshot and resumed", "restore"
		if err = n.be.Reset(ctx, name); err == nil {
			err = n.be.Resume(ctx, name)
		}
	}
	if err != nil {
		n.event(ctx, sb, api.EventWarning, "RestoreFailed", fmt.Sprintf("restore for agent %s: %v; cloning a new VM", agent, err))
		how, kind = "cloned a new VM", "clone"
		err = n.recreate(ctx, sb)
	}
	if err != nil {
		n.event(ctx, sb, api.EventWarning, "AcquireFailed", fmt.Sprintf("agent %s: %v", agent, err))
		n.setPhase(ctx, sb, api.SandboxError, "AcquireFailed", err.Error())
		return "", err
	}
	// The claim of a sandbox released before its last agent's outcome
	// is that release's write too: nothing is left to write of it, and
	// the sandbox runs for this claim now.
	n.deferred.take(name, "")
	if api.OwnerOf(sb, api.KindSandboxPool) != "" {
		if err := n.prepare(ctx, sb); err != nil {
			n.event(ctx, sb, api.EventWarning, "StartupFailed", err.Error())
			return "", err
		}
	}
	n.setHolder(name, agent)
	took := n.now().Sub(start)
	if n.opt.ObserveAcquire != nil {
		n.opt.ObserveAcquire(kind, took)
	}
	pid := n.pidAfter(ctx, sb, kind == "resume" && sb.Status.Phase != api.SandboxSaved)
	how = fmt.Sprintf("%s in %s", how, took.Round(time.Millisecond))
	if kind != "resume" {
		n.event(ctx, sb, api.EventNormal, "Acquired", fmt.Sprintf("%s for agent %s", how, agent))
	}
	if kind == "resume" && sb.Status.Phase == api.SandboxRunning && pid == sb.Status.PID {
		// Resumed from memory as its claim said (agentstate.Claim): the
		// status is already true.
		return how, nil
	}
	return how, n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		now := n.now().UTC()
		s.Phase, s.Reason, s.Message, s.PID = api.SandboxRunning, "Acquired", fmt.Sprintf("in use by agent %s", agent), pid
		s.LastResumedAt = &now
	})
}

// claimedBy returns sandbox name as claimed (claimed), or an ErrConflict
// when its claim is not agent's.
func (n *Node) claimedBy(ctx context.Context, name, agent string) (*api.Sandbox, error) {
	sb, err := n.claimed(ctx, name)
	if err != nil {
		return nil, err
	}
	if sb.Status.CurrentAgent != agent {
		return nil, fmt.Errorf("sandbox %s is claimed by %q, not by agent %s: %w", name, sb.Status.CurrentAgent, agent, api.ErrConflict)
	}
	return sb, nil
}

// claimSession writes the session variables of a's claim (its sandbox's
// and its own) into the sandbox it acquired, and has its log mask the
// values that came from Secrets.
func (n *Node) claimSession(ctx context.Context, a *api.Agent, lg *runLog) error {
	o, err := n.read(ctx, api.KindSandbox, a.Status.Sandbox)
	if err != nil {
		return err
	}
	sb := o.(*api.Sandbox)
	if !secrets.Wants(sb, a) && !n.holdsSession(sb.Metadata.Name) {
		return nil
	}
	start := n.now()
	if err := n.writeSession(ctx, sb, a); err != nil {
		return fmt.Errorf("the session's variables: %w", err)
	}
	name := sb.Metadata.Name
	lg.setMask(func(s string) string { return n.maskText(name, s) })
	lg.printf("%d session variables resolved in %s; the guest's file is written before anything runs there", len(n.sessionVars(name)), n.now().Sub(start).Round(time.Millisecond))
	return nil
}

// agentWantsEnv reports whether agent names session variables: its
// release deletes the guest's file even when this node, restarted since,
// does not remember writing it.
func (n *Node) agentWantsEnv(ctx context.Context, agent string) bool {
	o, err := n.read(ctx, api.KindAgent, agent)
	return err == nil && secrets.Wants(nil, o.(*api.Agent))
}

// maskedError is an error whose message has the Secret values of its
// sandbox's session masked; it unwraps to the error it masks.
type maskedError struct {
	err error
	msg string
}

func (e maskedError) Error() string { return e.msg }
func (e maskedError) Unwrap() error { return e.err }

// recreate deletes the sandbox's VM and clones it again from its template,
// running. The caller holds the sandbox's lock.
func (n *Node) recreate(ctx context.Context, sb *api.Sandbox) error {
	tpl, err := n.templateFor(ctx, sb)
	if err != nil {
		return err
	}
	snapID, ok, msg, err := n.shapeFor(ctx, tpl, sb.Spec.Resources.MemoryMB, sb.Spec.Display.Resolution)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s: %w", msg, api.ErrUnavailable)
	}
	if err := n.be.Delete(ctx, sb.Metadata.Name); err != nil {
		return err
	}
	if _, err := n.be.Create(ctx, n.sandboxSpec(sb, tpl, snapID)); err != nil {
		return err
	}
	return n.be.Resume(ctx, sb.Metadata.Name)
}

// releasePolicy says what happens to a sandbox when its agent is done: the
// owning pool's releasePolicy (reset by default), destroy for an
// ephemeral sandbox, and for a sandbox of its own nothing: it stays as the
// agent left it.
func (n *Node) releasePolicy(ctx context.Context, sb *api.Sandbox) (policy, warmTier string) {
	if sb.Spec.Lifecycle.Ephemeral {
		return "destroy", ""
	}
	pool := api.OwnerOf(sb, api.KindSandboxPool)
	if pool == "" {
		return "keep", ""
	}
	policy, warmTier = api.DefaultReleasePolicy, api.DefaultWarmTier
	if o, err := n.read(ctx, api.KindSandboxPool, pool); err == nil {
		p := o.(*api.SandboxPool)
		if p.Spec.ReleasePolicy != "" {
			policy = p.Spec.ReleasePolicy
		}
		if p.Spec.WarmTier != "" {
			warmTier = p.Spec.WarmTier
		}
	}
	return policy, warmTier
}

// release gives a sandbox back once agent is done with it, by its release
// policy, and clears the claim. Nothing happens if the claim names another
// agent.
func (n *Node) release(ctx context.Context, name, agent string) error {
	return n.releaseClaim(ctx, name, agent, false)
}

// releaseClaim is release; unstarted says the node started no attempt on
// the claim (it is let go of before it ran): the sandbox is as the claim
// found it, with nothing to undo, however warm the claim marked it.
func (n *Node) releaseClaim(ctx context.Context, name, agent string, unstarted bool) error {
	unlock := n.locks.lock(name)
	defer unlock()
	if n.deferred.of(name) == agent {
		// Reset before agent's outcome, which says so: the release is
		// written by its timer, unless a new claim comes first.
		return nil
	}
	r, err := n.undoClaim(ctx, name, agent, unstarted)
	if err != nil || r == nil {
		return err
	}
	return n.writeRelease(ctx, r)
}

// releasing is a release whose sandbox is given back (reset, saved or
// kept, by its policy) and whose status is still to write.
type releasing struct {
	sb         *api.Sandbox // as the release read it
	agent, msg string
	phase      string
	pid        int
	policy     string
	used       bool
	deferrable bool // reset and paused in memory, held by no person
}

// undoClaim gives sandbox name back once agent is done with it, by its
// release policy: everything of the release but the status write, which
// it returns (nil when there is none to write). The caller holds the
// sandbox's lock.
func (n *Node) undoClaim(ctx context.Context, name, agent string, unstarted bool) (*releasing, error) {
	// The sandbox as the node's watch shows it, or from the store while
	// a write of the node's own is in flight (a release by the attempt,
	// then here again as its agent finished, reads the store). A claim
	// by another agent is acquired only once the watch shows it, so a
	// claim by this agent shown here is not one the node has given to
	// another since; and the node's own record of whom it acquired the
	// sandbox for says the same after its watch lags its writes.
	if h := n.holder(name); h != "" && h != agent {
		return nil, nil
	}
	o, err := n.read(ctx, api.KindSandbox, name)
	if errors.Is(err, api.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sb := o.(*api.Sandbox)
	if sb.Status.CurrentAgent != agent {
		return nil, nil
	}
	policy, warmTier := n.releasePolicy(ctx, sb)
	start := n.now()
	// Used once it ran for the agent: running now, or resumed since the
	// claim (the agent may have paused or saved it since, through the API).
	used := !unstarted && (sb.Status.Phase == api.SandboxRunning || resumedSinceClaim(sb))
	phase := sb.Status.Phase
	// The claim's variables go: a reset takes them with the rest of what
	// ran; otherwise the file is deleted before the sandbox is kept,
	// saved or put back.
	if policy == "destroy" || (policy == "reset" && used) {
		// A write still under way would land in the clean desktop.
		if err := n.settleSession(ctx, name); err != nil {
			return nil, fmt.Errorf("release %s: %w", name, err)
		}
		n.sessions.forget(name)
	} else if err := n.scrubSessionOf(ctx, name, n.agentWantsEnv(ctx, agent)); err != nil {
		return nil, fmt.Errorf("release %s: %w", name, err)
	}
	var msg string
	switch {
	case policy == "destroy" && sb.Metadata.DeletionTimestamp != nil:
		// An earlier release destroyed it (the attempt's end, then the
		// agent's, reach here both): said once.
		n.setHolder(name, "")
		return nil, nil
	case policy == "destroy":
		if _, _, err := n.st.Delete(ctx, api.KindSandbox, name, store.DeleteOptions{}); err != nil && !errors.Is(err, api.ErrNotFound) {
			return nil, err
		}
		n.setHolder(name, "")
		n.event(ctx, sb, api.EventNormal, "Released", fmt.Sprintf("agent %s is done: destroying the sandbox (%s)", agent, policy))
		return nil, nil
	case policy == "keep":
		msg = fmt.Sprintf("agent %s is done; the sandbox stays as it left it", agent)
	case !used:
		// The agent never ran on it (a claim taken back): nothing to undo.
		msg = fmt.Sprintf("agent %s let go of it unused", agent)
	case policy == "save":
		if err := n.be.Save(ctx, name); err != nil {
			return nil, fmt.Errorf("release %s (save): %w", name, err)
		}
		phase = api.SandboxSaved
		msg = fmt.Sprintf("agent %s is done: saved as it left it in %s", agent, n.now().Sub(start).Round(time.Millisecond))
	default: // reset
		if err := n.be.Reset(ctx, name); err != nil {
			return nil, fmt.Errorf("release %s (reset): %w", name, err)
		}
		phase = api.SandboxPaused
		if warmTier == "saved" {
			if err := n.be.Save(ctx, name); err != nil {
				return nil, fmt.Errorf("release %s (save to the warm tier): %w", name, err)
			}
			phase = api.SandboxSaved
		}
		msg = fmt.Sprintf("agent %s is done: reset to the clean snapshot in %s", agent, n.now().Sub(start).Round(time.Millisecond))
	}
	info, err := n.be.Inspect(ctx, name)
	if err == nil {
		if p, ok := phaseOf(info.State); ok {
			phase = p
		}
	}
	if policy != "reset" || !used || api.OwnerOf(sb, api.KindSandboxPool) == "" {
		// A pool member's reset after each agent is said by its status
		// (and its agents' events): an event each would double every
		// claim's events.
		n.event(ctx, sb, api.EventNormal, "Released", msg)
	}
	return &releasing{sb: sb, agent: agent, msg: msg, phase: phase, pid: info.PID, policy: policy, used: used,
		deferrable: policy == "reset" && phase == api.SandboxPaused && sb.Status.Control == nil}, nil
}

// writeRelease writes the release r gave back: the claim cleared, and
// the sandbox's phase as the release left it. A person's hold of a
// sandbox reset to clean ends with it.
func (n *Node) writeRelease(ctx context.Context, r *releasing) error {
	name, agent := r.sb.Metadata.Name, r.agent
	var ended *api.SandboxControl
	err := n.updateStatus(ctx, r.sb, func(s *api.SandboxStatus) {
		ended = nil
		if s.CurrentAgent != agent {
			return
		}
		now := n.now().UTC()
		s.CurrentAgent, s.Claim, s.ClaimedAt, s.ReleasedAt = "", nil, nil, &now
		s.Phase, s.Reason, s.Message, s.PID = r.phase, "Released", r.msg, r.pid
		if r.policy == "reset" && r.used {
			// A take-over is of the desktop the agent left; the clean
			// one goes to the next agent, whose input it must not refuse.
			ended, s.Control = s.Control, nil
		}
	})
	if err == nil {
		n.setHolder(name, "")
	}
	if err == nil && ended != nil {
		n.event(ctx, r.sb, api.EventNormal, "ControlReleased", fmt.Sprintf("take-over %s of %s ended: the sandbox was reset to its clean snapshot", ended.ID, ended.Holder))
	}
	return err
}

// resumedSinceClaim reports whether sb was resumed after its current
// claim was taken.
func resumedSinceClaim(sb *api.Sandbox) bool {
	r, c := sb.Status.LastResumedAt, sb.Status.ClaimedAt
	return r != nil && c != nil && !r.Before(*c)
}

// claimIndex notes, per agent, the sandbox whose claim last named it, as
// the node's sandbox watch brought it (claimant): a hint, checked against
// the cache when used.
type claimIndex struct {
	mu sync.Mutex // guards m
	m  map[string]string
}

func (c *claimIndex) note(agent, sandbox string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]string{}
	}
	c.m[agent] = sandbox
}

func (c *claimIndex) get(agent string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[agent]
}

func (c *claimIndex) forget(agent string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, agent)
}

// claimOf is the sandbox of this node whose claim names agent and records
// the agent's version (agentstate.Claim), as the node's watch (or its own
// write) shows it; nil when there is none. A node that keeps no caches
// (one driven directly) looks in the store.
func (n *Node) claimOf(ctx context.Context, agent string) *api.Sandbox {
	c := n.cache(api.KindSandbox)
	if c == nil {
		items, _, err := n.st.List(ctx, api.KindSandbox, api.Selector{})
		if err != nil {
			return nil
		}
		for _, it := range items {
			if sb := it.(*api.Sandbox); sb.Status.CurrentAgent == agent && sb.Status.Claim != nil && sb.Status.Node == n.name {
				return sb
			}
		}
		return nil
	}
	name := n.claims.get(agent)
	if name == "" {
		return nil
	}
	o, ok := c.Latest(name)
	if !ok {
		n.claims.forget(agent)
		return nil
	}
	sb := o.(*api.Sandbox)
	if sb.Status.CurrentAgent != agent || sb.Status.Claim == nil || sb.Status.Node != n.name {
		if sb.Status.CurrentAgent != agent {
			n.claims.forget(agent)
		}
		return nil
	}
	return sb
}

// toStart reports whether an attempt is to start on sb's claim: no run of
// the agent on this node, and the agent as the node knows it (cached is
// nil when its watch has not brought it: an agent is in a node's watch
// from its start on) waits for one.
func (n *Node) toStart(sb *api.Sandbox, cached *api.Agent) bool {
	if n.runs.get(sb.Status.CurrentAgent) != nil {
		return false
	}
	return cached == nil || agentstate.Pending(cached)
}

// startTries bounds the starts of one claim's attempt that lose to other
// writes of the agent.
const startTries = 3

// startClaimed starts the attempt sb's claim names: one write of the
// agent, Running on sb and this node (agentstate.StartPatch), conditioned
// on the version of the agent the claim recorded, whose answer is the
// agent to run. The node reads the agent only when something wrote it
// since the claim: it starts the attempt then if the agent still waits
// for it (agentstate.Startable), and lets go of the claim if not (deleted,
// changed, or started elsewhere).
func (n *Node) startClaimed(ctx context.Context, sb *api.Sandbox, cached *api.Agent) (reconcile.Result, error) {
	if n.fenced() {
		return reconcile.Result{RequeueAfter: n.statusEvery()}, nil
	}
	name := sb.Status.CurrentAgent
	sb = api.DeepCopy(sb)
	if cached != nil && cached.Metadata.ResourceVersion != sb.Status.Claim.ResourceVersion && agentstate.Startable(cached, sb) {
		// The node's watch shows a later version than the claim read:
		// start from it.
		sb.Status.Claim.ResourceVersion, sb.Status.Claim.Attempt = cached.Metadata.ResourceVersion, cached.Status.Attempts+1
	}
	now := n.now()
	for range startTries {
		patch, err := agentstate.StartPatch(sb, now)
		if err != nil {
			return reconcile.Result{}, err
		}
		out, err := n.st.PatchStatus(ctx, api.KindAgent, name, sb.Status.Claim.ResourceVersion, patch)
		switch {
		case err == nil:
			return n.launch(out.(*api.Agent), now, nil), nil
		case errors.Is(err, api.ErrNotFound):
			return reconcile.Result{}, n.dropClaim(ctx, sb, "it no longer exists")
		case !errors.Is(err, api.ErrConflict):
			return reconcile.Result{}, err
		}
		o, err := n.st.Get(ctx, api.KindAgent, name)
		if errors.Is(err, api.ErrNotFound) {
			return reconcile.Result{}, n.dropClaim(ctx, sb, "it no longer exists")
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		a := o.(*api.Agent)
		switch {
		case a.Status.Sandbox == sb.Metadata.Name && agentstate.Bound(a):
			// Started on this claim already: by a write whose answer was
			// lost, or by this node before it restarted.
			return n.reconcileAgentAs(ctx, name, a, nil)
		case !agentstate.Startable(a, sb):
			return reconcile.Result{}, n.dropClaim(ctx, sb, fmt.Sprintf("it changed since the claim (%s, attempt %d, generation %d)", agentstate.Phase(a), a.Status.Attempts, a.Metadata.Generation))
		}
		// Written since the claim read it (labelled, or an attempt ended
		// meanwhile): start the next attempt from this version.
		sb.Status.Claim.ResourceVersion, sb.Status.Claim.Attempt = a.Metadata.ResourceVersion, a.Status.Attempts+1
	}
	return reconcile.Result{RequeueAfter: 10 * time.Millisecond}, nil
}

// dropClaim lets go of sb's claim of an agent that is not to run on it,
// saying why.
func (n *Node) dropClaim(ctx context.Context, sb *api.Sandbox, why string) error {
	agent := sb.Status.CurrentAgent
	n.log.Info("letting go of a claim", "sandbox", sb.Metadata.Name, "agent", agent, "why", why)
	n.claims.forget(agent)
	return n.releaseClaim(ctx, sb.Metadata.Name, agent, true)
}

// deferredReleases are the releases given back before their agents'
// outcomes and not written yet (Node.finishAttempt), by sandbox; and the
// sandboxes being given back so, before their outcomes are written.
type deferredReleases struct {
	mu    sync.Mutex // guards m and early
	m     map[string]deferredRelease
	early map[string]int
}

// begin marks sandbox name as being released before its agent's outcome;
// end undoes it, once the release is deferred (put) or written.
func (d *deferredReleases) begin(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.early == nil {
		d.early = map[string]int{}
	}
	d.early[name]++
}

func (d *deferredReleases) end(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.early[name]--; d.early[name] <= 0 {
		delete(d.early, name)
	}
}

// paused reports whether sandbox name is released and not yet written so:
// its status still shows its last claim, Running, while its VM is reset
// and paused (or is being reset), and no call reaches it until its next
// claim resumes it. The agent of the last claim, whose outcome may not
// show yet, acts on the clean desktop no more than anyone else.
func (d *deferredReleases) paused(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.m[name]
	return ok || d.early[name] > 0
}

type deferredRelease struct {
	r     *releasing
	timer *time.Timer
}

// of is the agent whose release of sandbox name is deferred, "" if none.
func (d *deferredReleases) of(name string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if x, ok := d.m[name]; ok {
		return x.r.agent
	}
	return ""
}

// put defers r, to be written by write after delay.
func (d *deferredReleases) put(r *releasing, delay time.Duration, write func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]deferredRelease{}
	}
	name := r.sb.Metadata.Name
	if old, ok := d.m[name]; ok {
		old.timer.Stop()
	}
	d.m[name] = deferredRelease{r: r, timer: time.AfterFunc(delay, write)}
}

// take removes the deferred release of sandbox name and returns it: nil
// if there is none, or it is not agent's ("" takes any).
func (d *deferredReleases) take(name, agent string) *releasing {
	d.mu.Lock()
	defer d.mu.Unlock()
	x, ok := d.m[name]
	if !ok || (agent != "" && x.r.agent != agent) {
		return nil
	}
	x.timer.Stop()
	delete(d.m, name)
	return x.r
}

// releaseWriteDelay is Options.ReleaseWriteDelay or its default.
func (n *Node) releaseWriteDelay() time.Duration {
	if n.opt.ReleaseWriteDelay != 0 {
		return n.opt.ReleaseWriteDelay
	}
	return DefaultReleaseWriteDelay
}

// deferRelease keeps r unwritten: a claim of another agent is its write
// (the scheduler takes a sandbox its agent released, agentstate.Released);
// if none comes within the delay, writeDeferred writes it.
func (n *Node) deferRelease(r *releasing) {
	name, agent := r.sb.Metadata.Name, r.agent
	n.setHolder(name, "")
	n.deferred.put(r, n.releaseWriteDelay(), func() {
		if err := n.writeDeferred(n.runCtx, name, agent); err != nil && n.runCtx.Err() == nil {
			n.log.Warn("write a deferred release", "sandbox", name, "agent", agent, "err", err)
		}
	})
}

// writeDeferred writes the deferred release of sandbox name by agent, if
// it is still deferred and no claim of another agent has taken the
// sandbox since (its write is the release's then).
func (n *Node) writeDeferred(ctx context.Context, name, agent string) error {
	unlock := n.locks.lock(name)
	defer unlock()
	r := n.deferred.take(name, agent)
	if r == nil {
		return nil
	}
	return n.writeTaken(ctx, r)
}

// writeTaken writes r, a release taken from the deferred ones, under its
// sandbox's lock.
func (n *Node) writeTaken(ctx context.Context, r *releasing) error {
	// The sandbox as the node knows it now: others may have written it
	// since the release was deferred, and a write from the old copy would
	// lose to theirs and read the store.
	if o, err := n.read(ctx, api.KindSandbox, r.sb.Metadata.Name); err == nil {
		r.sb = o.(*api.Sandbox)
	}
	return n.writeRelease(ctx, r)
}

// releaseBefore writes sandbox name's deferred release, if it has one,
// before a person's operation on it (verb), under the sandbox's lock: the
// operation acts on the released desktop, reset and paused, while the
// status still shows the last claim, Running; and the deferred write, later,
// would undo what the operation wrote. A release that cannot be written
// stays deferred, and the operation fails.
func (n *Node) releaseBefore(ctx context.Context, name, verb string) error {
	r := n.deferred.take(name, "")
	if r == nil {
		return nil
	}
	if err := n.writeTaken(ctx, r); err != nil {
		n.deferRelease(r)
		return fmt.Errorf("cannot %s sandbox %s: the release by agent %s is not written yet: %w", verb, name, r.agent, err)
	}
	return nil
}

// names are the sandboxes whose releases are deferred.
func (d *deferredReleases) names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for name := range d.m {
		out = append(out, name)
	}
	return out
}

// flushDeferred writes every deferred release now (Stop).
func (n *Node) flushDeferred(ctx context.Context) {
	for _, name := range n.deferred.names() {
		if err := n.writeDeferred(ctx, name, n.deferred.of(name)); err != nil {
			n.log.Warn("write a deferred release", "sandbox", name, "err", err)
		}
	}
}

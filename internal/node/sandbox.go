package node

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/guest"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/secrets"
	"github.com/hvkube/hvkube/internal/store"
)

// reconcileSandbox brings a sandbox's VM in line with its object: clones it
// when the template is ready, follows what the VM really does, and removes
// the VM when the object is deleted (or never existed).
func (n *Node) reconcileSandbox(ctx context.Context, name string) (reconcile.Result, error) {
	o, err := n.read(ctx, api.KindSandbox, name)
	if err == nil && o.GetMeta().DeletionTimestamp == nil {
		sb := o.(*api.Sandbox)
		if sb.Status.Node == "" && !n.opt.WaitForPlacement {
			placed, err := n.takeUnplaced(ctx, sb)
			if err != nil || placed == nil {
				return reconcile.Result{}, err
			}
			sb = placed
		}
		if sb.Status.Node != n.name {
			// Another node's, or not placed yet: placement gives every
			// sandbox its node before any node clones it.
			return reconcile.Result{}, nil
		}
		if err := n.checkClaim(ctx, sb); err != nil {
			return reconcile.Result{}, err
		}
		if done, err := n.checkLifetime(ctx, sb); done || err != nil {
			return reconcile.Result{}, err
		}
		switch sb.Status.Phase {
		case api.SandboxRunning, api.SandboxPaused, api.SandboxSaved:
			// Observing does the slow part (the health check) without the
			// sandbox's lock, so that API calls do not wait for it.
			res, err := n.observeSandbox(ctx, name)
			if d := n.nextLifetimeCheck(sb); d > 0 && (res.RequeueAfter == 0 || d < res.RequeueAfter) {
				res.RequeueAfter = d
			}
			return res, err
		case api.SandboxError:
			if sb.Status.Reason == reasonNodeLost && !n.fenced() {
				return reconcile.Result{}, n.adopt(ctx, name)
			}
		}
	}
	unlock := n.locks.lock(name)
	defer unlock()
	// Under the lock, the node's latest view: its own writes of a moment
	// ago included; a sandbox gone from the watch is confirmed gone in
	// the store before its VM goes.
	o, err = n.read(ctx, api.KindSandbox, name)
	if errors.Is(err, api.ErrNotFound) {
		n.egress.forget(name)
		n.setHolder(name, "")
		return reconcile.Result{}, n.be.Delete(ctx, name)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	sb := o.(*api.Sandbox)
	if sb.Status.Node != n.name && (sb.Status.Node != "" || n.opt.WaitForPlacement) {
		// Another node's: its VM and its finalizer are that node's to
		// remove, also when the sandbox is being deleted. In a cluster,
		// one placed on no node is no node's yet (and the admission
		// policies refuse a node's writes to it).
		n.egress.forget(name)
		n.setHolder(name, "")
		return reconcile.Result{}, nil
	}
	if sb.Metadata.DeletionTimestamp != nil {
		if sb.Status.Phase != api.SandboxTerminating {
			n.setPhase(ctx, sb, api.SandboxTerminating, "Deleting", "stopping the VM and removing its files")
		}
		if err := n.be.Delete(ctx, name); err != nil {
			return reconcile.Result{}, err
		}
		n.egress.forget(name)
		n.setHolder(name, "")
		n.event(ctx, sb, api.EventNormal, "Deleted", "VM stopped and removed")
		return reconcile.Result{}, reconcile.RemoveFinalizer(ctx, n.st, sb, api.FinalizerVM)
	}
	switch sb.Status.Phase {
	case "", api.SandboxPending, api.SandboxCreating:
		return n.createSandbox(ctx, sb)
	case api.SandboxError, api.SandboxTerminated:
		return reconcile.Result{}, nil
	default: // its phase changed since the first look
		return reconcile.Result{RequeueAfter: time.Millisecond}, nil
	}
}

// adopt takes back a sandbox of this node that the cluster marked Error
// (NodeLost) while the node was cut off: if its VM is still here, the
// sandbox continues in the VM's phase.
func (n *Node) adopt(ctx context.Context, name string) error {
	unlock := n.locks.lock(name)
	defer unlock()
	o, err := n.st.Get(ctx, api.KindSandbox, name)
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	sb := o.(*api.Sandbox)
	if sb.Status.Node != n.name || sb.Metadata.DeletionTimestamp != nil || sb.Status.Phase != api.SandboxError || sb.Status.Reason != reasonNodeLost {
		return nil // changed meanwhile
	}
	info, err := n.be.Inspect(ctx, name)
	if errors.Is(err, api.ErrNotFound) {
		msg := fmt.Sprintf("node %s came back, but the sandbox's VM is gone", n.name)
		n.event(ctx, sb, api.EventWarning, "VMNotFound", msg)
		return n.setPhase(ctx, sb, api.SandboxError, "VMNotFound", msg)
	}
	if err != nil {
		return err
	}
	phase, known := phaseOf(info.State)
	if !known {
		msg := fmt.Sprintf("node %s came back, but the VM's process is gone", n.name)
		n.event(ctx, sb, api.EventWarning, "VMGone", msg)
		return n.setPhase(ctx, sb, api.SandboxError, "VMGone", msg)
	}
	msg := fmt.Sprintf("node %s came back and still has the VM (%s): adopted", n.name, info.State)
	n.event(ctx, sb, api.EventNormal, "Adopted", msg)
	return n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		s.Phase, s.Reason, s.Message, s.PID = phase, "Adopted", msg, info.PID
	})
}

// takeUnplaced places sb on this node, conditioned on the version read:
// if placement (or another writer) got there first the write loses, and
// the watch brings the sandbox back with its node. It returns the placed
// sandbox, or nil when it lost.
func (n *Node) takeUnplaced(ctx context.Context, sb *api.Sandbox) (*api.Sandbox, error) {
	placed := api.DeepCopy(sb)
	placed.Status.Node = n.name
	out, err := n.st.UpdateStatus(ctx, placed)
	if errors.Is(err, api.ErrConflict) || errors.Is(err, api.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return out.(*api.Sandbox), nil
}

func (n *Node) createSandbox(ctx context.Context, sb *api.Sandbox) (reconcile.Result, error) {
	o, err := reconcile.EnsureFinalizer(ctx, n.st, sb, api.FinalizerVM)
	if err != nil {
		return reconcile.Result{}, err
	}
	sb = o.(*api.Sandbox)
	tplName := sb.Spec.TemplateRef
	if tplName == "" {
		tplName = n.opt.DefaultTemplate
	}
	if tplName == "" {
		return reconcile.Result{}, n.pending(ctx, sb, "NoTemplate", "spec.templateRef is empty and the server has no default template")
	}
	to, err := n.read(ctx, api.KindTemplate, tplName)
	if errors.Is(err, api.ErrNotFound) {
		return reconcile.Result{RequeueAfter: 30 * time.Second}, n.pending(ctx, sb, "TemplateNotFound", fmt.Sprintf("template %s does not exist: apply it (examples/template.yaml)", tplName))
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	tpl := to.(*api.Template)
	if tpl.Status.Phase != api.TemplateReady || tpl.Status.Snapshot == nil {
		msg := fmt.Sprintf("waiting for template %s (%s)", tplName, orDefault(tpl.Status.Phase, api.TemplatePending))
		if tpl.Status.Message != "" {
			msg += ": " + tpl.Status.Message
		}
		return reconcile.Result{}, n.pending(ctx, sb, "TemplateNotReady", msg)
	}
	if err := checkVolumes(sb); err != nil {
		n.event(ctx, sb, api.EventWarning, "Unsupported", err.Error())
		return reconcile.Result{}, n.setPhase(ctx, sb, api.SandboxError, "Unsupported", err.Error())
	}
	if msg := n.hostPathProblem(sb); msg != "" {
		return reconcile.Result{RequeueAfter: time.Minute}, n.pending(ctx, sb, reasonHostPath, msg)
	}
	if sb.Spec.Resources.GPU {
		return reconcile.Result{RequeueAfter: time.Minute}, n.pending(ctx, sb, "NoGPU", "the sandbox asks for a GPU and this host has none for sandboxes")
	}
	snapID, ok, msg, err := n.shapeFor(ctx, tpl, sb.Spec.Resources.MemoryMB, sb.Spec.Display.Resolution)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !ok {
		return reconcile.Result{RequeueAfter: time.Minute}, n.pending(ctx, sb, "BuildingShape", msg)
	}
	if snapID == tpl.Status.Snapshot.ID {
		// The template is Ready where it was built; this node may still
		// be building its own copy.
		if _, err := n.be.InspectTemplate(ctx, snapID); errors.Is(err, api.ErrNotFound) {
			return reconcile.Result{RequeueAfter: 5 * time.Second}, n.pending(ctx, sb, "TemplateNotOnNode",
				fmt.Sprintf("waiting for node %s to build its copy of template %s's snapshot", n.name, tpl.Metadata.Name))
		} else if err != nil {
			return reconcile.Result{}, err
		}
	}
	// Creating is shown for a first try whose clone takes longer than
	// creatingAfter; a retry of a sandbox that waits for memory stays
	// Pending until the clone succeeds (flipping phases on every retry
	// would be two writes for nothing).
	var creating *deferred
	if sb.Status.Phase != api.SandboxCreating && !(sb.Status.Phase == api.SandboxPending && sb.Status.Reason == "InsufficientMemory") {
		base, msg := sb, fmt.Sprintf("cloning from template %s", tplName)
		creating = after(creatingAfter, func() { n.setPhase(ctx, base, api.SandboxCreating, "Cloning", msg) })
	}
	start := n.now()
	info, err := n.be.Create(ctx, n.sandboxSpec(sb, tpl, snapID))
	if creating.stop() {
		// The status writes below start from that write, not before it.
		if o, err := n.read(ctx, api.KindSandbox, sb.Metadata.Name); err == nil {
			sb = o.(*api.Sandbox)
		}
	}
	switch {
	case errors.Is(err, api.ErrUnavailable):
		return reconcile.Result{RequeueAfter: 30 * time.Second}, n.pending(ctx, sb, "InsufficientMemory", err.Error())
	case errors.Is(err, api.ErrUnsupported), errors.Is(err, api.ErrInvalid):
		n.event(ctx, sb, api.EventWarning, "Unsupported", err.Error())
		return reconcile.Result{}, n.setPhase(ctx, sb, api.SandboxError, "Unsupported", err.Error())
	case err != nil:
		n.event(ctx, sb, api.EventWarning, "CreateFailed", err.Error())
		return reconcile.Result{}, err
	}
	cloned := n.now().Sub(start)
	now := n.now().UTC()
	msg = fmt.Sprintf("cloned from %s in %s", snapID, cloned.Round(time.Millisecond))
	phase := api.SandboxPaused
	if api.OwnerOf(sb, api.KindSandboxPool) == "" {
		// A sandbox of its own is wanted running; a pool keeps its spares
		// paused until an agent takes one.
		rs := n.now()
		if err := n.be.Resume(ctx, sb.Metadata.Name); err != nil {
			n.event(ctx, sb, api.EventWarning, "ResumeFailed", err.Error())
			return reconcile.Result{}, err
		}
		phase = api.SandboxRunning
		msg += fmt.Sprintf(", resumed in %s", n.now().Sub(rs).Round(time.Millisecond))
		if err := n.prepare(ctx, sb); err != nil {
			n.event(ctx, sb, api.EventWarning, "StartupFailed", err.Error())
			return reconcile.Result{}, n.setPhase(ctx, sb, api.SandboxError, "StartupFailed", err.Error())
		}
	} else if _, warm := n.releasePolicy(ctx, sb); warm == "saved" {
		// The pool keeps its idle sandboxes on disk.
		ss := n.now()
		if err := n.be.Save(ctx, sb.Metadata.Name); err != nil {
			n.event(ctx, sb, api.EventWarning, "SaveFailed", err.Error())
			return reconcile.Result{}, err
		}
		phase = api.SandboxSaved
		msg += fmt.Sprintf(", saved to the warm tier in %s", n.now().Sub(ss).Round(time.Millisecond))
	}
	if info, err = n.be.Inspect(ctx, sb.Metadata.Name); err != nil {
		return reconcile.Result{}, err
	}
	if api.OwnerOf(sb, api.KindSandboxPool) == "" {
		// A pool's member says it in its status (Started, with how long
		// the clone took) and its pool in events of the whole fill: an
		// event per member would cost a pool of thousands as many writes.
		n.event(ctx, sb, api.EventNormal, "Started", msg)
	}
	nu := n.networkOf(sb, info)
	if nu.newlyMissing(sb) {
		n.event(ctx, sb, api.EventWarning, reasonNoNetworkDevice, nu.missing)
	}
	err = n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		s.Phase, s.Reason, s.Message = phase, "Started", msg
		s.Template = tplName
		s.Automation = tpl.Status.Snapshot.Automation
		s.BackendID = info.ID
		s.Display = info.Display
		s.Resolution = info.Resolution
		s.PID = info.PID
		nu.apply(s, sb.Metadata.Generation, now)
		s.StartedAt = &now
		if phase == api.SandboxRunning {
			s.ReadyAt, s.LastResumedAt, s.LastHeartbeat = &now, &now, &now
		}
	})
	return reconcile.Result{RequeueAfter: interval(sb)}, err
}

// checkClaim releases a sandbox whose claim names an agent that no longer
// holds it: gone, finished, or (past the grace the scheduler needs between
// its two writes) bound elsewhere. An agent's own run releases it
// normally; this catches what a restart or a lost write left behind.
func (n *Node) checkClaim(ctx context.Context, sb *api.Sandbox) error {
	agent := sb.Status.CurrentAgent
	if agent == "" {
		return nil
	}
	if n.runs.get(agent) != nil {
		return nil
	}
	if c := n.cache(api.KindAgent); c != nil && sb.Status.ClaimedAt != nil && n.now().Sub(*sb.Status.ClaimedAt) <= agentstate.ClaimGrace {
		if _, ok := c.Get(agent); !ok {
			// A new claim whose agent the watch has not brought yet:
			// its event comes, and with it the run.
			return nil
		}
	}
	stale, final, unstarted, err := n.staleClaim(sb, func() (api.Object, error) { return n.read(ctx, api.KindAgent, agent) })
	if err == nil && stale != "" && !final {
		// Confirmed on a fresh read before the claim is let go: an
		// agent that is gone or finished stays so, but a binding may
		// have changed since the watch spoke.
		stale, _, unstarted, err = n.staleClaim(sb, func() (api.Object, error) { return n.st.Get(ctx, api.KindAgent, agent) })
	}
	if err != nil || stale == "" {
		return err
	}
	n.log.Info("releasing a stale claim", "sandbox", sb.Metadata.Name, "agent", agent, "why", stale)
	return n.releaseClaim(ctx, sb.Metadata.Name, agent, unstarted)
}

// staleClaim says why sb's claim by its current agent, as get returns the
// agent, is stale, or "" if it stands; and whether the attempt the claim
// was made for never started (the agent's attempts are still short of
// it): a claim let go of then has nothing to undo.
func (n *Node) staleClaim(sb *api.Sandbox, get func() (api.Object, error)) (stale string, final, unstarted bool, err error) {
	o, err := get()
	switch {
	case errors.Is(err, api.ErrNotFound):
		return "it no longer exists", true, false, nil
	case err != nil:
		return "", false, false, err
	}
	a := o.(*api.Agent)
	unstarted = sb.Status.Claim != nil && a.Metadata.UID == sb.Status.Claim.UID && a.Status.Attempts < sb.Status.Claim.Attempt
	switch {
	case agentstate.Finished(a):
		return "it has " + strings.ToLower(a.Status.Phase), true, unstarted, nil
	case a.Status.Sandbox != sb.Metadata.Name && sb.Status.ClaimedAt != nil && n.now().Sub(*sb.Status.ClaimedAt) > agentstate.ClaimGrace:
		return "it is not bound to this sandbox", false, unstarted, nil
	}
	return "", false, false, nil
}

// checkLifetime enforces spec.lifecycle: a sandbox older than
// timeoutMinutes, or idle (no agent) for idleTimeoutMinutes, is deleted.
// It reports whether it deleted the sandbox.
func (n *Node) checkLifetime(ctx context.Context, sb *api.Sandbox) (bool, error) {
	reason, msg := n.lifetimeOver(sb)
	if reason == "" {
		return false, nil
	}
	n.event(ctx, sb, api.EventNormal, reason, msg)
	_, _, err := n.st.Delete(ctx, api.KindSandbox, sb.Metadata.Name, store.DeleteOptions{ResourceVersion: sb.Metadata.ResourceVersion})
	if errors.Is(err, api.ErrNotFound) || errors.Is(err, api.ErrConflict) {
		return true, nil
	}
	return true, err
}

// lifetimeOver says why sb's lifecycle ends now, if it does.
func (n *Node) lifetimeOver(sb *api.Sandbox) (reason, msg string) {
	now, lc := n.now(), sb.Spec.Lifecycle
	if lc.TimeoutMinutes > 0 && sb.Status.StartedAt != nil {
		if now.Sub(*sb.Status.StartedAt) >= time.Duration(lc.TimeoutMinutes)*time.Minute {
			return "Expired", fmt.Sprintf("older than lifecycle.timeoutMinutes (%d): deleting it", lc.TimeoutMinutes)
		}
	}
	if lc.IdleTimeoutMinutes > 0 && sb.Status.CurrentAgent == "" {
		if since := idleSince(sb); since != nil && now.Sub(*since) >= time.Duration(lc.IdleTimeoutMinutes)*time.Minute {
			return "IdleTimeout", fmt.Sprintf("no agent for lifecycle.idleTimeoutMinutes (%d): deleting it", lc.IdleTimeoutMinutes)
		}
	}
	return "", ""
}

// nextLifetimeCheck is when sb's lifecycle should be looked at again.
func (n *Node) nextLifetimeCheck(sb *api.Sandbox) time.Duration {
	now, lc := n.now(), sb.Spec.Lifecycle
	var next time.Duration
	consider := func(at time.Time) {
		if d := at.Sub(now); d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	if lc.TimeoutMinutes > 0 && sb.Status.StartedAt != nil {
		consider(sb.Status.StartedAt.Add(time.Duration(lc.TimeoutMinutes) * time.Minute))
	}
	if lc.IdleTimeoutMinutes > 0 && sb.Status.CurrentAgent == "" {
		if since := idleSince(sb); since != nil {
			consider(since.Add(time.Duration(lc.IdleTimeoutMinutes) * time.Minute))
		}
	}
	return next
}

// idleSince is when a sandbox last had no agent: released, else ready,
// else started.
func idleSince(sb *api.Sandbox) *time.Time {
	for _, t := range []*time.Time{sb.Status.ReleasedAt, sb.Status.ReadyAt, sb.Status.StartedAt} {
		if t != nil {
			return t
		}
	}
	return nil
}

// sandboxSpec is what the backend needs to clone sb from tpl's snapshot
// snapID: the template's own, or one of its shapes (which has the
// sandbox's resolution already).
func (n *Node) sandboxSpec(sb *api.Sandbox, tpl *api.Template, snapID string) backend.SandboxSpec {
	spec := backend.SandboxSpec{
		ID: sb.Metadata.Name, UID: sb.Metadata.UID, TemplateID: snapID,
		Resolution: sb.Spec.Display.Resolution, Hostname: sb.Metadata.Name,
		Network: api.EffectiveNetwork(tpl.Spec.Network, sb.Spec.Network),
	}
	if snapID != tpl.Status.Snapshot.ID {
		spec.Resolution = ""
	}
	return spec
}

// templateFor returns the ready template sb clones from.
func (n *Node) templateFor(ctx context.Context, sb *api.Sandbox) (*api.Template, error) {
	name := sb.Spec.TemplateRef
	if name == "" {
		name = n.opt.DefaultTemplate
	}
	o, err := n.st.Get(ctx, api.KindTemplate, name)
	if err != nil {
		return nil, err
	}
	tpl := o.(*api.Template)
	if tpl.Status.Phase != api.TemplateReady || tpl.Status.Snapshot == nil {
		return nil, fmt.Errorf("template %s is not ready: %w", name, api.ErrUnavailable)
	}
	return tpl, nil
}

// observeSandbox follows what the VM really does: its run state, whether it
// still exists, and (while it runs) its health. The health check runs
// without the sandbox's lock; the result is written under it, after looking
// at the run state again, so that a pause made meanwhile is not undone.
func (n *Node) observeSandbox(ctx context.Context, name string) (reconcile.Result, error) {
	var health error
	checked := false
	// A sandbox being operated on (reset, released, acquired, deleted)
	// does not answer meanwhile: the check is skipped, or given up as soon
	// as an operation starts, rather than waited out.
	if info, err := n.be.Inspect(ctx, name); err == nil && info.State == backend.StateRunning && !n.locks.busy(name) {
		octx, stop := n.locks.observe(ctx, name)
		for try := 0; try < 2; try++ {
			// A second try: a check caught by a pause and resume fails
			// without the guest being unwell.
			hctx, cancel := context.WithTimeout(octx, 15*time.Second)
			health = n.healthCheck(hctx, name)
			cancel()
			if health == nil || octx.Err() != nil {
				break
			}
		}
		checked = octx.Err() == nil
		stop()
	}
	unlock := n.locks.lock(name)
	defer unlock()
	// As the watch shows it, or from the store while a write of the
	// node's own is in flight (read): the events below say what changed
	// since, and the writes are conditioned on it.
	o, err := n.read(ctx, api.KindSandbox, name)
	if errors.Is(err, api.ErrNotFound) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	sb := o.(*api.Sandbox)
	if sb.Metadata.DeletionTimestamp != nil {
		return reconcile.Result{RequeueAfter: time.Millisecond}, nil
	}
	info, err := n.be.Inspect(ctx, name)
	if errors.Is(err, api.ErrNotFound) {
		n.event(ctx, sb, api.EventWarning, "VMNotFound", "the sandbox's VM no longer exists")
		return reconcile.Result{}, n.setPhase(ctx, sb, api.SandboxError, "VMNotFound", "the sandbox's VM no longer exists")
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if info.State == backend.StateIOError {
		return n.observeIOError(ctx, sb, info)
	}
	phase, known := phaseOf(info.State)
	if !known {
		msg := "the VM's process is gone (it crashed or was killed)"
		n.event(ctx, sb, api.EventWarning, "VMGone", msg)
		return reconcile.Result{}, n.setPhase(ctx, sb, api.SandboxError, "VMGone", msg)
	}
	if phase == api.SandboxPaused && awaitsAcquire(sb, n.holder(name)) {
		// Running by its claim, and this node has yet to resume it.
		phase = api.SandboxRunning
	}
	reason, msg := sb.Status.Reason, sb.Status.Message
	if reason == reasonIOError {
		// No longer stopped on a failed write: reset, saved or resumed
		// by an operation since.
		reason, msg = phaseReason(phase), ""
	}
	nu := n.networkOf(sb, info)
	if nu.denied != "" {
		n.event(ctx, sb, api.EventWarning, reasonEgressDenied, nu.denied)
	}
	if nu.newlyMissing(sb) {
		n.event(ctx, sb, api.EventWarning, reasonNoNetworkDevice, nu.missing)
	}
	var beat *time.Time
	if phase == api.SandboxRunning && checked {
		if health != nil {
			if reason != "Unhealthy" {
				n.event(ctx, sb, api.EventWarning, "Unhealthy", health.Error())
			}
			reason, msg = "Unhealthy", health.Error()
		} else {
			now := n.now().UTC()
			beat = &now
			if reason == "Unhealthy" {
				n.event(ctx, sb, api.EventNormal, "Healthy", "the guest answers again")
				reason, msg = "Healthy", "the guest answers"
			}
		}
	}
	err = n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		s.Phase, s.Reason, s.Message = phase, reason, msg
		if s.CurrentAgent == "" || beat != nil && (s.LastHeartbeat == nil || beat.Sub(*s.LastHeartbeat) >= heartbeatEvery(sb)) {
			// A claimed sandbox's new process (a reset before its last
			// agent's outcome, agentstate.Released) is written with the
			// next write there is, not in one of its own: the claim
			// names the holder, whatever the process.
			s.PID = info.PID
		}
		clearIOError(s, sb.Metadata.Generation, n.now())
		nu.apply(s, sb.Metadata.Generation, n.now())
		// The heartbeat is refreshed only now and then: a write per health
		// check would wake every watcher of sandboxes for nothing.
		if beat != nil && (s.LastHeartbeat == nil || beat.Sub(*s.LastHeartbeat) >= heartbeatEvery(sb)) {
			s.LastHeartbeat = beat
		}
	})
	res := reconcile.Result{RequeueAfter: interval(sb)}
	if nu.retry > 0 && nu.retry < res.RequeueAfter {
		res.RequeueAfter = nu.retry
	}
	return res, err
}

// awaitsAcquire reports whether sb's claim made it Running
// (agentstate.Claim) and its node, whose word on whom it acquired sb for
// is holder, has not resumed it for that claim yet.
func awaitsAcquire(sb *api.Sandbox, holder string) bool {
	return sb.Status.Phase == api.SandboxRunning && sb.Status.Reason == agentstate.ReasonClaimed &&
		sb.Status.CurrentAgent != "" && holder != sb.Status.CurrentAgent
}

// prepare readies a sandbox that just started running for its user: its
// volumes copied in, then its startup commands started. A pool's sandbox
// is prepared each time an agent acquires it (a reset took both away).
func (n *Node) prepare(ctx context.Context, sb *api.Sandbox) error {
	if err := n.copyVolumes(ctx, sb); err != nil {
		return err
	}
	if secrets.Wants(sb, nil) {
		if err := n.writeSession(ctx, sb, nil); err != nil {
			return err
		}
	}
	return n.startup(ctx, sb)
}

// startup starts the sandbox's spec.startup commands in the guest, in
// order, without waiting for them: they are programs that keep running.
func (n *Node) startup(ctx context.Context, sb *api.Sandbox) error {
	if len(sb.Spec.Startup) == 0 {
		return nil
	}
	g, ok := n.be.(backend.Guest)
	if !ok {
		return fmt.Errorf("spec.startup: the %s backend cannot run programs in the guest", n.be.Name())
	}
	for i, c := range sb.Spec.Startup {
		req, err := n.withSession(ctx, sb.Metadata.Name, backend.ExecRequest{Path: c.Command, Args: c.Args, Detach: true})
		if err != nil {
			return fmt.Errorf("spec.startup[%d] (%s): %w", i, c.Command, err)
		}
		if _, err := g.Exec(ctx, sb.Metadata.Name, req); err != nil {
			return fmt.Errorf("spec.startup[%d] (%s): %w", i, c.Command, err)
		}
		n.event(ctx, sb, api.EventNormal, "Startup", fmt.Sprintf("started %s %s", c.Command, strings.Join(c.Args, " ")))
	}
	return nil
}

// healthCheck runs the sandbox's spec.healthCheck: the guest agent answers
// (guest), a process of that name runs in the guest (process), or something
// listens on a TCP port in the guest (tcp).
func (n *Node) healthCheck(ctx context.Context, name string) error {
	if err := n.be.Alive(ctx, name); err != nil {
		return err
	}
	o, err := n.read(ctx, api.KindSandbox, name) // its spec: the watch's view will do
	if err != nil {
		return nil
	}
	hc := o.(*api.Sandbox).Spec.HealthCheck
	g, ok := n.be.(backend.Guest)
	if !ok || hc.Type == "" || hc.Type == "guest" {
		return nil
	}
	osys, r := n.guestOS(ctx, name), guest.Bind(g, name)
	switch hc.Type {
	case "process":
		return osys.ProcessRunning(ctx, r, hc.ProcessName)
	case "tcp":
		return osys.Listening(ctx, r, hc.Port)
	}
	return nil
}

// guestOS is the OS inside a sandbox: its template's spec.guest.os (Linux
// when the template cannot be read).
func (n *Node) guestOS(ctx context.Context, sandbox string) guest.OS {
	name := ""
	if o, err := n.st.Get(ctx, api.KindSandbox, sandbox); err == nil {
		tpl := o.(*api.Sandbox).Spec.TemplateRef
		if tpl == "" {
			tpl = n.opt.DefaultTemplate
		}
		if t, err := n.st.Get(ctx, api.KindTemplate, tpl); err == nil {
			name = t.(*api.Template).Spec.Guest.OS
		}
	}
	osys, err := guest.For(name, nil)
	if err != nil {
		return guest.NewLinux(nil)
	}
	return osys
}

// heartbeatEvery is how stale status.lastHeartbeat may get while the
// health checks pass: ten intervals, at most a minute.
func heartbeatEvery(sb *api.Sandbox) time.Duration {
	return min(10*interval(sb), time.Minute)
}

func interval(sb *api.Sandbox) time.Duration {
	if s := sb.Spec.HealthCheck.IntervalSeconds; s > 0 {
		return time.Duration(s) * time.Second
	}
	return api.DefaultHealthInterval * time.Second
}

// pending records why a sandbox waits, with an event, unless the stored
// status says so already: a sandbox retried for the same reason writes
// nothing, and so wakes no watcher (its own reconcile among them).
func (n *Node) pending(ctx context.Context, sb *api.Sandbox, reason, msg string) error {
	changed := false
	err := n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		if s.Phase == api.SandboxPending && s.Reason == reason && s.Message == msg {
			return
		}
		s.Phase, s.Reason, s.Message = api.SandboxPending, reason, msg
		changed = true
	})
	if changed {
		typ := api.EventNormal
		if api.Unsatisfiable(reason) {
			typ = api.EventWarning
		}
		n.event(ctx, sb, typ, reason, msg)
	}
	return err
}

func (n *Node) setPhase(ctx context.Context, sb *api.Sandbox, phase, reason, msg string) error {
	return n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		s.Phase, s.Reason, s.Message = phase, reason, msg
		if phase == api.SandboxTerminated || phase == api.SandboxError {
			s.PID = 0
		}
	})
}

// creatingAfter is how long a sandbox's clone may take before its status
// says Creating. A clone from a snapshot is usually done sooner, and the
// sandbox then goes from Pending to its phase in one write, not two.
const creatingAfter = 250 * time.Millisecond

// deferred is a call made after a delay unless it is stopped first.
type deferred struct {
	t   *time.Timer
	ran chan struct{} // closed once the call has returned
}

// after calls fn in its own goroutine after d, unless stopped before.
func after(d time.Duration, fn func()) *deferred {
	x := &deferred{ran: make(chan struct{})}
	x.t = time.AfterFunc(d, func() {
		defer close(x.ran)
		fn()
	})
	return x
}

// stop cancels the call, or waits for it when it has begun, and reports
// whether it was made. A nil deferred made none.
func (x *deferred) stop() bool {
	if x == nil || x.t.Stop() {
		return false
	}
	<-x.ran
	return true
}

// statusEqual reports whether two statuses are the same.
func statusEqual(a, b api.SandboxStatus) bool {
	return reflect.DeepEqual(a, b)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// phaseOf is the sandbox phase of a backend run state; known is false for
// a state with none (the VM's process is gone). A guest stopped on a failed
// disk write is meant to run: observeIOError runs it again.
func phaseOf(state string) (phase string, known bool) {
	switch state {
	case backend.StateRunning, backend.StateIOError:
		return api.SandboxRunning, true
	case backend.StatePaused:
		return api.SandboxPaused, true
	case backend.StateSaved:
		return api.SandboxSaved, true
	case backend.StateStopped:
		return api.SandboxTerminated, true
	}
	return "", false
}

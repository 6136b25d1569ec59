package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
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
	// agents and sandboxes are the Manager's caches: a reconcile reads
	// them first, and the store only before it acts.
	agents, sandboxes *reconcile.Cache
}

// NewAgents registers the agent controller with m. A sandbox's change wakes
// the agent it is claimed by.
func NewAgents(m *reconcile.Manager, st store.Interface, log *slog.Logger, now func() time.Time) *Agents {
	if now == nil {
		now = time.Now
	}
	a := &Agents{st: st, log: log, now: now, agents: m.Cache(api.KindAgent), sandboxes: m.Cache(api.KindSandbox)}
	m.Register(reconcile.Controller{Name: "agent", For: api.KindAgent, Reconciler: a, Workers: 4,
		Watches: []reconcile.Watch{{Kind: api.KindSandbox, Map: func(o api.Object) []string {
			if cur := o.(*api.Sandbox).Status.CurrentAgent; cur != "" {
				return []string{cur}
			}
			return nil
		}}}})
	return a
}

// nodeGrace is how long past an attempt's deadline the controller waits
// for the node to end it before it ends it itself (the node may be gone).
const nodeGrace = 2 * time.Minute

// Reconcile implements Reconciler.
func (c *Agents) Reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	return c.reconcile(ctx, name, false)
}

// get reads kind/name from the store if fresh, else from the cache when it
// holds it.
func (c *Agents) get(ctx context.Context, kind, name string, fresh bool) (api.Object, error) {
	cache := c.agents
	if kind == api.KindSandbox {
		cache = c.sandboxes
	}
	if !fresh {
		if o, ok := cache.Get(name); ok {
			return api.DeepCopy(o), nil
		}
	}
	return c.st.Get(ctx, kind, name)
}

// reconcile looks at agent name as the caches show it (fresh: as the store
// does); before it acts on what the caches show, it looks again at the
// store, so that an agent is never failed or let go on a stale view.
func (c *Agents) reconcile(ctx context.Context, name string, fresh bool) (reconcile.Result, error) {
	o, err := c.get(ctx, api.KindAgent, name, fresh)
	if errors.Is(err, api.ErrNotFound) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	a := o.(*api.Agent)
	now := c.now()
	switch {
	case a.Metadata.DeletionTimestamp != nil && !fresh:
		return c.reconcile(ctx, name, true)
	case a.Metadata.DeletionTimestamp != nil:
		if agentstate.Bound(a) {
			// The node stops the run and releases the sandbox, then lets
			// the agent go; unless the sandbox is gone.
			if _, err := c.st.Get(ctx, api.KindSandbox, a.Status.Sandbox); !errors.Is(err, api.ErrNotFound) {
				return reconcile.Result{RequeueAfter: 10 * time.Second}, err
			}
		}
		return reconcile.Result{}, reconcile.RemoveFinalizer(ctx, c.st, a, api.FinalizerRun)
	case !agentstate.Finished(a) && !slices.Contains(a.Metadata.Finalizers, api.FinalizerRun):
		// Written straight to the store (kubectl apply on Kubernetes),
		// not through the API, which sets it at creation: deleting the
		// agent must wait for its run to stop all the same.
		if _, err := reconcile.EnsureFinalizer(ctx, c.st, a, api.FinalizerRun); err != nil {
			return reconcile.Result{}, err
		}
		return c.reconcile(ctx, name, true)
	case agentstate.Finished(a):
		if ttl := a.Spec.TTLSecondsAfterFinished; ttl != nil && a.Status.CompletedAt != nil {
			at := a.Status.CompletedAt.Add(time.Duration(*ttl) * time.Second)
			if now.Before(at) {
				return reconcile.Result{RequeueAfter: at.Sub(now)}, nil
			}
			if !fresh {
				return c.reconcile(ctx, name, true)
			}
			_, _, err := c.st.Delete(ctx, api.KindAgent, name, store.DeleteOptions{ResourceVersion: a.Metadata.ResourceVersion})
			switch {
			case errors.Is(err, api.ErrConflict):
				return reconcile.Result{RequeueAfter: time.Millisecond}, nil // changed meanwhile: look again
			case errors.Is(err, api.ErrNotFound):
				return reconcile.Result{}, nil
			case err != nil:
				return reconcile.Result{}, err
			}
			reconcile.Event(ctx, c.st, c.log, a, api.EventNormal, "Expired", fmt.Sprintf("deleted %ds after it finished (ttlSecondsAfterFinished)", *ttl))
		}
		return reconcile.Result{}, nil
	case agentstate.Bound(a):
		return c.watchBound(ctx, a, now, fresh)
	}
	return reconcile.Result{}, nil
}

// watchBound fails the attempt of a bound agent whose sandbox is gone or
// no longer claimed by it, or whose deadline passed with no word from its
// node.
func (c *Agents) watchBound(ctx context.Context, a *api.Agent, now time.Time, fresh bool) (reconcile.Result, error) {
	lost := ""
	so, err := c.get(ctx, api.KindSandbox, a.Status.Sandbox, fresh)
	switch {
	case errors.Is(err, api.ErrNotFound):
		lost = fmt.Sprintf("sandbox %s was deleted", a.Status.Sandbox)
	case err != nil:
		return reconcile.Result{}, err
	default:
		sb := so.(*api.Sandbox)
		switch {
		case sb.Status.CurrentAgent != a.Metadata.Name && a.Status.ScheduledAt != nil && now.Sub(*a.Status.ScheduledAt) > agentstate.ClaimGrace:
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
		deadline = start.Add(agentstate.Timeout(a) + nodeGrace)
	}
	reason := "SandboxLost"
	if lost == "" && !deadline.IsZero() && now.After(deadline) {
		reason, lost = "DeadlineExceeded", fmt.Sprintf("no result within %s of the attempt's start", agentstate.Timeout(a))
	}
	if lost != "" && !fresh {
		return c.reconcile(ctx, a.Metadata.Name, true)
	}
	if lost == "" {
		next := time.Minute
		if !deadline.IsZero() {
			next = min(next, deadline.Sub(now))
		}
		return reconcile.Result{RequeueAfter: max(next, time.Second)}, nil
	}
	attempt := a.Status.Attempts
	out, err := reconcile.UpdateStatus(ctx, c.st, api.KindAgent, a.Metadata.Name, func(cur *api.Agent) bool {
		if !agentstate.Bound(cur) || cur.Status.Attempts != attempt || cur.Status.Sandbox != a.Status.Sandbox {
			return false // the node got there first
		}
		agentstate.FailAttempt(cur, reason, lost, now)
		return true
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	reconcile.Event(ctx, c.st, c.log, out, api.EventWarning, reason, lost)
	return reconcile.Result{}, nil
}

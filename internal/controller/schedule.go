package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/scheduler"
	"github.com/hvkube/hvkube/internal/store"
)

// Scheduler binds pending agents to free sandboxes. It works on one key:
// every change of an agent or a sandbox asks for a round, and a round
// places every agent it can (the queue folds a burst of changes into one
// round). A binding is two writes: a claim on the sandbox
// (status.currentAgent), conditioned on the resourceVersion the round
// read, then the agent's status. Of two rounds that pick one sandbox, only
// one claim lands; an agent runs only on a sandbox whose claim names it.
type Scheduler struct {
	st        store.Interface
	log       *slog.Logger
	now       func() time.Time
	agents    *reconcile.Cache
	sandboxes *reconcile.Cache
	nodes     *reconcile.Cache
	q         *reconcile.Queue
}

// schedulerKey is the scheduler's one key.
const schedulerKey = "pending-agents"

// NewScheduler registers the scheduler with m.
func NewScheduler(m *reconcile.Manager, st store.Interface, log *slog.Logger, now func() time.Time) *Scheduler {
	if now == nil {
		now = time.Now
	}
	s := &Scheduler{st: st, log: log, now: now, agents: m.Cache(api.KindAgent), sandboxes: m.Cache(api.KindSandbox), nodes: m.Cache(api.KindNode)}
	round := func(api.Object) []string { return []string{schedulerKey} }
	s.q = m.Register(reconcile.Controller{Name: "scheduler", Reconciler: s, Workers: 1, ResyncKey: schedulerKey,
		Watches: []reconcile.Watch{{Kind: api.KindAgent, Map: round}, {Kind: api.KindSandbox, Map: round}}})
	return s
}

// Reconcile runs one scheduling round.
func (s *Scheduler) Reconcile(ctx context.Context, _ string) (reconcile.Result, error) {
	now := s.now()
	var agents []scheduler.Agent
	byName := map[string]*api.Agent{}
	// What this scheduler wrote and its watch has not brought yet is left
	// for a later round: its view here is older than the write.
	inFlight := s.agents.RangeSettled(func(o api.Object) bool {
		a := o.(*api.Agent)
		if agentstate.Pending(a) {
			byName[a.Metadata.Name] = a
			agents = append(agents, scheduler.Agent{Name: a.Metadata.Name, SandboxName: a.Spec.SandboxName,
				Selector: agentstate.SelectorOf(a), RequiresGPU: a.Spec.RequiresGPU, Created: a.Metadata.CreationTimestamp})
		}
		return true
	})
	if len(agents) == 0 {
		if inFlight > 0 {
			// An agent of its own writes is in flight: its watch event
			// asks for a round; look again in any case.
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return reconcile.Result{}, nil
	}
	var sandboxes []scheduler.Sandbox
	seen := map[string]*api.Sandbox{}
	inFlight += s.sandboxes.RangeSettled(func(o api.Object) bool {
		sb := o.(*api.Sandbox)
		if s.onLostNode(sb) {
			return true // being taken back: an agent bound to it would not run
		}
		seen[sb.Metadata.Name] = sb
		sandboxes = append(sandboxes, ViewOf(sb))
		return true
	})
	plan := scheduler.Plan(agents, sandboxes, now)
	conflicts := 0
	if gu, ok := s.st.(groupUpdater); ok {
		var err error
		if conflicts, err = s.bindAll(ctx, gu, plan, byName, seen); err != nil {
			return reconcile.Result{}, err
		}
	} else {
		var err error
		if conflicts, err = s.bindEach(ctx, plan, byName, seen); err != nil {
			return reconcile.Result{}, err
		}
	}
	if conflicts > 0 {
		// The round read something stale; the next one reads the writes
		// that beat it.
		return reconcile.Result{RequeueAfter: 10 * time.Millisecond}, nil
	}
	if len(plan) < len(agents) {
		// Agents left waiting: a freed or new sandbox asks for a round;
		// look again now and then in any case, soon when some were left
		// out as in flight.
		if inFlight > 0 {
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	}
	return reconcile.Result{}, nil
}

// onLostNode reports whether sb's node is marked lost.
func (s *Scheduler) onLostNode(sb *api.Sandbox) bool {
	if sb.Status.Node == "" {
		return false
	}
	n, ok := s.nodes.Get(sb.Status.Node)
	return ok && nodeLost(n.(*api.Node))
}

// ViewOf is a sandbox as the scheduler sees it.
func ViewOf(sb *api.Sandbox) scheduler.Sandbox {
	idle := sb.Status.ReadyAt
	if sb.Status.ReleasedAt != nil {
		idle = sb.Status.ReleasedAt
	}
	// A sandbox a person holds (status.control) takes no new agent: its
	// input would be refused.
	v := scheduler.Sandbox{Name: sb.Metadata.Name, Labels: sb.Metadata.Labels, Phase: sb.Status.Phase,
		Agent: sb.Status.CurrentAgent, Healthy: sb.Status.Healthy() && sb.Status.Control == nil,
		Deleting: sb.Metadata.DeletionTimestamp != nil, GPU: sb.Spec.Resources.GPU}
	if idle != nil {
		v.IdleSince = *idle
	}
	return v
}

// groupUpdater is a store that writes groups of status updates in one
// transaction (store.Store does). With one, a round's claims and bindings
// are one commit, each claim and its binding landing together.
type groupUpdater interface {
	UpdateStatusGroups(ctx context.Context, groups [][]api.Object) ([][]api.Object, []error, error)
}

// bindAll binds the round's plan through a groupUpdater: per binding, the
// claim on the sandbox and the agent's status, both conditioned on what
// the round read, land together or not at all. It returns how many
// bindings lost to a concurrent write.
func (s *Scheduler) bindAll(ctx context.Context, gu groupUpdater, plan []scheduler.Binding, agents map[string]*api.Agent, sandboxes map[string]*api.Sandbox) (int, error) {
	var groups [][]api.Object
	var kept []scheduler.Binding
	conflicts := 0
	for _, b := range plan {
		seen, a := sandboxes[b.Sandbox], agents[b.Agent]
		if seen == nil || a == nil || seen.Status.CurrentAgent != "" {
			conflicts++
			continue
		}
		now := s.now()
		sb, ag := agentstate.Claim(seen, a, now)
		groups = append(groups, []api.Object{sb, ag})
		kept = append(kept, b)
	}
	if len(groups) == 0 {
		return conflicts, nil
	}
	out, errs, err := gu.UpdateStatusGroups(ctx, groups)
	if err != nil {
		return conflicts, err
	}
	for i, b := range kept {
		if errs[i] != nil {
			if !errors.Is(errs[i], api.ErrConflict) && !errors.Is(errs[i], api.ErrNotFound) {
				return conflicts, errs[i]
			}
			conflicts++
			continue
		}
		s.sandboxes.Expect(out[i][0])
		s.agents.Expect(out[i][1])
		reconcile.Event(ctx, s.st, s.log, out[i][1], api.EventNormal, "Scheduled", fmt.Sprintf("bound to sandbox %s on node %s", b.Sandbox, out[i][0].(*api.Sandbox).Status.Node))
	}
	return conflicts, nil
}

// bindParallel bounds the bindings of a round that are written at once on
// a store without grouped writes: each is a claim then a binding, two
// round trips, and a round of many agents would otherwise wait for them
// one after another.
const bindParallel = 32

// bindEach writes the bindings of plan, bindParallel at a time (each
// names its own agent and sandbox), and counts those that lost to a write
// the round did not see.
func (s *Scheduler) bindEach(ctx context.Context, plan []scheduler.Binding, agents map[string]*api.Agent, sandboxes map[string]*api.Sandbox) (int, error) {
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		conflicts int
		first     error
	)
	sem := make(chan struct{}, bindParallel)
	for _, b := range plan {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := s.bind(ctx, agents[b.Agent], sandboxes[b.Sandbox], s.now())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
			case errors.Is(err, api.ErrConflict) || errors.Is(err, api.ErrNotFound):
				conflicts++
			case first == nil:
				first = err
			}
		}()
	}
	wg.Wait()
	return conflicts, first
}

// bind claims sb, the sandbox as the round saw it, for a, then records the
// binding on a. The claim is conditioned on the resourceVersion the round
// read: if anything wrote the sandbox since (another scheduler's claim
// among them) the claim fails. If the agent cannot be written, the claim
// is taken back, again only if nothing wrote the sandbox since.
func (s *Scheduler) bind(ctx context.Context, a *api.Agent, seen *api.Sandbox, now time.Time) error {
	if seen == nil || seen.Status.CurrentAgent != "" {
		return fmt.Errorf("sandbox is taken: %w", api.ErrConflict)
	}
	name := seen.Metadata.Name
	sb, ag := agentstate.Claim(seen, a, now)
	claimed, err := s.st.UpdateStatus(ctx, sb)
	if err != nil {
		return err
	}
	s.sandboxes.Expect(claimed)
	bound, err := s.st.UpdateStatus(ctx, ag)
	if err != nil {
		// The status as the round saw it, as of the claim's version: the
		// claim's phase, times and condition go with it.
		back := api.DeepCopy(claimed.(*api.Sandbox))
		back.Status = api.DeepCopy(seen).Status
		if out, uerr := s.st.UpdateStatus(ctx, back); uerr == nil {
			s.sandboxes.Expect(out)
		} else if !errors.Is(uerr, api.ErrNotFound) && !errors.Is(uerr, api.ErrConflict) {
			// A claim left behind is released by the node once it is
			// stale; log why it was not taken back now.
			s.log.Warn("take back a claim", "sandbox", name, "agent", a.Metadata.Name, "err", uerr)
		}
		return err
	}
	s.agents.Expect(bound)
	reconcile.Event(ctx, s.st, s.log, bound, api.EventNormal, "Scheduled", fmt.Sprintf("bound to sandbox %s on node %s", name, sb.Status.Node))
	return nil
}

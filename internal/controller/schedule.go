package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/scheduler"
	"github.com/hvkube/hvkube/internal/store"
)

// Scheduler binds pending agents to free sandboxes. It works on one key
// per pool: a pending agent whose selector names a pool (matchLabels
// pool=NAME, what `sandboxSelector: {pool: NAME}` becomes) is placed by the
// round of its pool's key, which looks only at that pool's pending agents
// and sandboxes (the caches' indexes); any other pending agent (one that
// names its sandbox, or selects by other labels) by the round of
// anyPoolKey, which looks at every sandbox. A change of an agent or a
// sandbox asks for a round of the keys it concerns, and a round places
// every agent of its key it can (the queue folds a burst of changes into
// one round). Rounds of different keys run at once (schedulerWorkers);
// two that pick one sandbox are settled by the claim's condition, as for
// two schedulers. A binding is one write: a claim on the sandbox
// (status.currentAgent and status.claim), conditioned on the
// resourceVersion the round read. Of two rounds that pick one sandbox,
// only one claim lands. The sandbox's node starts the agent's attempt
// from the claim, conditioned on the agent's version the claim records
// (agentstate.StartPatch): an agent runs only on a sandbox whose claim
// names it, and starts once however many claims name it.
type Scheduler struct {
	st        store.Interface
	log       *slog.Logger
	now       func() time.Time
	agents    *reconcile.Cache
	sandboxes *reconcile.Cache
	nodes     *reconcile.Cache
	q         *reconcile.Queue
	// claimed remembers the version of each agent this scheduler claimed
	// a sandbox for, and when (see spent).
	mu      sync.Mutex // guards claimed and swept
	claimed map[string]claimedVersion
	swept   int // len(claimed) after its last sweep
}

// claimedVersion is an agent's version a claim was made for.
type claimedVersion struct {
	rv string
	at time.Time
}

// claimMemory is how long after a claim the scheduler takes the agent's
// version it claimed as spent. The agent is taken while a claim names it;
// once the claim is gone (its attempt ran and its sandbox was released)
// the scheduler's view of the agent may still be that version, Pending,
// for as long as the agent's watch lags the sandbox's. A new claim of it
// would be one its node lets go of; a claim for a later version is not.
const claimMemory = 10 * time.Second

// noteClaimed records that a claim was made for a at now.
func (s *Scheduler) noteClaimed(a *api.Agent, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimed == nil {
		s.claimed = map[string]claimedVersion{}
	}
	s.claimed[a.Metadata.Name] = claimedVersion{rv: a.Metadata.ResourceVersion, at: now}
	// Claims of agents never seen Pending again (they completed) are
	// forgotten here, once the memory doubled since the last sweep.
	if len(s.claimed) >= max(2*s.swept, 1024) {
		for name, c := range s.claimed {
			if now.Sub(c.at) >= claimMemory {
				delete(s.claimed, name)
			}
		}
		s.swept = len(s.claimed)
	}
}

// spent reports whether a, as the round sees it, is a version this
// scheduler claimed a sandbox for within claimMemory, forgetting claims
// older than that.
func (s *Scheduler) spent(a *api.Agent, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.claimed[a.Metadata.Name]
	if !ok {
		return false
	}
	if now.Sub(c.at) >= claimMemory || c.rv != a.Metadata.ResourceVersion {
		delete(s.claimed, a.Metadata.Name)
		return false
	}
	return true
}

// The scheduler's keys and the caches' indexes its rounds read.
const (
	// anyPoolKey is the round of the pending agents that name no pool.
	anyPoolKey = "*"
	// poolKeyPrefix starts the key of a pool's round: pool/NAME.
	poolKeyPrefix = "pool/"
	// shardIndex holds the pending agents by their round's key.
	shardIndex = "scheduler-round"
	// poolIndex holds the sandboxes by their pool label.
	poolIndex = "pool"
)

// schedulerWorkers is how many rounds (of different keys) run at once.
const schedulerWorkers = 4

// roundOf is the key of the round that places a.
func roundOf(a *api.Agent) string {
	if a.Spec.SandboxName == "" && a.Spec.SandboxSelector != nil {
		if p := a.Spec.SandboxSelector.MatchLabels["pool"]; p != "" {
			return poolKeyPrefix + p
		}
	}
	return anyPoolKey
}

// NewScheduler registers the scheduler with m.
func NewScheduler(m *reconcile.Manager, st store.Interface, log *slog.Logger, now func() time.Time) *Scheduler {
	if now == nil {
		now = time.Now
	}
	s := &Scheduler{st: st, log: log, now: now, agents: m.Cache(api.KindAgent), sandboxes: m.Cache(api.KindSandbox), nodes: m.Cache(api.KindNode)}
	s.agents.AddIndex(shardIndex, func(o api.Object) []string {
		if a := o.(*api.Agent); agentstate.Pending(a) {
			return []string{roundOf(a)}
		}
		return nil
	})
	s.sandboxes.AddIndex(poolIndex, func(o api.Object) []string {
		if p := o.GetMeta().Labels["pool"]; p != "" {
			return []string{p}
		}
		return nil
	})
	agentRound := func(o api.Object) []string { return []string{roundOf(o.(*api.Agent))} }
	s.q = m.Register(reconcile.Controller{Name: "scheduler", Reconciler: s, Workers: schedulerWorkers,
		ResyncKeys: s.rounds,
		Watches:    []reconcile.Watch{{Kind: api.KindAgent, Map: agentRound}, {Kind: api.KindSandbox, Map: s.sandboxRounds}}})
	return s
}

// sandboxRounds are the rounds a change of a sandbox concerns: its pool's
// and anyPoolKey's, those that have pending agents.
func (s *Scheduler) sandboxRounds(o api.Object) []string {
	var keys []string
	if s.agents.IndexLen(shardIndex, anyPoolKey) > 0 {
		keys = append(keys, anyPoolKey)
	}
	if p := o.GetMeta().Labels["pool"]; p != "" && s.agents.IndexLen(shardIndex, poolKeyPrefix+p) > 0 {
		keys = append(keys, poolKeyPrefix+p)
	}
	return keys
}

// rounds are the keys of every round that has pending agents, and
// anyPoolKey: what a resync looks at again.
func (s *Scheduler) rounds() []string {
	keys := s.agents.IndexValues(shardIndex)
	if !slices.Contains(keys, anyPoolKey) {
		keys = append(keys, anyPoolKey)
	}
	return keys
}

// Reconcile runs the scheduling round of key; "" runs every round that
// has pending agents, one after another, and asks for the soonest look
// again any of them asked for.
func (s *Scheduler) Reconcile(ctx context.Context, key string) (reconcile.Result, error) {
	if key != "" {
		return s.round(ctx, key)
	}
	keys := s.rounds()
	slices.Sort(keys)
	var res reconcile.Result
	for _, k := range keys {
		r, err := s.round(ctx, k)
		if err != nil {
			return res, err
		}
		if r.RequeueAfter > 0 && (res.RequeueAfter == 0 || r.RequeueAfter < res.RequeueAfter) {
			res = r
		}
	}
	return res, nil
}

// round runs the scheduling round of key.
func (s *Scheduler) round(ctx context.Context, key string) (reconcile.Result, error) {
	now := s.now()
	rangeSandboxes := s.sandboxes.RangeSettled
	if pool, ok := strings.CutPrefix(key, poolKeyPrefix); ok {
		rangeSandboxes = func(fn func(api.Object) bool) int { return s.sandboxes.RangeSettledIn(poolIndex, pool, fn) }
	} else if key != anyPoolKey {
		return reconcile.Result{}, nil // a key of an older build
	}
	var sandboxes []scheduler.Sandbox
	seen := map[string]*api.Sandbox{}
	// An agent a claim names is taken: its node starts it (it stays
	// Pending until then). What this scheduler wrote and its watch has
	// not brought yet is left for a later round: its view here is older
	// than the write; its own claims are in the cache as written.
	claimed := map[string]bool{}
	lost := s.lostNodes()
	inFlight := rangeSandboxes(func(o api.Object) bool {
		sb := o.(*api.Sandbox)
		if lost[sb.Status.Node] {
			return true // being taken back: an agent bound to it would not run
		}
		released := sb.Status.CurrentAgent != "" && releasedIn(s.agents, sb)
		if sb.Status.CurrentAgent != "" && !released {
			claimed[sb.Status.CurrentAgent] = true
			return true
		}
		v := scheduler.ViewOf(sb)
		if released {
			// Reset and paused by its node before the outcome of the
			// agent its claim names: free, though written as that claim
			// left it.
			v.Agent, v.Phase, v.Released, v.IdleSince = "", api.SandboxPaused, true, time.Time{}
		}
		// The plan binds only open sandboxes: the others are left out.
		if scheduler.Open(v) {
			seen[sb.Metadata.Name] = sb
			sandboxes = append(sandboxes, v)
		}
		return true
	})
	open := len(sandboxes)
	// The plan binds at most one agent per open sandbox, oldest first: it
	// is given the oldest pending agents, a few more than there are open
	// sandboxes, rather than a backlog of thousands to sort at every
	// round. Only when some of those fit no open sandbox, so that a later
	// agent might, does it get them all.
	pending := func(limit int) (agents []scheduler.Agent, byName map[string]*api.Agent, total, inFlight int) {
		w := agentWindow{limit: limit}
		inFlight = s.agents.RangeSettledIn(shardIndex, key, func(o api.Object) bool {
			a := o.(*api.Agent)
			if agentstate.Pending(a) && !claimed[a.Metadata.Name] && !s.spent(a, now) {
				total++
				w.offer(a)
			}
			return true
		})
		byName = make(map[string]*api.Agent, len(w.agents))
		for _, a := range w.agents {
			byName[a.Metadata.Name] = a
			agents = append(agents, scheduler.Agent{Name: a.Metadata.Name, SandboxName: a.Spec.SandboxName,
				Selector: agentstate.SelectorOf(a), RequiresGPU: a.Spec.RequiresGPU, Created: a.Metadata.CreationTimestamp,
				Avoid: a.Status.FailedSandbox})
		}
		return agents, byName, total, inFlight
	}
	if open == 0 && s.agents.IndexLen(shardIndex, key) > 0 {
		// Nothing to bind to: a freed or new sandbox asks for a round.
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	}
	agents, byName, total, agentsInFlight := pending(2*open + roundSlack)
	inFlight += agentsInFlight
	if total == 0 {
		if inFlight > 0 {
			// An agent of its own writes is in flight: its watch event
			// asks for a round; look again in any case.
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return reconcile.Result{}, nil
	}
	plan := scheduler.Plan(agents, sandboxes, now)
	if len(plan) < open && len(agents) < total {
		agents, byName, total, _ = pending(0)
		plan = scheduler.Plan(agents, sandboxes, now)
	}
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
	if len(plan) < total {
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

// free reports whether sb, as the round read it, takes a claim: no claim
// names an agent, or the one that does finished and its node released
// the sandbox without writing it (agentstate.Released).
func (s *Scheduler) free(sb *api.Sandbox) bool {
	return sb.Status.CurrentAgent == "" || releasedIn(s.agents, sb)
}

// releasedIn reports whether the agent sb's claim names released it
// (agentstate.Released), as agents, a cache of them, shows that agent: it
// is free for the next claim, whose write is the release's too, or its
// node writes the release within seconds.
func releasedIn(agents *reconcile.Cache, sb *api.Sandbox) bool {
	o, ok := agents.Get(sb.Status.CurrentAgent)
	return ok && agentstate.Released(sb, o.(*api.Agent))
}

// lostNodes are the nodes marked lost, by name (nil when none is): read
// once per round, not once per sandbox.
func (s *Scheduler) lostNodes() map[string]bool {
	var lost map[string]bool
	s.nodes.Range(func(o api.Object) bool {
		if n := o.(*api.Node); nodeLost(n) {
			if lost == nil {
				lost = map[string]bool{}
			}
			lost[n.Metadata.Name] = true
		}
		return true
	})
	return lost
}

// groupUpdater is a store that writes groups of status updates in one
// transaction (store.Store does): a round's claims are one commit, each
// landing or not on its own.
type groupUpdater interface {
	UpdateStatusGroups(ctx context.Context, groups [][]api.Object) ([][]api.Object, []error, error)
}

// bindAll writes the round's claims through a groupUpdater, each
// conditioned on what the round read. It returns how many lost to a
// concurrent write.
func (s *Scheduler) bindAll(ctx context.Context, gu groupUpdater, plan []scheduler.Binding, agents map[string]*api.Agent, sandboxes map[string]*api.Sandbox) (int, error) {
	var groups [][]api.Object
	var kept []*api.Agent
	conflicts := 0
	for _, b := range plan {
		seen, a := sandboxes[b.Sandbox], agents[b.Agent]
		if seen == nil || a == nil || !s.free(seen) {
			conflicts++
			continue
		}
		groups = append(groups, []api.Object{agentstate.Claim(seen, a, s.now())})
		kept = append(kept, a)
	}
	if len(groups) == 0 {
		return conflicts, nil
	}
	out, errs, err := gu.UpdateStatusGroups(ctx, groups)
	if err != nil {
		return conflicts, err
	}
	for i := range groups {
		if errs[i] != nil {
			if !errors.Is(errs[i], api.ErrConflict) && !errors.Is(errs[i], api.ErrNotFound) {
				return conflicts, errs[i]
			}
			conflicts++
			continue
		}
		s.sandboxes.Expect(out[i][0])
		s.noteClaimed(kept[i], s.now())
	}
	return conflicts, nil
}

// bindParallel bounds the claims of a round that are written at once on a
// store without grouped writes: each is a round trip, and a round of many
// agents would otherwise wait for them one after another.
const bindParallel = 32

// bindEach writes the claims of plan, bindParallel at a time (each names
// its own agent and sandbox), and counts those that lost to a write the
// round did not see.
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

// bind claims sb, the sandbox as the round saw it, for a. The claim is
// conditioned on the resourceVersion the round read: if anything wrote
// the sandbox since (another scheduler's claim among them) it fails.
func (s *Scheduler) bind(ctx context.Context, a *api.Agent, seen *api.Sandbox, now time.Time) error {
	if seen == nil || a == nil || !s.free(seen) {
		return fmt.Errorf("sandbox is taken: %w", api.ErrConflict)
	}
	claimed, err := s.st.UpdateStatus(ctx, agentstate.Claim(seen, a, now))
	if err != nil {
		return err
	}
	s.sandboxes.Expect(claimed)
	s.noteClaimed(a, now)
	return nil
}

// roundSlack is how many pending agents beyond twice its open sandboxes a
// round hands the plan first.
const roundSlack = 32

// agentWindow keeps the limit oldest agents offered to it (all of them
// when limit is 0), in the order the plan takes them (scheduler.CompareAge):
// a heap with the newest it keeps on top, so that an offer newer than all
// of them, once it is full, costs one comparison.
type agentWindow struct {
	limit  int
	agents []*api.Agent
}

func (w *agentWindow) offer(a *api.Agent) {
	if w.limit == 0 || len(w.agents) < w.limit {
		w.agents = append(w.agents, a)
		if w.limit > 0 {
			w.up(len(w.agents) - 1)
		}
		return
	}
	if !w.newer(w.agents[0], a) {
		return
	}
	w.agents[0] = a
	w.down(0)
}

// newer reports whether x comes after y in the plan's order.
func (w *agentWindow) newer(x, y *api.Agent) bool {
	return scheduler.CompareAge(x.Metadata.CreationTimestamp, x.Metadata.Name, y.Metadata.CreationTimestamp, y.Metadata.Name) > 0
}

func (w *agentWindow) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !w.newer(w.agents[i], w.agents[p]) {
			return
		}
		w.agents[i], w.agents[p] = w.agents[p], w.agents[i]
		i = p
	}
}

func (w *agentWindow) down(i int) {
	for {
		top, l, r := i, 2*i+1, 2*i+2
		if l < len(w.agents) && w.newer(w.agents[l], w.agents[top]) {
			top = l
		}
		if r < len(w.agents) && w.newer(w.agents[r], w.agents[top]) {
			top = r
		}
		if top == i {
			return
		}
		w.agents[i], w.agents[top] = w.agents[top], w.agents[i]
		i = top
	}
}

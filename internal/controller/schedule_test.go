package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/scheduler"
	"github.com/hvkube/hvkube/internal/store"
)

// schedEnv is an env with the scheduler.
type schedEnv struct {
	*env
	s *Scheduler
}

func newSchedEnv(t *testing.T, path claimPath) *schedEnv {
	e := newEnv(t)
	return &schedEnv{env: e, s: NewScheduler(e.m, path.wrap(e.st), e.log, e.clk.Now)}
}

// claimPath is one of the scheduler's two ways to claim: a round's claims
// grouped in one transaction (SQLite), or each claim a write of its own
// (any store, the Kubernetes one among them).
type claimPath struct {
	name string
	wrap func(store.Interface) store.Interface
}

var claimPaths = []claimPath{
	{"grouped", func(st store.Interface) store.Interface { return st }},
	// Only the store interface: no UpdateStatusGroups to find.
	{"one write each", func(st store.Interface) store.Interface { return struct{ store.Interface }{st} }},
}

// onClaimPaths runs fn once per claim path.
func onClaimPaths(t *testing.T, fn func(t *testing.T, path claimPath)) {
	for _, path := range claimPaths {
		t.Run(path.name, func(t *testing.T) { fn(t, path) })
	}
}

func (e *schedEnv) reconcile() reconcile.Result {
	e.t.Helper()
	e.sync()
	res, err := e.s.Reconcile(e.ctx, "")
	if err != nil {
		e.t.Fatalf("scheduling round: %v", err)
	}
	return res
}

// testSandbox is a sandbox as its node leaves it.
type testSandbox struct {
	name   string
	labels map[string]string
	phase  string
	// idle is how long before t0 it became free (0: never recorded).
	idle     time.Duration
	gpu      bool
	agent    string
	reason   string
	deleting bool
}

func (e *env) createSandbox(s testSandbox) {
	e.t.Helper()
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = s.name
	sb.Metadata.Labels = s.labels
	sb.Spec.Resources.GPU = s.gpu
	api.Default(sb)
	sb.Status.Phase, sb.Status.Node, sb.Status.CurrentAgent, sb.Status.Reason = s.phase, "n1", s.agent, s.reason
	if s.idle > 0 {
		at := t0.Add(-s.idle)
		sb.Status.ReleasedAt = &at
	}
	if s.deleting {
		sb.Metadata.Finalizers = []string{api.FinalizerVM}
	}
	e.create(sb)
	if s.deleting {
		if _, _, err := e.st.Delete(e.ctx, api.KindSandbox, s.name, store.DeleteOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// binding is where agent name is placed: the one sandbox whose claim
// names it, checked to record the agent (a node starts the attempt from
// it), and against the agent's status.sandbox once it has one.
func (e *env) binding(name string) string {
	e.t.Helper()
	a := e.agent(name)
	items, _, err := e.st.List(e.ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		e.t.Fatal(err)
	}
	var claims []string
	for _, it := range items {
		sb := it.(*api.Sandbox)
		if sb.Status.CurrentAgent != name {
			continue
		}
		claims = append(claims, sb.Metadata.Name)
		if c := sb.Status.Claim; c != nil && (c.UID != a.Metadata.UID || c.Attempt != a.Status.Attempts+1) {
			e.t.Errorf("the claim of %s records agent %s as %+v, want uid %s, attempt %d", sb.Metadata.Name, name, *c, a.Metadata.UID, a.Status.Attempts+1)
		}
	}
	switch {
	case len(claims) > 1:
		e.t.Errorf("agent %s is claimed on %d sandboxes: %v", name, len(claims), claims)
	case a.Status.Sandbox != "" && (len(claims) == 0 || claims[0] != a.Status.Sandbox):
		e.t.Errorf("agent %s is bound to %s, claimed on %v", name, a.Status.Sandbox, claims)
	case len(claims) == 0:
		return ""
	}
	return claims[0]
}

func TestSchedulerScoring(t *testing.T) { onClaimPaths(t, testSchedulerScoring) }

func testSchedulerScoring(t *testing.T, path claimPath) {
	e := newSchedEnv(t, path)
	web := map[string]string{"pool": "web"}
	for _, s := range []testSandbox{
		{name: "paused-long", labels: web, phase: api.SandboxPaused, idle: 10 * time.Minute},
		{name: "paused-short", labels: web, phase: api.SandboxPaused, idle: 10 * time.Second},
		{name: "running", labels: web, phase: api.SandboxRunning, idle: time.Second},
		{name: "saved", labels: web, phase: api.SandboxSaved, idle: 20 * time.Second},
		{name: "busy", labels: web, phase: api.SandboxRunning, agent: "someone", idle: time.Hour},
	} {
		e.createSandbox(s)
	}
	// Agents are placed oldest first: the store stamps them with the
	// test clock.
	agents := []string{"first", "second", "third", "fourth", "fifth"}
	created := map[string]string{} // resourceVersion as created
	for _, n := range agents {
		created[n] = e.create(newAgent(t, n, nil)).GetMeta().ResourceVersion
		e.clk.Advance(time.Second)
	}
	e.clk.Advance(-5 * time.Second)
	res := e.reconcile()
	want := map[string]string{
		"first":  "running",      // running beats any warm sandbox
		"second": "paused-long",  // then the longest idle
		"third":  "saved",        // idle 20s
		"fourth": "paused-short", // idle 10s
		"fifth":  "",             // nothing left
	}
	for _, n := range agents {
		if got := e.binding(n); got != want[n] {
			t.Errorf("agent %s on %q, want %q", n, got, want[n])
		}
	}
	if res.RequeueAfter <= 0 {
		t.Errorf("requeue after %s, want a look again for the agent left waiting", res.RequeueAfter)
	}

	// The claim is the whole binding: the agent is not written (its node
	// starts it from the claim), and no event is recorded.
	a := e.agent("first")
	if a.Status.Phase != "" || a.Metadata.ResourceVersion != created["first"] {
		t.Errorf("the scheduler wrote the agent: phase %q, version %s (created as %s)", a.Status.Phase, a.Metadata.ResourceVersion, created["first"])
	}
	sb := e.sandbox("running")
	if sb.Status.ClaimedAt == nil || !sb.Status.ClaimedAt.Equal(e.clk.Now()) {
		t.Errorf("claimedAt %v, want %v", sb.Status.ClaimedAt, e.clk.Now())
	}
	want1 := api.AgentClaim{UID: a.Metadata.UID, ResourceVersion: created["first"], Generation: a.Metadata.Generation, Attempt: 1}
	if c := sb.Status.Claim; c == nil || *c != want1 {
		t.Errorf("claim %+v, want %+v", c, want1)
	}
	if got := len(e.events(api.KindAgent, "first", "Scheduled")); got != 0 {
		t.Errorf("%d Scheduled events, want none", got)
	}

	// Nothing changed: the next round binds nothing and writes nothing.
	before, _ := e.st.Revision(e.ctx)
	e.reconcile()
	if after, _ := e.st.Revision(e.ctx); after != before {
		t.Errorf("an idle round wrote to the store (revision %d -> %d)", before, after)
	}
}

func TestSchedulerSelectors(t *testing.T) {
	sandboxes := []testSandbox{
		{name: "web-1", labels: map[string]string{"pool": "web", "tier": "a"}, phase: api.SandboxPaused},
		{name: "web-2", labels: map[string]string{"pool": "web", "tier": "b"}, phase: api.SandboxPaused},
		{name: "web-busy", labels: map[string]string{"pool": "web"}, phase: api.SandboxRunning, agent: "x"},
		{name: "gpu-1", labels: map[string]string{"pool": "gpu"}, phase: api.SandboxPaused, gpu: true},
		{name: "sick", labels: map[string]string{"pool": "sick"}, phase: api.SandboxRunning, reason: "Unhealthy"},
		{name: "going", labels: map[string]string{"pool": "going"}, phase: api.SandboxPaused, deleting: true},
		{name: "cloning", labels: map[string]string{"pool": "cloning"}, phase: api.SandboxCreating},
		{name: "broken", labels: map[string]string{"pool": "broken"}, phase: api.SandboxError},
	}
	tests := []struct {
		name string
		edit func(*api.Agent)
		want string
	}{
		{"matchLabels", func(a *api.Agent) {
			a.Spec.SandboxSelector = &api.SandboxSelector{MatchLabels: map[string]string{"pool": "web", "tier": "b"}}
		}, "web-2"},
		{"pool shorthand", func(a *api.Agent) { a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "gpu"} }, "gpu-1"},
		{"no match", func(a *api.Agent) {
			a.Spec.SandboxSelector = &api.SandboxSelector{MatchLabels: map[string]string{"pool": "db"}}
		}, ""},
		{"sandboxName", func(a *api.Agent) { a.Spec.SandboxName = "web-2" }, "web-2"},
		{"sandboxName of a busy sandbox", func(a *api.Agent) { a.Spec.SandboxName = "web-busy" }, ""},
		{"sandboxName of a missing sandbox", func(a *api.Agent) { a.Spec.SandboxName = "nowhere" }, ""},
		{"gpu", func(a *api.Agent) {
			a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "gpu"}
			a.Spec.RequiresGPU = true
		}, "gpu-1"},
		{"gpu where there is none", func(a *api.Agent) {
			a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "web"}
			a.Spec.RequiresGPU = true
		}, ""},
		{"unhealthy", func(a *api.Agent) { a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "sick"} }, ""},
		{"being deleted", func(a *api.Agent) { a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "going"} }, ""},
		{"still cloning", func(a *api.Agent) { a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "cloning"} }, ""},
		{"in error", func(a *api.Agent) { a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "broken"} }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			onClaimPaths(t, func(t *testing.T, path claimPath) {
				e := newSchedEnv(t, path)
				for _, s := range sandboxes {
					e.createSandbox(s)
				}
				e.create(newAgent(t, "job", tt.edit))
				res := e.reconcile()
				if got := e.binding("job"); got != tt.want {
					t.Errorf("bound to %q, want %q", got, tt.want)
				}
				if tt.want == "" && res.RequeueAfter <= 0 {
					t.Errorf("requeue after %s, want a look again for the waiting agent", res.RequeueAfter)
				}
			})
		})
	}
}

// TestSchedulerClaimsTheAgentAsRead makes the agent change between the
// round's read and its write: the claim lands, and records the version the
// round read, on which the node's start is conditioned (the node reads the
// agent again then).
func TestSchedulerClaimsTheAgentAsRead(t *testing.T) {
	onClaimPaths(t, testSchedulerClaimsTheAgentAsRead)
}

func testSchedulerClaimsTheAgentAsRead(t *testing.T, path claimPath) {
	e := newSchedEnv(t, path)
	e.createSandbox(testSandbox{name: "web-1", labels: map[string]string{"pool": "web"}, phase: api.SandboxPaused})
	e.create(newAgent(t, "job", nil))
	e.sync()
	read := e.agent("job").Metadata.ResourceVersion
	// Someone labels the agent after the round's caches were filled.
	a := e.agent("job")
	a.Metadata.Labels = map[string]string{"team": "x"}
	if _, _, err := e.st.Update(e.ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Reconcile(e.ctx, ""); err != nil {
		t.Fatal(err)
	}
	c := e.sandbox("web-1").Status.Claim
	if got := e.binding("job"); got != "web-1" || c == nil || c.ResourceVersion != read {
		t.Fatalf("bound to %q with claim %+v, want web-1 recording version %s (the round's)", got, c, read)
	}
	// The next round does not claim it again.
	e.reconcile()
	if got := e.binding("job"); got != "web-1" {
		t.Errorf("after another round: bound to %q", got)
	}
}

// hookStore is the real store with hooks that run once, before the next
// UpdateStatus (of the object named beforeOn, when set) or Delete: a test
// uses them to land another writer's change at a precise moment of a
// reconcile. Naming the object keeps the moment precise when a round
// writes several bindings at once.
type hookStore struct {
	store.Interface
	mu           sync.Mutex // guards the hooks
	before       func(o api.Object)
	beforeOn     string
	beforeDelete func(kind, name string)
}

func (h *hookStore) Delete(ctx context.Context, kind, name string, opts store.DeleteOptions) (api.Object, bool, error) {
	h.mu.Lock()
	f := h.beforeDelete
	h.beforeDelete = nil
	h.mu.Unlock()
	if f != nil {
		f(kind, name)
	}
	return h.Interface.Delete(ctx, kind, name, opts)
}

func (h *hookStore) UpdateStatus(ctx context.Context, o api.Object) (api.Object, error) {
	h.mu.Lock()
	f := h.before
	if h.beforeOn != "" && h.beforeOn != o.GetMeta().Name {
		f = nil
	}
	if f != nil {
		h.before = nil
	}
	h.mu.Unlock()
	if f != nil {
		f(o)
	}
	return h.Interface.UpdateStatus(ctx, o)
}

// bindElsewhere claims sandbox for agent as another scheduler would, and
// lets the round's caches see it, as their watches would deliver it.
func (e *env) bindElsewhere(agent, sandbox string) {
	e.t.Helper()
	a := e.agent(agent)
	sb := e.sandbox(sandbox)
	if _, err := e.st.UpdateStatus(e.ctx, agentstate.Claim(sb, a, e.clk.Now())); err != nil {
		e.t.Fatal(err)
	}
	e.sync()
}

// TestSchedulerDoesNotStealAClaim lets another scheduler claim a sandbox
// after this round planned it as free and before it binds there: the
// round must lose, not overwrite the claim.
func TestSchedulerDoesNotStealAClaim(t *testing.T) {
	e := newEnv(t)
	hs := &hookStore{Interface: e.st}
	s := NewScheduler(e.m, hs, e.log, e.clk.Now)
	web := map[string]string{"pool": "web"}
	e.createSandbox(testSandbox{name: "sb-1", labels: web, phase: api.SandboxPaused})
	e.createSandbox(testSandbox{name: "sb-2", labels: web, phase: api.SandboxPaused})
	e.create(newAgent(t, "a1", nil))
	e.clk.Advance(time.Second)
	e.create(newAgent(t, "a2", nil))
	e.sync()
	// The other scheduler's agent is not in this round's view.
	e.create(newAgent(t, "other", func(a *api.Agent) { a.Spec.SandboxName = "sb-2" }))
	hs.before, hs.beforeOn = func(api.Object) { e.bindElsewhere("other", "sb-2") }, "sb-2"
	if _, err := s.Reconcile(e.ctx, ""); err != nil {
		t.Fatal(err)
	}
	if got, want := e.sandbox("sb-2").Status.CurrentAgent, "other"; got != want {
		t.Errorf("sb-2 claimed by %q, want %q (the first claim)", got, want)
	}
	if got := e.binding("a2"); got != "" {
		t.Errorf("a2 bound to %q, want left pending for the next round", got)
	}
	if got, want := e.binding("a1"), "sb-1"; got != want {
		t.Errorf("a1 bound to %q, want %q", got, want)
	}
}

// TestSchedulerLeavesTheWinnersClaim lets another scheduler bind the same
// agent to the same sandbox first: the round that loses leaves the
// winner's claim, and binds the agent nowhere else.
func TestSchedulerLeavesTheWinnersClaim(t *testing.T) {
	e := newEnv(t)
	hs := &hookStore{Interface: e.st}
	s := NewScheduler(e.m, hs, e.log, e.clk.Now)
	web := map[string]string{"pool": "web"}
	e.createSandbox(testSandbox{name: "sb-0", labels: web, phase: api.SandboxRunning})
	e.createSandbox(testSandbox{name: "sb-1", labels: web, phase: api.SandboxPaused})
	e.create(newAgent(t, "a0", nil))
	e.clk.Advance(time.Second)
	e.create(newAgent(t, "a1", nil))
	e.sync()
	// Just before this round claims sb-1 for a1, another binds a1 there.
	hs.before, hs.beforeOn = func(api.Object) { e.bindElsewhere("a1", "sb-1") }, "sb-1"
	if _, err := s.Reconcile(e.ctx, ""); err != nil {
		t.Fatal(err)
	}
	if got, want := e.binding("a0"), "sb-0"; got != want {
		t.Errorf("a0 bound to %q, want %q", got, want)
	}
	if got, want := e.sandbox("sb-1").Status.CurrentAgent, "a1"; got != want {
		t.Errorf("sb-1 claimed by %q, want %q: a1 is bound there", got, want)
	}
}

// TestSchedulerNeverDoubleBinds places 1,000 agents on 200 sandboxes (fewer
// under the race detector) with
// one or several schedulers on one store, each driven by its own Manager
// and, in the concurrent case, also called directly from several
// goroutines at once. Every stale round must lose its claim: no sandbox
// is bound to two agents and every binding is backed by the sandbox's
// claim; one scheduler binds no agent to two sandboxes.
func TestSchedulerNeverDoubleBinds(t *testing.T) {
	tests := []struct {
		name              string
		managers, callers int
	}{
		{"one scheduler", 1, 0},
		{"concurrent schedulers", 3, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			onClaimPaths(t, func(t *testing.T, path claimPath) {
				testNoDoubleBinds(t, path, tt.managers, tt.callers)
			})
		})
	}
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func testNoDoubleBinds(t *testing.T, path claimPath, nManagers, nCallers int) {
	nSandboxes, nAgents := 200, 1000
	if raceEnabled() {
		// The race detector makes every SQLite write about ten times
		// slower; a smaller crowd keeps the test short.
		nSandboxes, nAgents = 60, 300
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, t.TempDir(), store.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pools := []string{"a", "b", "c"}
	if err := st.Tx(ctx, func(tx *store.Tx) error {
		for i := 0; i < nSandboxes; i++ {
			sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
			sb.Metadata.Name = fmt.Sprintf("sb-%03d", i)
			sb.Metadata.Labels = map[string]string{"pool": pools[i%len(pools)]}
			api.Default(sb)
			sb.Status.Phase, sb.Status.Node = []string{api.SandboxPaused, api.SandboxRunning, api.SandboxSaved}[i%3], "n1"
			if _, err := tx.Create(sb); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	var schedulers []*Scheduler
	var managers []*reconcile.Manager
	for i := 0; i < nManagers; i++ {
		m := reconcile.NewManager(st, log, time.Second)
		schedulers = append(schedulers, NewScheduler(m, path.wrap(st), log, nil))
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		managers = append(managers, m)
	}
	defer func() {
		for _, m := range managers {
			m.Stop()
		}
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < nCallers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := schedulers[i%len(schedulers)]
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Reconcile(ctx, ""); err != nil {
					t.Errorf("scheduling round: %v", err)
					return
				}
			}
		}()
	}

	// The agents arrive in batches while the schedulers run; a tenth of
	// them name their sandbox.
	for b := 0; b < 10; b++ {
		if err := st.Tx(ctx, func(tx *store.Tx) error {
			for i := b * nAgents / 10; i < (b+1)*nAgents/10; i++ {
				a := newAgent(t, fmt.Sprintf("agent-%04d", i), func(a *api.Agent) {
					if i%10 == 0 {
						a.Spec.SandboxName = fmt.Sprintf("sb-%03d", i%nSandboxes)
					} else {
						a.Spec.SandboxSelector = &api.SandboxSelector{Pool: pools[i%len(pools)]}
					}
				})
				if _, err := tx.Create(a); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	// Wait until every sandbox is claimed, then stop everything before
	// judging.
	claimedAll := func() bool {
		items, _, err := st.List(ctx, api.KindSandbox, api.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if it.(*api.Sandbox).Status.CurrentAgent == "" {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && !claimedAll() {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for _, m := range managers {
		m.Stop()
	}

	items, _, err := st.List(ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	agentItems, _, err := st.List(ctx, api.KindAgent, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	agents := map[string]*api.Agent{}
	for _, it := range agentItems {
		agents[it.GetMeta().Name] = it.(*api.Agent)
	}
	claimsBy := map[string][]string{} // agent -> sandboxes claimed for it
	for _, it := range items {
		sb := it.(*api.Sandbox)
		name := sb.Metadata.Name
		a := agents[sb.Status.CurrentAgent]
		switch {
		case sb.Status.CurrentAgent == "":
			t.Errorf("sandbox %s is left unclaimed with agents waiting", name)
			continue
		case a == nil:
			t.Errorf("sandbox %s is claimed by %s, which does not exist", name, sb.Status.CurrentAgent)
			continue
		}
		claimsBy[a.Metadata.Name] = append(claimsBy[a.Metadata.Name], name)
		if c := sb.Status.Claim; c == nil || c.UID != a.Metadata.UID || c.Attempt != 1 {
			t.Errorf("sandbox %s's claim records %+v of agent %s (uid %s)", name, c, a.Metadata.Name, a.Metadata.UID)
		}
		if a.Status.Phase != "" || a.Status.Sandbox != "" {
			t.Errorf("agent %s was written: %s on %q, want Pending until its node starts it", a.Metadata.Name, a.Status.Phase, a.Status.Sandbox)
		}
		if a.Spec.SandboxName != "" && a.Spec.SandboxName != name {
			t.Errorf("agent %s asked for sandbox %s and got %s", a.Metadata.Name, a.Spec.SandboxName, name)
		}
		if a.Spec.SandboxSelector != nil && !agentstate.SelectorOf(a).Matches(sb.Metadata.Labels) {
			t.Errorf("agent %s is on %s, which its selector does not match", a.Metadata.Name, name)
		}
	}
	// One scheduler never claims two sandboxes for an agent: an agent is
	// placed by the rounds of one key, which never run at once. Several
	// (replicas that overlap, rounds called at once) may, when their
	// views differ: each claim is conditioned on its own sandbox only.
	// That is safe (the agent starts once, from the claim its version
	// matches; the other sandbox's node lets go of its claim), so it is
	// counted here, not failed.
	twice := 0
	for a, sbs := range claimsBy {
		if len(sbs) > 1 {
			twice++
			if nManagers == 1 && nCallers == 0 {
				t.Errorf("double bind: agent %s claims %d sandboxes: %v", a, len(sbs), sbs)
			}
		}
	}
	if twice > 0 {
		t.Logf("%d agents claimed on two sandboxes by concurrent schedulers", twice)
	}
	if nManagers == 1 && nCallers == 0 {
		if got, want := len(claimsBy), nSandboxes; got != want {
			t.Errorf("%d agents bound, want %d", got, want)
		}
	}
}

// TestSchedulerTakesAClaimedVersionAsSpent: once a claim is gone (its run
// ended and its node released the sandbox), an agent the round still sees
// at the version it claimed is not claimed again (its watch lags the
// sandbox's); a later version of it is, and so is the same version once
// claimMemory has passed.
func TestSchedulerTakesAClaimedVersionAsSpent(t *testing.T) {
	e := newSchedEnv(t, claimPaths[0])
	e.createSandbox(testSandbox{name: "web-1", labels: map[string]string{"pool": "web"}, phase: api.SandboxPaused})
	e.create(newAgent(t, "job", nil))
	e.reconcile()
	if got := e.binding("job"); got != "web-1" {
		t.Fatalf("bound to %q, want web-1", got)
	}
	release := func() {
		t.Helper()
		if _, err := reconcile.UpdateStatus(e.ctx, e.st, api.KindSandbox, "web-1", func(sb *api.Sandbox) bool {
			sb.Status.CurrentAgent, sb.Status.Claim, sb.Status.ClaimedAt = "", nil, nil
			sb.Status.Phase = api.SandboxPaused
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	release()
	e.reconcile()
	if got := e.binding("job"); got != "" {
		t.Fatalf("the version already claimed was claimed again, on %q", got)
	}
	e.clk.Advance(claimMemory)
	e.reconcile()
	if got := e.binding("job"); got != "web-1" {
		t.Fatalf("after claimMemory: bound to %q, want web-1", got)
	}
	// A later version (an attempt that failed, with a retry left) is
	// claimed at once.
	release()
	if _, err := reconcile.UpdateStatus(e.ctx, e.st, api.KindAgent, "job", func(a *api.Agent) bool {
		a.Status.Attempts, a.Status.Failures, a.Status.Phase = 1, 1, api.AgentPending
		return true
	}); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	if got := e.binding("job"); got != "web-1" {
		t.Fatalf("a later version: bound to %q, want web-1", got)
	}
}

// TestSchedulerRoundsByPool: an agent that names a pool is placed by its
// pool's round, which reads only that pool's agents and sandboxes; one
// that names its sandbox, or selects by other labels, by anyPoolKey's
// round, which reads every sandbox. A change of a sandbox asks for the
// rounds that have agents waiting for it.
func TestSchedulerRoundsByPool(t *testing.T) {
	e := newSchedEnv(t, claimPaths[0])
	e.createSandbox(testSandbox{name: "sb-a", labels: map[string]string{"pool": "a"}, phase: api.SandboxPaused})
	e.createSandbox(testSandbox{name: "sb-b", labels: map[string]string{"pool": "b", "tier": "x"}, phase: api.SandboxPaused})
	e.createSandbox(testSandbox{name: "sb-n", phase: api.SandboxPaused})
	e.create(newAgent(t, "ja", func(a *api.Agent) { a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "a"} }))
	e.create(newAgent(t, "jn", func(a *api.Agent) { a.Spec.SandboxName = "sb-n" }))
	e.create(newAgent(t, "jx", func(a *api.Agent) {
		a.Spec.SandboxSelector = &api.SandboxSelector{MatchLabels: map[string]string{"tier": "x"}}
	}))
	e.sync()

	rounds := e.s.rounds()
	sort.Strings(rounds)
	if want := []string{"*", "pool/a"}; !slices.Equal(rounds, want) {
		t.Errorf("rounds %v, want %v", rounds, want)
	}
	for _, tt := range []struct {
		sandbox string
		want    []string
	}{
		{"sb-a", []string{"*", "pool/a"}},
		{"sb-b", []string{"*"}}, // no agent waits in pool b
		{"sb-n", []string{"*"}},
	} {
		if got := e.s.sandboxRounds(e.sandbox(tt.sandbox)); !slices.Equal(got, tt.want) {
			t.Errorf("a change of %s asks for rounds %v, want %v", tt.sandbox, got, tt.want)
		}
	}

	if _, err := e.s.Reconcile(e.ctx, "pool/a"); err != nil {
		t.Fatal(err)
	}
	e.sync()
	if got := [3]string{e.binding("ja"), e.binding("jn"), e.binding("jx")}; got != [3]string{"sb-a", "", ""} {
		t.Errorf("after pool a's round: ja, jn, jx on %q, want only ja on sb-a", got)
	}
	if _, err := e.s.Reconcile(e.ctx, "*"); err != nil {
		t.Fatal(err)
	}
	e.sync()
	if got := [2]string{e.binding("jn"), e.binding("jx")}; got != [2]string{"sb-n", "sb-b"} {
		t.Errorf("after the round of any pool: jn, jx on %q, want sb-n, sb-b", got)
	}
	if res, err := e.s.Reconcile(e.ctx, "pool/old-key-of-nothing"); err != nil || res != (reconcile.Result{}) {
		t.Errorf("a round with no agents: %+v, %v", res, err)
	}
}

// TestSchedulerBacklog: with more agents waiting than sandboxes open, a
// round hands the plan the oldest few; it binds the same agents as a plan
// over all of them would, and takes them all when the oldest fit no open
// sandbox and a newer one does.
func TestSchedulerBacklog(t *testing.T) {
	tests := []struct {
		name    string
		waiting int  // agents of the pool, named a000…, oldest first
		gpu     bool // the waiting agents ask for a GPU, which no sandbox has
		open    int  // open sandboxes of the pool
		last    bool // one more agent, newest, that asks for no GPU
		want    []string
	}{
		{name: "oldest first", waiting: 200, open: 3, want: []string{"a000", "a001", "a002"}},
		{name: "nothing open", waiting: 200, open: 0},
		{name: "the oldest fit nowhere", waiting: 200, gpu: true, open: 2, last: true, want: []string{"last"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			onClaimPaths(t, func(t *testing.T, path claimPath) {
				e := newSchedEnv(t, path)
				for i := range tt.open {
					e.createSandbox(testSandbox{name: fmt.Sprintf("sb-%d", i), labels: map[string]string{"pool": "web"}, phase: api.SandboxPaused})
				}
				e.createSandbox(testSandbox{name: "busy", labels: map[string]string{"pool": "web"}, phase: api.SandboxRunning, agent: "someone"})
				names := make([]string, 0, tt.waiting+1)
				for i := range tt.waiting {
					names = append(names, fmt.Sprintf("a%03d", i))
				}
				if tt.last {
					names = append(names, "last")
				}
				for _, name := range names {
					gpu := tt.gpu && name != "last"
					e.create(newAgent(t, name, func(a *api.Agent) {
						a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "web"}
						a.Spec.RequiresGPU = gpu
					}))
				}
				res := e.reconcile()
				var bound []string
				for _, name := range names {
					if e.binding(name) != "" {
						bound = append(bound, name)
					}
				}
				if !slices.Equal(bound, tt.want) {
					t.Errorf("bound %v, want %v", bound, tt.want)
				}
				if res.RequeueAfter <= 0 {
					t.Errorf("requeue after %s, want a look again for the agents still waiting", res.RequeueAfter)
				}
			})
		})
	}
}

// TestAgentWindow: the window keeps the limit oldest agents offered, in
// any order of offers, and every agent without a limit.
func TestAgentWindow(t *testing.T) {
	agent := func(i int) *api.Agent {
		a := &api.Agent{}
		a.Metadata.Name = fmt.Sprintf("a%02d", i)
		a.Metadata.CreationTimestamp = t0.Add(time.Duration(i%7) * time.Second) // ties broken by name
		return a
	}
	var all []*api.Agent
	for i := range 40 {
		all = append(all, agent(i))
	}
	byAge := slices.Clone(all)
	slices.SortFunc(byAge, func(x, y *api.Agent) int {
		return scheduler.CompareAge(x.Metadata.CreationTimestamp, x.Metadata.Name, y.Metadata.CreationTimestamp, y.Metadata.Name)
	})
	names := func(as []*api.Agent) []string {
		out := make([]string, len(as))
		for i, a := range as {
			out[i] = a.Metadata.Name
		}
		slices.Sort(out)
		return out
	}
	for _, limit := range []int{0, 1, 5, 39, 40, 100} {
		for seed := range 5 {
			order := slices.Clone(all)
			rand.New(rand.NewPCG(uint64(seed), 1)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			w := agentWindow{limit: limit}
			for _, a := range order {
				w.offer(a)
			}
			want := byAge
			if limit > 0 && limit < len(want) {
				want = want[:limit]
			}
			if got := names(w.agents); !slices.Equal(got, names(want)) {
				t.Errorf("limit %d, offers in order %d: kept %v, want %v", limit, seed, got, names(want))
			}
		}
	}
}

func TestSchedulerTakesReleasedSandboxes(t *testing.T) {
	onClaimPaths(t, testSchedulerTakesReleasedSandboxes)
}

// testSchedulerTakesReleasedSandboxes: a sandbox whose claim names an
// agent that finished and released it (agentstate.Released) is claimed
// again, before one idle for long, and its claim's write is the only one;
// a claim of a finished agent that did not say so, or whose record does
// not match the claim, or a sandbox a person holds, is left alone.
func testSchedulerTakesReleasedSandboxes(t *testing.T, path claimPath) {
	e := newSchedEnv(t, path)
	web := map[string]string{"pool": "web"}
	e.createSandbox(testSandbox{name: "idle-long", labels: web, phase: api.SandboxPaused, idle: 10 * time.Minute})
	// Each finished agent ran its attempt 1 on its sandbox.
	finished := func(agent, sandbox string, edit func(a *api.Agent, sb *api.SandboxStatus)) {
		e.createSandbox(testSandbox{name: sandbox, labels: web, phase: api.SandboxRunning})
		a := e.create(newAgent(t, agent, nil)).(*api.Agent)
		e.sync()
		claimed := agentstate.Claim(e.sandbox(sandbox), a, e.clk.Now())
		if _, err := e.st.UpdateStatus(e.ctx, claimed); err != nil {
			t.Fatal(err)
		}
		a.Status.Phase, a.Status.Sandbox, a.Status.Attempts = api.AgentCompleted, sandbox, 1
		a.Status.ReleasedSandbox = sandbox
		e.editSandbox(sandbox, func(s *api.SandboxStatus) { edit(a, s) })
		if _, err := e.st.UpdateStatus(e.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	finished("done", "released", func(*api.Agent, *api.SandboxStatus) {})
	finished("unsaid", "not-said", func(a *api.Agent, _ *api.SandboxStatus) { a.Status.ReleasedSandbox = "" })
	finished("elsewhere", "other-name", func(a *api.Agent, _ *api.SandboxStatus) { a.Status.ReleasedSandbox = "released" })
	finished("retried", "old-attempt", func(a *api.Agent, _ *api.SandboxStatus) { a.Status.Attempts = 2 })
	finished("held", "taken-over", func(_ *api.Agent, s *api.SandboxStatus) {
		s.Control = &api.SandboxControl{ID: "c1", Holder: "alice", Since: t0}
	})
	e.clk.Advance(time.Second)
	e.create(newAgent(t, "next", nil))
	e.clk.Advance(time.Second)
	e.create(newAgent(t, "after", nil))
	e.clk.Advance(time.Second)
	e.create(newAgent(t, "last", nil))
	e.reconcile()
	for agent, want := range map[string]string{"next": "released", "after": "idle-long", "last": ""} {
		if got := e.binding(agent); got != want {
			t.Errorf("%s bound to %q, want %q", agent, got, want)
		}
	}
	sb := e.sandbox("released")
	if c := sb.Status.Claim; c == nil || sb.Status.CurrentAgent != "next" || c.UID != e.agent("next").Metadata.UID || c.Attempt != 1 {
		t.Errorf("released's claim is %q %+v, want the claim of agent next's attempt 1", sb.Status.CurrentAgent, c)
	}
	for sandbox, agent := range map[string]string{"not-said": "unsaid", "other-name": "elsewhere", "old-attempt": "retried", "taken-over": "held"} {
		if got := e.sandbox(sandbox).Status.CurrentAgent; got != agent {
			t.Errorf("%s claimed by %q, want %q's claim left", sandbox, got, agent)
		}
	}
}

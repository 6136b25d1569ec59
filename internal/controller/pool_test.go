package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// The helpers below are shared by the tests of this package: a real
// SQLite store in t.TempDir() whose clock is the test's, and a Manager
// that is never started, whose caches the test fills from the store
// before each direct Reconcile call.

// t0 is where the test clock starts.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// env is a store, a clock and an unstarted Manager.
type env struct {
	t   *testing.T
	ctx context.Context
	st  *store.Store
	clk *clock.Fake
	m   *reconcile.Manager
	log *slog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Now: clk.Now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &env{t: t, ctx: context.Background(), st: st, clk: clk, m: reconcile.NewManager(st, log, 0), log: log}
}

// sync fills every cache of the Manager from the store, as its watches
// would.
func (e *env) sync() {
	e.t.Helper()
	if err := e.m.SyncCaches(e.ctx); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) create(o api.Object) api.Object {
	e.t.Helper()
	out, err := e.st.Create(e.ctx, o)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) get(kind, name string) api.Object {
	e.t.Helper()
	o, err := e.st.Get(e.ctx, kind, name)
	if err != nil {
		e.t.Fatalf("get %s %s: %v", kind, name, err)
	}
	return o
}

func (e *env) exists(kind, name string) bool {
	e.t.Helper()
	_, err := e.st.Get(e.ctx, kind, name)
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}

func (e *env) pool(name string) *api.SandboxPool {
	e.t.Helper()
	return e.get(api.KindSandboxPool, name).(*api.SandboxPool)
}

func (e *env) agent(name string) *api.Agent {
	e.t.Helper()
	return e.get(api.KindAgent, name).(*api.Agent)
}

func (e *env) sandbox(name string) *api.Sandbox {
	e.t.Helper()
	return e.get(api.KindSandbox, name).(*api.Sandbox)
}

// editSandbox changes a sandbox's status, as its node would.
func (e *env) editSandbox(name string, edit func(*api.SandboxStatus)) {
	e.t.Helper()
	if _, err := reconcile.UpdateStatus(e.ctx, e.st, api.KindSandbox, name, func(sb *api.Sandbox) bool {
		edit(&sb.Status)
		return true
	}); err != nil {
		e.t.Fatal(err)
	}
}

// members returns the pool's sandboxes in the store, by name; deleting
// ones too.
func (e *env) members(pool string) []*api.Sandbox {
	e.t.Helper()
	items, _, err := e.st.List(e.ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*api.Sandbox
	for _, it := range items {
		if api.OwnerOf(it, api.KindSandboxPool) == pool {
			out = append(out, it.(*api.Sandbox))
		}
	}
	return out
}

// live returns the names of the pool's sandboxes that are not being
// deleted.
func (e *env) live(pool string) []string {
	e.t.Helper()
	var names []string
	for _, sb := range e.members(pool) {
		if sb.Metadata.DeletionTimestamp == nil {
			names = append(names, sb.Metadata.Name)
		}
	}
	return names
}

// events returns the events of an object with reason (any reason when
// empty).
func (e *env) events(kind, name, reason string) []*api.Event {
	e.t.Helper()
	evs, err := e.st.ListEvents(e.ctx, store.EventFilter{Kind: kind, Name: name})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*api.Event
	for _, ev := range evs {
		if reason == "" || ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// newPool returns a defaulted, valid pool named name.
func newPool(t *testing.T, name string, edit func(*api.SandboxPool)) *api.SandboxPool {
	t.Helper()
	p := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}}
	p.Metadata.Name = name
	p.Spec.Template.Spec.TemplateRef = "desk"
	if edit != nil {
		edit(p)
	}
	api.Default(p)
	if err := api.Validate(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// newAgent returns a defaulted, valid workflow agent with the run
// finalizer the server puts on agents.
func newAgent(t *testing.T, name string, edit func(*api.Agent)) *api.Agent {
	t.Helper()
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name = name
	a.Metadata.Finalizers = []string{api.FinalizerRun}
	a.Spec.Task.Steps = []api.Action{{Action: "wait", Duration: 1}}
	if edit != nil {
		edit(a)
	}
	if a.Spec.SandboxSelector == nil && a.Spec.SandboxName == "" {
		a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "web"}
	}
	api.Default(a)
	if err := api.Validate(a); err != nil {
		t.Fatal(err)
	}
	return a
}

// poolEnv is an env with the pool controller.
type poolEnv struct {
	*env
	p *Pools
}

func newPoolEnv(t *testing.T) *poolEnv {
	e := newEnv(t)
	return &poolEnv{env: e, p: NewPools(e.m, e.st, e.log, e.clk.Now)}
}

// reconcile syncs the caches and reconciles pool name once.
func (e *poolEnv) reconcile(name string) reconcile.Result {
	e.t.Helper()
	e.sync()
	res, err := e.p.Reconcile(e.ctx, name)
	if err != nil {
		e.t.Fatalf("reconcile pool %s: %v", name, err)
	}
	return res
}

// ready marks sandboxes Paused (idle) as their node would once cloned.
func (e *poolEnv) ready(names ...string) {
	e.t.Helper()
	for _, n := range names {
		e.editSandbox(n, func(s *api.SandboxStatus) {
			at := e.clk.Now()
			s.Phase, s.Reason, s.ReadyAt = api.SandboxPaused, "Started", &at
		})
	}
}

// busy claims sandboxes for an agent and runs them.
func (e *poolEnv) busy(names ...string) {
	e.t.Helper()
	for _, n := range names {
		e.editSandbox(n, func(s *api.SandboxStatus) {
			at := e.clk.Now()
			s.Phase, s.CurrentAgent, s.ClaimedAt = api.SandboxRunning, "agent-of-"+n, &at
		})
	}
}

func TestPoolCreatesReplicas(t *testing.T) {
	e := newPoolEnv(t)
	e.create(newPool(t, "web", func(p *api.SandboxPool) {
		p.Spec.Replicas = 3
		p.Spec.Template.Metadata.Labels = map[string]string{"app": "browser"}
		p.Spec.Template.Spec.Lifecycle.IdleTimeoutMinutes = 7
	}))
	e.reconcile("web")

	members := e.members("web")
	if got, want := len(members), 3; got != want {
		t.Fatalf("%d sandboxes, want %d", got, want)
	}
	for _, sb := range members {
		if got, want := sb.Metadata.Labels, map[string]string{"app": "browser", "pool": "web"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: labels %v, want %v", sb.Metadata.Name, got, want)
		}
		if got, want := sb.Status.Phase, api.SandboxPending; got != want {
			t.Errorf("%s: phase %q, want %q", sb.Metadata.Name, got, want)
		}
		if got, want := sb.Spec.TemplateRef, "desk"; got != want {
			t.Errorf("%s: templateRef %q, want %q", sb.Metadata.Name, got, want)
		}
		if got, want := sb.Spec.Lifecycle.IdleTimeoutMinutes, 7; got != want {
			t.Errorf("%s: idleTimeoutMinutes %d, want %d", sb.Metadata.Name, got, want)
		}
		if !strings.HasPrefix(sb.Metadata.Name, "web-") {
			t.Errorf("member name %q does not start with the pool's", sb.Metadata.Name)
		}
	}
	p := e.pool("web")
	if !slices.Contains(p.Metadata.Finalizers, api.FinalizerSandboxes) {
		t.Errorf("finalizers %v, want %s", p.Metadata.Finalizers, api.FinalizerSandboxes)
	}
	if got, want := [3]int{p.Status.Replicas, p.Status.Desired, p.Status.Ready}, [3]int{3, 3, 0}; got != want {
		t.Errorf("status replicas/desired/ready %v, want %v", got, want)
	}
	if c := api.FindCondition(p.Status.Conditions, "Ready"); c == nil || c.Status != api.ConditionFalse || c.Reason != "Warming" {
		t.Errorf("Ready condition %+v, want False/Warming", c)
	}
	if got, want := len(e.events(api.KindSandboxPool, "web", "ScaledUp")), 1; got != want {
		t.Errorf("%d ScaledUp events, want %d", got, want)
	}

	// Level-based: a second look changes nothing.
	e.reconcile("web")
	if got, want := len(e.members("web")), 3; got != want {
		t.Fatalf("after a second reconcile: %d sandboxes, want %d", got, want)
	}
	if got, want := len(e.events(api.KindSandboxPool, "web", "ScaledUp")), 1; got != want {
		t.Errorf("after a second reconcile: %d ScaledUp events, want %d", got, want)
	}

	e.ready(e.live("web")...)
	e.reconcile("web")
	p = e.pool("web")
	if got, want := [3]int{p.Status.Ready, p.Status.Warm, p.Status.Busy}, [3]int{3, 3, 0}; got != want {
		t.Errorf("status ready/warm/busy %v, want %v", got, want)
	}
	if c := api.FindCondition(p.Status.Conditions, "Ready"); c == nil || c.Status != api.ConditionTrue {
		t.Errorf("Ready condition %+v, want True", c)
	}
	// The fill's end is an event, once.
	e.reconcile("web")
	if evs := e.events(api.KindSandboxPool, "web", "Filled"); len(evs) != 1 || evs[0].Message != "all 3 sandboxes ready (3 idle)" {
		t.Errorf("Filled events %+v, want one: all 3 sandboxes ready (3 idle)", evs)
	}
}

func TestPoolRefillRate(t *testing.T) {
	e := newPoolEnv(t)
	e.create(newPool(t, "web", func(p *api.SandboxPool) {
		p.Spec.Replicas = 5
		p.Spec.RefillRate = 2
	}))
	steps := []struct {
		advance time.Duration
		want    int
	}{
		{0, 2},                      // at most 2 in the first second
		{0, 2},                      // and no more within it
		{500 * time.Millisecond, 2}, // still within the second
		{500 * time.Millisecond, 4}, // a second later: 2 more
		{time.Second, 5},            // the last one
		{time.Second, 5},            // and no more than replicas
	}
	for i, s := range steps {
		e.clk.Advance(s.advance)
		res := e.reconcile("web")
		if got := len(e.live("web")); got != s.want {
			t.Fatalf("step %d: %d sandboxes, want %d", i, got, s.want)
		}
		if got := len(e.live("web")); got < 5 && (res.RequeueAfter <= 0 || res.RequeueAfter > time.Second) {
			t.Errorf("step %d: requeue after %s while refilling, want within a second", i, res.RequeueAfter)
		}
		// They start at once: only the rate holds the pool back.
		e.ready(e.live("web")...)
	}
}

// TestPoolGrowsAsSandboxesStart: a pool has at most maxUnstarted members
// waiting to start; each that starts makes room for one more.
func TestPoolGrowsAsSandboxesStart(t *testing.T) {
	e := newPoolEnv(t)
	e.create(newPool(t, "web", func(p *api.SandboxPool) { p.Spec.Replicas = 30 }))
	e.reconcile("web")
	if got, want := len(e.live("web")), maxUnstarted(0); got != want {
		t.Fatalf("%d sandboxes at first, want %d", got, want)
	}
	e.reconcile("web")
	if got, want := len(e.live("web")), maxUnstarted(0); got != want {
		t.Fatalf("a second look with none started: %d sandboxes, want %d", got, want)
	}
	// One starts: one more.
	e.ready(e.live("web")[0])
	e.reconcile("web")
	if got, want := len(e.live("web")), maxUnstarted(0)+1; got != want {
		t.Fatalf("one started: %d sandboxes, want %d", got, want)
	}
	// All start, round after round: the pool reaches its size, never
	// with more than the margin waiting.
	for round := 0; len(e.live("web")) < 30; round++ {
		if round > 30 {
			t.Fatalf("the pool stopped at %d sandboxes", len(e.live("web")))
		}
		var started []string
		waiting := 0
		for _, sb := range e.members("web") {
			if sb.Status.Phase == api.SandboxPending {
				started = append(started, sb.Metadata.Name)
				waiting++
			}
		}
		if limit := maxUnstarted(len(e.live("web")) - waiting); waiting > limit {
			t.Fatalf("%d sandboxes waiting to start, want at most %d", waiting, limit)
		}
		e.ready(started...)
		e.reconcile("web")
	}
	if got, want := len(e.live("web")), 30; got != want {
		t.Errorf("%d sandboxes, want %d", got, want)
	}
}

func TestPoolScaleDownAfterDelay(t *testing.T) {
	e := newPoolEnv(t)
	e.create(newPool(t, "web", func(p *api.SandboxPool) {
		p.Spec.Replicas = 4
		p.Spec.Scaling.ScaleDownDelay = 60
	}))
	e.reconcile("web")
	names := e.live("web")
	e.ready(names...)
	e.busy(names[0], names[1])

	scale := func(n int) {
		t.Helper()
		p := e.pool("web")
		p.Spec.Replicas = n
		if _, _, err := e.st.Update(e.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	scale(1)
	// Desired is max(replicas 1, busy 2 + minReady 0) = 2: two idle ones
	// are in excess, but not for long enough yet.
	res := e.reconcile("web")
	if got, want := len(e.live("web")), 4; got != want {
		t.Fatalf("right after scaling down: %d sandboxes, want %d", got, want)
	}
	if got, want := res.RequeueAfter, 60*time.Second; got != want {
		t.Errorf("requeue after %s, want %s (scaleDownDelay)", got, want)
	}
	p := e.pool("web")
	if p.Status.ExcessSince == nil || !p.Status.ExcessSince.Equal(t0) {
		t.Errorf("excessSince %v, want %v", p.Status.ExcessSince, t0)
	}
	if got, want := p.Status.Desired, 2; got != want {
		t.Errorf("desired %d, want %d", got, want)
	}

	e.clk.Advance(59 * time.Second)
	res = e.reconcile("web")
	if got, want := len(e.live("web")), 4; got != want {
		t.Fatalf("before scaleDownDelay: %d sandboxes, want %d", got, want)
	}
	if got, want := res.RequeueAfter, time.Second; got != want {
		t.Errorf("requeue after %s, want %s", got, want)
	}

	e.clk.Advance(time.Second)
	e.reconcile("web")
	left := e.live("web")
	if got, want := fmt.Sprint(left), fmt.Sprint([]string{names[0], names[1]}); got != want {
		t.Fatalf("after scaleDownDelay: sandboxes %s, want the busy ones %s", got, want)
	}
	if got, want := len(e.events(api.KindSandboxPool, "web", "ScaledDown")), 1; got != want {
		t.Errorf("%d ScaledDown events, want %d", got, want)
	}
	if p := e.pool("web"); p.Status.ExcessSince != nil {
		t.Errorf("excessSince %v after the scale-down, want none", p.Status.ExcessSince)
	}

	// Busy sandboxes are never removed, however long the excess lasts;
	// they go once idle.
	scale(0)
	for i := 0; i < 3; i++ {
		e.clk.Advance(time.Hour)
		res = e.reconcile("web")
		if got, want := len(e.live("web")), 2; got != want {
			t.Fatalf("busy sandboxes after %dh: %d left, want %d", i+1, got, want)
		}
	}
	e.editSandbox(names[0], func(s *api.SandboxStatus) { s.CurrentAgent, s.ClaimedAt = "", nil })
	e.reconcile("web")
	if got, want := len(e.live("web")), 2; got != want {
		t.Fatalf("right after one went idle: %d sandboxes, want %d (scaleDownDelay again)", got, want)
	}
	e.clk.Advance(time.Minute)
	e.reconcile("web")
	if got, want := fmt.Sprint(e.live("web")), fmt.Sprint([]string{names[1]}); got != want {
		t.Fatalf("once one is idle: sandboxes %s, want %s", got, want)
	}
}

// TestPoolScaleDownRemovesWarmBeforeRunning checks which idle sandboxes a
// scale-down takes: those in the warm tier before running ones (a running
// idle sandbox is the fastest to hand out), never a busy one.
func TestPoolScaleDownRemovesWarmBeforeRunning(t *testing.T) {
	e := newPoolEnv(t)
	e.create(newPool(t, "web", func(p *api.SandboxPool) {
		p.Spec.Replicas = 3
		p.Spec.Scaling.ScaleDownDelay = 1
	}))
	e.reconcile("web")
	names := e.live("web")
	e.ready(names...)
	e.busy(names[0])
	e.editSandbox(names[1], func(s *api.SandboxStatus) { s.Phase = api.SandboxRunning })
	p := e.pool("web")
	p.Spec.Replicas = 2
	if _, _, err := e.st.Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	e.reconcile("web")
	e.clk.Advance(time.Second)
	e.reconcile("web")
	if got, want := fmt.Sprint(e.live("web")), fmt.Sprint([]string{names[0], names[1]}); got != want {
		t.Fatalf("sandboxes %s, want %s (the paused idle one removed)", got, want)
	}
}

func TestPoolMaxAge(t *testing.T) {
	e := newPoolEnv(t)
	e.create(newPool(t, "web", func(p *api.SandboxPool) {
		p.Spec.Replicas = 2
		p.Spec.MaxAge = "1h"
	}))
	e.reconcile("web")
	names := e.live("web")
	e.ready(names...)
	e.busy(names[0])

	e.clk.Advance(30 * time.Minute)
	res := e.reconcile("web")
	if got, want := len(e.live("web")), 2; got != want {
		t.Fatalf("before maxAge: %d sandboxes, want %d", got, want)
	}
	if got, want := res.RequeueAfter, 30*time.Minute; got != want {
		t.Errorf("requeue after %s, want %s (when the idle one reaches maxAge)", got, want)
	}

	e.clk.Advance(30 * time.Minute)
	e.reconcile("web")
	left := e.live("web")
	if got, want := len(left), 2; got != want {
		t.Fatalf("after maxAge: %d sandboxes, want %d (one recycled, one new)", got, want)
	}
	if !slices.Contains(left, names[0]) {
		t.Errorf("the busy sandbox %s was recycled: %v", names[0], left)
	}
	if slices.Contains(left, names[1]) {
		t.Errorf("the idle sandbox %s older than maxAge is still there: %v", names[1], left)
	}
	evs := e.events(api.KindSandboxPool, "web", "Recycled")
	if len(evs) != 1 || !strings.Contains(evs[0].Message, names[1]) {
		t.Errorf("Recycled events %v, want one naming %s", evs, names[1])
	}
}

func TestPoolReplacesBrokenSandboxes(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*api.SandboxStatus)
		replace bool
		events  []string // reasons of the pool's events besides ScaledUp
	}{
		{"error", func(s *api.SandboxStatus) { s.Phase, s.Reason = api.SandboxError, "VMGone" }, true, []string{"Replaced"}},
		{"terminated", func(s *api.SandboxStatus) { s.Phase = api.SandboxTerminated }, true, []string{"Replaced"}},
		{"unhealthy idle", func(s *api.SandboxStatus) {
			s.Phase, s.Reason, s.Message = api.SandboxRunning, "Unhealthy", "no process \"xterm\" runs in the guest"
		}, true, []string{"Unhealthy", "Replaced"}},
		{"unhealthy busy", func(s *api.SandboxStatus) {
			s.Phase, s.Reason, s.CurrentAgent = api.SandboxRunning, "Unhealthy", "someone"
		}, false, nil},
		{"healthy", func(s *api.SandboxStatus) { s.Phase = api.SandboxRunning }, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newPoolEnv(t)
			e.create(newPool(t, "web", func(p *api.SandboxPool) { p.Spec.Replicas = 2 }))
			e.reconcile("web")
			names := e.live("web")
			e.ready(names...)
			e.editSandbox(names[0], tt.edit)
			e.reconcile("web")
			left := e.live("web")
			if got, want := len(left), 2; got != want {
				t.Fatalf("%d sandboxes, want %d", got, want)
			}
			if got := !slices.Contains(left, names[0]); got != tt.replace {
				t.Errorf("replaced %v, want %v (sandboxes %v)", got, tt.replace, left)
			}
			var reasons []string
			for _, ev := range e.events(api.KindSandboxPool, "web", "") {
				if ev.Reason != "ScaledUp" && ev.Reason != "Created" && ev.Reason != "Filled" {
					reasons = append(reasons, ev.Reason)
				}
			}
			if got, want := fmt.Sprint(reasons), fmt.Sprint(tt.events); got != want {
				t.Errorf("events %s, want %s", got, want)
			}
		})
	}
}

// TestPoolKeepsABrokenSandboxItsAgentHolds: a failed sandbox whose claim
// names an agent still bound to it stays until the attempt ends and the
// claim goes (the agent would otherwise fail as SandboxLost before its
// node could mark the attempt Interrupted); any other failed one is
// replaced.
func TestPoolKeepsABrokenSandboxItsAgentHolds(t *testing.T) {
	tests := []struct {
		name  string
		phase string
		// agent edits the agent the claim names; nil: there is none.
		agent   func(a *api.Agent, sandbox string)
		replace bool
	}{
		{"running on it", api.SandboxError, func(a *api.Agent, sb string) { a.Status.Phase, a.Status.Sandbox = api.AgentRunning, sb }, false},
		{"scheduled on it", api.SandboxError, func(a *api.Agent, sb string) { a.Status.Phase, a.Status.Sandbox = api.AgentScheduled, sb }, false},
		{"running on it, terminated", api.SandboxTerminated, func(a *api.Agent, sb string) { a.Status.Phase, a.Status.Sandbox = api.AgentRunning, sb }, false},
		{"interrupted", api.SandboxError, func(a *api.Agent, sb string) { a.Status.Phase, a.Status.Reason = api.AgentPending, "Interrupted" }, true},
		{"running elsewhere", api.SandboxError, func(a *api.Agent, sb string) { a.Status.Phase, a.Status.Sandbox = api.AgentRunning, "other" }, true},
		{"finished", api.SandboxError, func(a *api.Agent, sb string) { a.Status.Phase, a.Status.Sandbox = api.AgentFailed, sb }, true},
		{"no such agent", api.SandboxError, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newPoolEnv(t)
			e.create(newPool(t, "web", func(p *api.SandboxPool) { p.Spec.Replicas = 2 }))
			e.reconcile("web")
			names := e.live("web")
			e.ready(names...)
			if tt.agent != nil {
				a := newAgent(t, "job", nil)
				tt.agent(a, names[0])
				e.create(a)
			}
			e.editSandbox(names[0], func(s *api.SandboxStatus) {
				at := e.clk.Now()
				s.Phase, s.Reason, s.CurrentAgent, s.ClaimedAt = tt.phase, "VMNotFound", "job", &at
			})
			e.reconcile("web")
			if got := !slices.Contains(e.live("web"), names[0]); got != tt.replace {
				t.Fatalf("replaced %v, want %v", got, tt.replace)
			}
			if tt.replace {
				return
			}
			if got, want := len(e.live("web")), 2; got != want {
				t.Errorf("%d sandboxes, want %d: the held one counts", got, want)
			}
			// Its node releases it once the attempt is put back: then it
			// is replaced.
			e.editSandbox(names[0], func(s *api.SandboxStatus) { s.CurrentAgent, s.ClaimedAt = "", nil })
			e.reconcile("web")
			if slices.Contains(e.live("web"), names[0]) {
				t.Errorf("the released broken sandbox %s is still there", names[0])
			}
			if got, want := len(e.live("web")), 2; got != want {
				t.Errorf("after the release: %d sandboxes, want %d", got, want)
			}
		})
	}
}

// TestPoolReplacesOnceOnAStaleCache reconciles twice before the watch
// brings the deletion of a replaced sandbox: the second look must not
// replace (and announce) it again.
func TestPoolReplacesOnceOnAStaleCache(t *testing.T) {
	e := newPoolEnv(t)
	e.create(newPool(t, "web", func(p *api.SandboxPool) { p.Spec.Replicas = 2 }))
	e.reconcile("web")
	names := e.live("web")
	e.ready(names...)
	e.editSandbox(names[0], func(s *api.SandboxStatus) { s.Phase = api.SandboxError })
	e.reconcile("web")
	// The pool is woken again (its new sandbox, say) before the cache
	// has seen the deletion.
	if _, err := e.p.Reconcile(e.ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if got, want := len(e.events(api.KindSandboxPool, "web", "Replaced")), 1; got != want {
		t.Errorf("%d Replaced events, want %d", got, want)
	}
	if got, want := len(e.live("web")), 2; got != want {
		t.Errorf("%d sandboxes, want %d", got, want)
	}
}

func TestPoolDesired(t *testing.T) {
	tests := []struct {
		name string
		spec func(*api.SandboxPool)
		// busy is how many of the first sandboxes are busy.
		busy int
		// pending agents selecting the pool, and others.
		pending, elsewhere int
		want               int
	}{
		{"replicas", func(p *api.SandboxPool) { p.Spec.Replicas = 2 }, 0, 0, 0, 2},
		{"minReady, all busy", func(p *api.SandboxPool) { p.Spec.Replicas, p.Spec.MinReady = 2, 1 }, 2, 0, 0, 3},
		{"minReady, one idle", func(p *api.SandboxPool) { p.Spec.Replicas, p.Spec.MinReady = 2, 1 }, 1, 0, 0, 2},
		{"minReady 2, all busy", func(p *api.SandboxPool) { p.Spec.Replicas, p.Spec.MinReady = 2, 2 }, 2, 0, 0, 4},
		{"queue below threshold", func(p *api.SandboxPool) { p.Spec.Replicas, p.Spec.Scaling.ScaleUpThreshold = 1, 2 }, 0, 1, 0, 1},
		{"queue at threshold", func(p *api.SandboxPool) { p.Spec.Replicas, p.Spec.Scaling.ScaleUpThreshold = 1, 2 }, 0, 2, 0, 2},
		{"queue twice the threshold", func(p *api.SandboxPool) { p.Spec.Replicas, p.Spec.Scaling.ScaleUpThreshold = 1, 2 }, 0, 5, 0, 3},
		{"agents of another pool", func(p *api.SandboxPool) { p.Spec.Replicas, p.Spec.Scaling.ScaleUpThreshold = 1, 1 }, 0, 0, 4, 1},
		{"no threshold", func(p *api.SandboxPool) { p.Spec.Replicas = 1 }, 0, 6, 0, 1},
		{"maxReplicas", func(p *api.SandboxPool) {
			p.Spec.Replicas, p.Spec.Scaling.ScaleUpThreshold, p.Spec.Scaling.MaxReplicas = 1, 1, 4
		}, 0, 10, 0, 4},
		{"maxReplicas bounds minReady", func(p *api.SandboxPool) {
			p.Spec.Replicas, p.Spec.MinReady, p.Spec.Scaling.MaxReplicas = 2, 2, 3
		}, 2, 0, 0, 3},
		{"maxPerHost below replicas", func(p *api.SandboxPool) { p.Spec.Replicas, p.Spec.MaxPerHost = 5, 3 }, 0, 0, 0, 3},
		{"maxPerHost bounds the queue", func(p *api.SandboxPool) {
			p.Spec.Replicas, p.Spec.Scaling.ScaleUpThreshold, p.Spec.MaxPerHost = 1, 1, 2
		}, 0, 10, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newPoolEnv(t)
			e.create(newPool(t, "web", tt.spec))
			e.create(newPool(t, "db", func(p *api.SandboxPool) { p.Spec.Replicas = 0 }))
			e.reconcile("web")
			names := e.live("web")
			e.ready(names...)
			if tt.busy > len(names) {
				t.Fatalf("%d sandboxes, fewer than the %d busy ones asked", len(names), tt.busy)
			}
			e.busy(names[:tt.busy]...)
			for i := 0; i < tt.pending; i++ {
				e.create(newAgent(t, fmt.Sprintf("web-agent-%d", i), nil))
			}
			for i := 0; i < tt.elsewhere; i++ {
				e.create(newAgent(t, fmt.Sprintf("db-agent-%d", i), func(a *api.Agent) {
					a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "db"}
				}))
			}
			e.reconcile("web")
			if got := e.pool("web").Status.Desired; got != tt.want {
				t.Errorf("desired %d, want %d", got, tt.want)
			}
			if got := len(e.live("web")); got != tt.want {
				t.Errorf("%d sandboxes, want %d", got, tt.want)
			}
		})
	}
}

// TestPoolCountsAReleasedSandboxWarm: a sandbox whose claim still names
// an agent that finished and released it (its node reset it and writes
// the release later, or the next claim does) is warm, not busy: minReady
// adds no sandbox for it. One a finished agent did not release stays busy.
func TestPoolCountsAReleasedSandboxWarm(t *testing.T) {
	tests := []struct {
		name        string
		released    bool
		wantDesired int
		wantBusy    int
		wantWarm    int
	}{
		{"released", true, 2, 0, 2},
		{"not released", false, 3, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newPoolEnv(t)
			e.create(newPool(t, "web", func(p *api.SandboxPool) { p.Spec.Replicas, p.Spec.MinReady = 2, 2 }))
			e.reconcile("web")
			names := e.live("web")
			e.ready(names...)
			a := newAgent(t, "done", nil)
			a.Status.Phase, a.Status.Attempts, a.Status.Sandbox = api.AgentCompleted, 1, names[0]
			if tt.released {
				a.Status.ReleasedSandbox = names[0]
			}
			e.create(a)
			uid := e.agent("done").Metadata.UID
			e.editSandbox(names[0], func(s *api.SandboxStatus) {
				at := e.clk.Now()
				s.Phase, s.CurrentAgent, s.ClaimedAt = api.SandboxRunning, "done", &at
				s.Claim = &api.AgentClaim{UID: uid, Attempt: 1}
			})
			e.reconcile("web")
			st := e.pool("web").Status
			if st.Desired != tt.wantDesired || st.Busy != tt.wantBusy || st.Warm != tt.wantWarm {
				t.Errorf("desired %d, busy %d, warm %d; want %d, %d, %d", st.Desired, st.Busy, st.Warm, tt.wantDesired, tt.wantBusy, tt.wantWarm)
			}
		})
	}
}

// TestPoolQueueCountsOnlyPendingAgents checks that agents that run, are
// finished or are being deleted do not scale the pool up.
func TestPoolQueueCountsOnlyPendingAgents(t *testing.T) {
	e := newPoolEnv(t)
	e.create(newPool(t, "web", func(p *api.SandboxPool) { p.Spec.Replicas, p.Spec.Scaling.ScaleUpThreshold = 1, 1 }))
	for i, phase := range []string{api.AgentRunning, api.AgentScheduled, api.AgentCompleted, api.AgentFailed} {
		a := newAgent(t, fmt.Sprintf("a-%d", i), nil)
		a.Status.Phase = phase
		e.create(a)
	}
	e.create(newAgent(t, "deleting", nil))
	if _, _, err := e.st.Delete(e.ctx, api.KindAgent, "deleting", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.reconcile("web")
	if got, want := e.pool("web").Status.Desired, 1; got != want {
		t.Errorf("desired %d, want %d", got, want)
	}
}

func TestPoolUnsatisfiable(t *testing.T) {
	for _, reason := range []string{"InsufficientMemory", "TemplateNotFound", "NoTemplate", "NoGPU"} {
		t.Run(reason, func(t *testing.T) {
			e := newPoolEnv(t)
			e.create(newPool(t, "web", func(p *api.SandboxPool) { p.Spec.Replicas = 3 }))
			e.reconcile("web")
			names := e.live("web")
			e.editSandbox(names[0], func(s *api.SandboxStatus) {
				s.Phase, s.Reason, s.Message = api.SandboxPending, reason, "cannot start it here"
			})
			// One member goes away: a satisfiable pool would replace it.
			if _, _, err := e.st.Delete(e.ctx, api.KindSandbox, names[2], store.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				res := e.reconcile("web")
				if got, want := len(e.live("web")), 2; got != want {
					t.Fatalf("round %d: %d sandboxes, want %d: a pool whose sandboxes cannot start adds none", i, got, want)
				}
				if res.RequeueAfter != 0 {
					t.Errorf("round %d: requeue after %s, want none: an unsatisfiable pool waits for a change", i, res.RequeueAfter)
				}
				e.clk.Advance(time.Minute)
			}
			c := api.FindCondition(e.pool("web").Status.Conditions, "Satisfiable")
			if c == nil || c.Status != api.ConditionFalse || c.Reason != reason || !strings.Contains(c.Message, "cannot start it here") {
				t.Errorf("Satisfiable condition %+v, want False/%s with the sandbox's message", c, reason)
			}
			evs := e.events(api.KindSandboxPool, "web", reason)
			if len(evs) != 1 || evs[0].Type != api.EventWarning {
				t.Errorf("%s events %v, want one Warning", reason, evs)
			}

			// Once the cause is gone the pool fills again.
			e.ready(names[0])
			e.reconcile("web")
			if got, want := len(e.live("web")), 3; got != want {
				t.Fatalf("after recovery: %d sandboxes, want %d", got, want)
			}
			c = api.FindCondition(e.pool("web").Status.Conditions, "Satisfiable")
			if c == nil || c.Status != api.ConditionTrue {
				t.Errorf("after recovery: Satisfiable condition %+v, want True", c)
			}
		})
	}
}

// fakeHost plays the node of a FAKE host with room for fit sandboxes: it
// starts the pool's waiting sandboxes, oldest first, while there is room,
// and marks the others Pending for lack of memory, as a node does.
func (e *poolEnv) fakeHost(pool string, fit int) {
	e.t.Helper()
	members := e.members(pool)
	slices.SortStableFunc(members, func(a, b *api.Sandbox) int {
		return a.Metadata.CreationTimestamp.Compare(b.Metadata.CreationTimestamp)
	})
	started := 0
	for _, sb := range members {
		if sb.Metadata.DeletionTimestamp == nil && !unstarted(sb) {
			started++
		}
	}
	for _, sb := range members {
		if sb.Metadata.DeletionTimestamp != nil || !unstarted(sb) || sb.Status.Reason == "InsufficientMemory" {
			continue
		}
		if started < fit {
			e.ready(sb.Metadata.Name)
			started++
			continue
		}
		e.editSandbox(sb.Metadata.Name, func(s *api.SandboxStatus) {
			s.Phase, s.Reason = api.SandboxPending, "InsufficientMemory"
			s.Message = fmt.Sprintf("not enough host memory: %d MB asked, %d MB committed of %d MB allowed", 512, fit*512, fit*512+100)
		})
	}
}

// TestPoolFarBeyondItsHost asks 10,000 sandboxes of a host with room for
// 17: the pool stops at what runs plus its margin, says why with numbers,
// and is satisfiable again once scaled to what fits.
func TestPoolFarBeyondItsHost(t *testing.T) {
	const fit, replicas = 17, 10000
	e := newPoolEnv(t)
	e.create(newPool(t, "web", func(p *api.SandboxPool) { p.Spec.Replicas = replicas }))
	limit := fit + maxUnstarted(fit)
	for round := 0; round < 20; round++ {
		e.reconcile("web")
		if got := len(e.live("web")); got > limit {
			t.Fatalf("round %d: %d sandboxes, want at most %d (%d fit, and the margin)", round, got, limit, fit)
		}
		e.fakeHost("web", fit)
		e.clk.Advance(time.Second)
	}
	if got := len(e.live("web")); got <= fit {
		t.Errorf("%d sandboxes, want more than the %d that fit: the pool tries", got, fit)
	}
	p := e.pool("web")
	c := api.FindCondition(p.Status.Conditions, "Satisfiable")
	if c == nil || c.Status != api.ConditionFalse || c.Reason != "InsufficientMemory" {
		t.Fatalf("Satisfiable condition %+v, want False/InsufficientMemory", c)
	}
	for _, want := range []string{fmt.Sprintf("%d of %d sandboxes started", fit, replicas), "not enough host memory"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Satisfiable message %q, want it to say %q", c.Message, want)
		}
	}
	if got, want := [2]int{p.Status.Ready, p.Status.Desired}, [2]int{fit, replicas}; got != want {
		t.Errorf("status ready/desired %v, want %v", got, want)
	}
	if got, want := len(e.events(api.KindSandboxPool, "web", "InsufficientMemory")), 1; got != want {
		t.Errorf("%d InsufficientMemory events, want %d", got, want)
	}

	// Scaled to what fits, the sandboxes that could not start go at
	// once (no scaleDownDelay: they hold nothing), and the pool is
	// satisfiable again.
	p.Spec.Replicas = fit
	if _, _, err := e.st.Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	e.reconcile("web")
	e.fakeHost("web", fit)
	e.reconcile("web")
	if got := len(e.live("web")); got != fit {
		t.Errorf("scaled to %d: %d sandboxes", fit, got)
	}
	c = api.FindCondition(e.pool("web").Status.Conditions, "Satisfiable")
	if c == nil || c.Status != api.ConditionTrue {
		t.Errorf("scaled to what fits: Satisfiable condition %+v, want True", c)
	}
}

// TestPoolWaitingIsNotUnsatisfiable checks that a member that only waits
// (for a template to finish building) does not stop the pool.
func TestPoolWaitingIsNotUnsatisfiable(t *testing.T) {
	e := newPoolEnv(t)
	e.create(newPool(t, "web", func(p *api.SandboxPool) { p.Spec.Replicas = 2 }))
	e.reconcile("web")
	names := e.live("web")
	e.editSandbox(names[0], func(s *api.SandboxStatus) { s.Phase, s.Reason = api.SandboxPending, "TemplateNotReady" })
	if _, _, err := e.st.Delete(e.ctx, api.KindSandbox, names[1], store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.reconcile("web")
	if got, want := len(e.live("web")), 2; got != want {
		t.Errorf("%d sandboxes, want %d", got, want)
	}
	if c := api.FindCondition(e.pool("web").Status.Conditions, "Satisfiable"); c == nil || c.Status != api.ConditionTrue {
		t.Errorf("Satisfiable condition %+v, want True", c)
	}
}

func TestPoolDeletion(t *testing.T) {
	e := newPoolEnv(t)
	e.create(newPool(t, "web", func(p *api.SandboxPool) { p.Spec.Replicas = 2 }))
	e.reconcile("web")
	names := e.live("web")
	// The node holds each sandbox until its VM is gone.
	for _, n := range names {
		if _, err := reconcile.EnsureFinalizer(e.ctx, e.st, e.sandbox(n), api.FinalizerVM); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := e.st.Delete(e.ctx, api.KindSandboxPool, "web", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	res := e.reconcile("web")
	for _, n := range names {
		if sb := e.sandbox(n); sb.Metadata.DeletionTimestamp == nil {
			t.Errorf("sandbox %s is not being deleted", n)
		}
	}
	if !e.exists(api.KindSandboxPool, "web") {
		t.Fatal("the pool went before its sandboxes")
	}
	if res.RequeueAfter <= 0 {
		t.Errorf("requeue after %s, want a look again while sandboxes are left", res.RequeueAfter)
	}
	// A deleted pool creates no sandboxes.
	if got, want := len(e.members("web")), 2; got != want {
		t.Errorf("%d sandboxes, want %d", got, want)
	}

	for _, n := range names {
		if err := reconcile.RemoveFinalizer(e.ctx, e.st, e.sandbox(n), api.FinalizerVM); err != nil {
			t.Fatal(err)
		}
	}
	e.reconcile("web")
	if e.exists(api.KindSandboxPool, "web") {
		t.Fatal("the pool is still there once its sandboxes are gone")
	}
	if res := e.reconcile("web"); res != (reconcile.Result{}) {
		t.Errorf("reconcile of a gone pool: %+v, want nothing", res)
	}
}

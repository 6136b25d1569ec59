package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// poolAgent creates agent name on pool web with the given steps.
func (c *cluster) poolAgent(t *testing.T, name, steps string) {
	t.Helper()
	c.create(t, yamlObj(t, fmt.Sprintf(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: %s}
spec:
  sandboxSelector: {pool: web}
  task:
    steps: [%s]
`, name, steps)))
}

// followClaims records, in order, each agent the claim of sandbox name
// names from now on ("" for none), once per change.
func (c *cluster) followClaims(t *testing.T, name string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	_, w, err := c.st.ListAndWatch(ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var claims []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.Events() {
			sb := ev.Object.(*api.Sandbox)
			if sb.Metadata.Name != name {
				continue
			}
			mu.Lock()
			if len(claims) == 0 || claims[len(claims)-1] != sb.Status.CurrentAgent {
				claims = append(claims, sb.Status.CurrentAgent)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(claims)
	}
}

// TestReleaseFoldedIntoTheNextClaim: a pool's sandbox is reset before its
// agent's outcome, which says so (status.releasedSandbox); the next
// agent's claim takes it with no release written between the two claims,
// and that agent runs on the clean desktop.
func TestReleaseFoldedIntoTheNextClaim(t *testing.T) {
	c := newClusterWith(t, clusterOptions{releaseWriteDelay: time.Hour})
	c.create(t, yamlObj(t, poolYAML("web", 1, "")))
	sb := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	claims := c.followClaims(t, sb)

	c.poolAgent(t, "first", `{action: exec, command: [touch, /tmp/first]}`)
	first := c.waitAgent(t, "first", api.AgentCompleted)
	if first.Status.Sandbox != sb || first.Status.ReleasedSandbox != sb {
		t.Fatalf("first ran on %q and released %q, want %s both", first.Status.Sandbox, first.Status.ReleasedSandbox, sb)
	}
	// Reset before the outcome was written: what the first agent left is
	// gone by then.
	if got := c.be.Count(fake.OpReset); got != 1 {
		t.Errorf("%d resets by the time the outcome shows, want 1", got)
	}
	if _, ok := c.be.ReadFile(sb, "/tmp/first"); ok {
		t.Error("the first agent's file is still there when its outcome shows")
	}
	if got := c.sandbox(t, sb).Status.CurrentAgent; got != "first" {
		t.Errorf("the sandbox's claim names %q, want first's left unwritten", got)
	}
	// The status still says Running; the clean desktop takes no call
	// until its next claim resumes it.
	if err := c.nd.TypeText(context.Background(), sb, "z"); !errors.Is(err, api.ErrConflict) {
		t.Errorf("typing into the released desktop: %v, want a conflict", err)
	}
	if _, err := c.nd.Exec(context.Background(), sb, backend.ExecRequest{Path: "touch", Args: []string{"/tmp/planted"}}); !errors.Is(err, api.ErrConflict) {
		t.Errorf("exec in the released desktop: %v, want a conflict", err)
	}

	c.poolAgent(t, "second", `{action: type, text: "y"}`)
	second := c.waitAgent(t, "second", api.AgentCompleted)
	if second.Status.Sandbox != sb {
		t.Fatalf("second ran on %q, want %s", second.Status.Sandbox, sb)
	}
	if got, want := claims(), []string{"first", "second"}; !slices.Equal(got, want) {
		t.Errorf("the sandbox's claims went %q, want %q: the second claim is the first's release", got, want)
	}
	if got := c.be.Count(fake.OpReset); got != 2 {
		t.Errorf("%d resets, want 2 (one per agent)", got)
	}
}

// TestOperationWritesTheDeferredRelease: a person's pause, resume, save
// or reset of a sandbox whose release is deferred writes the release
// first, so the operation acts on a sandbox whose status says what its
// desktop is, and no deferred write undoes the operation's afterwards.
func TestOperationWritesTheDeferredRelease(t *testing.T) {
	tests := []struct {
		op   string
		want string
	}{
		{"pause", api.SandboxPaused},
		{"resume", api.SandboxRunning},
		{"save", api.SandboxSaved},
		{"reset", api.SandboxPaused},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			c := newClusterWith(t, clusterOptions{releaseWriteDelay: time.Hour})
			c.create(t, yamlObj(t, poolYAML("web", 1, "")))
			sb := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
			c.poolAgent(t, "first", `{action: type, text: "x"}`)
			c.waitAgent(t, "first", api.AgentCompleted)
			if got := c.nd.deferred.of(sb); got != "first" {
				t.Fatalf("deferred release of %q, want first's", got)
			}
			ctx := context.Background()
			op := map[string]func(context.Context, string) error{
				"pause": c.nd.Pause, "resume": c.nd.Resume, "save": c.nd.Save, "reset": c.nd.Reset,
			}[tt.op]
			if err := op(ctx, sb); err != nil {
				t.Fatalf("%s: %v", tt.op, err)
			}
			if got := c.nd.deferred.of(sb); got != "" {
				t.Errorf("after %s the release by %q is still deferred", tt.op, got)
			}
			got := c.sandbox(t, sb)
			if got.Status.CurrentAgent != "" || got.Status.ReleasedAt == nil || got.Status.Phase != tt.want {
				t.Errorf("after %s: claim %q, releasedAt %v, phase %s; want no claim, released, %s", tt.op, got.Status.CurrentAgent, got.Status.ReleasedAt, got.Status.Phase, tt.want)
			}
			if tt.op == "resume" {
				// The data plane takes calls at once: the desktop runs.
				if err := c.nd.TypeText(ctx, sb, "z"); err != nil {
					t.Errorf("typing after the resume: %v", err)
				}
			}
		})
	}
}

// TestReleaseWrittenWhenNoClaimComes: with no claim within the delay, the
// node writes the release itself.
func TestReleaseWrittenWhenNoClaimComes(t *testing.T) {
	c := newClusterWith(t, clusterOptions{releaseWriteDelay: 50 * time.Millisecond})
	c.create(t, yamlObj(t, poolYAML("web", 1, "")))
	sb := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	c.poolAgent(t, "only", `{action: type, text: "x"}`)
	if got := c.waitAgent(t, "only", api.AgentCompleted).Status.ReleasedSandbox; got != sb {
		t.Errorf("released %q, want %s", got, sb)
	}
	got := c.waitReleased(t, sb, api.SandboxPaused)
	if got.Status.Reason != "Released" || got.Status.Claim != nil || got.Status.ReleasedAt == nil {
		t.Errorf("status %s, claim %+v, releasedAt %v; want the release written", got.Status.Reason, got.Status.Claim, got.Status.ReleasedAt)
	}
}

// TestReleaseNotFoldedWhenHeld: a sandbox a person holds when its agent
// ends is released after the outcome, as before, and the outcome does
// not offer it; so is every release when the node is told to write them
// all (a negative ReleaseWriteDelay).
func TestReleaseNotFoldedWhenHeld(t *testing.T) {
	tests := []struct {
		name  string
		delay time.Duration
		hold  bool
	}{
		{"held by a person", time.Hour, true},
		{"folding turned off", -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClusterWith(t, clusterOptions{releaseWriteDelay: tt.delay})
			c.create(t, yamlObj(t, poolYAML("web", 1, "")))
			sb := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
			c.poolAgent(t, "job", `{action: wait, duration: 1}`)
			c.waitAgent(t, "job", api.AgentRunning)
			if tt.hold {
				if _, err := reconcile.UpdateStatus(context.Background(), c.st, api.KindSandbox, sb, func(s *api.Sandbox) bool {
					s.Status.Control = &api.SandboxControl{ID: "c1", Holder: "alice", Since: time.Now().UTC()}
					return true
				}); err != nil {
					t.Fatal(err)
				}
			}
			if got := c.waitAgent(t, "job", api.AgentCompleted).Status.ReleasedSandbox; got != "" {
				t.Errorf("the outcome released %q, want nothing said", got)
			}
			got := c.waitReleased(t, sb, api.SandboxPaused)
			if got.Status.Control != nil {
				t.Errorf("the take-over %+v outlived the reset", got.Status.Control)
			}
		})
	}
}

// TestDeferredReleaseAfterARestart: a node that stops writes the releases
// it deferred; one that crashed leaves the claim of a finished agent, and
// the node that starts next releases the sandbox (its reset again is
// harmless) and writes it.
func TestDeferredReleaseAfterARestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			testDeferredReleaseAfterARestart(t, crash)
		})
	}
}

func testDeferredReleaseAfterARestart(t *testing.T, crash bool) {
	c := newClusterWith(t, clusterOptions{releaseWriteDelay: time.Hour})
	c.create(t, yamlObj(t, poolYAML("web", 1, "")))
	sb := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	c.poolAgent(t, "job", `{action: type, text: "x"}`)
	c.waitAgent(t, "job", api.AgentCompleted)
	if got := c.sandbox(t, sb).Status.CurrentAgent; got != "job" {
		t.Fatalf("claim %q, want job's left unwritten", got)
	}
	// The outcome shows a moment before the node defers the release.
	eventually(t, "the release deferred", func() (bool, string) {
		got := c.nd.deferred.of(sb)
		return got == "job", fmt.Sprintf("deferred release of %q", got)
	})
	resets := c.be.Count(fake.OpReset)
	if crash {
		// What a crash leaves: nothing of the deferred release in memory.
		c.nd.deferred.take(sb, "")
	}
	c.restart(t)
	c.waitReleased(t, sb, api.SandboxPaused)
	want := resets
	if crash {
		want++
	}
	if got := c.be.Count(fake.OpReset); got != want {
		t.Errorf("%d resets after the restart, want %d", got, want)
	}
	c.poolAgent(t, "next", `{action: type, text: "y"}`)
	if got := c.waitAgent(t, "next", api.AgentCompleted).Status.Sandbox; got != sb {
		t.Errorf("next ran on %q, want %s", got, sb)
	}
}

// TestNoCallsWhileReleasing: while the node resets a sandbox before its
// agent's outcome, the agent still shows Running (its token still acts
// through the API servers), but the node lets no call reach the desktop
// being cleaned: nothing lands there for the next agent to find.
func TestNoCallsWhileReleasing(t *testing.T) {
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	resetting := make(chan struct{}, 1)
	c := newClusterWith(t, clusterOptions{releaseWriteDelay: time.Hour, fake: fake.Options{Delay: func(op string) time.Duration {
		if op == fake.OpReset {
			select {
			case resetting <- struct{}{}:
			default:
			}
			<-gate
		}
		return 0
	}}})
	t.Cleanup(open)
	c.create(t, yamlObj(t, poolYAML("web", 1, "")))
	sb := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	c.poolAgent(t, "job", `{action: type, text: "x"}`)
	select {
	case <-resetting:
	case <-time.After(20 * time.Second):
		t.Fatal("no reset began")
	}
	if got := c.agent(t, "job").Status.Phase; got != api.AgentRunning {
		t.Fatalf("job is %s while its sandbox resets, want Running (the outcome waits for the reset)", got)
	}
	if err := c.nd.TypeText(context.Background(), sb, "z"); !errors.Is(err, api.ErrConflict) {
		t.Errorf("typing into the desktop being reset: %v, want a conflict", err)
	}
	open()
	c.waitAgent(t, "job", api.AgentCompleted)
	if got := c.be.Typed(sb); got != "x" {
		t.Errorf("the desktop was sent %q, want only the agent's %q", got, "x")
	}
}

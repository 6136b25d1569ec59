package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sel(s string) api.Selector {
	x, err := api.ParseSelector(s)
	if err != nil {
		panic(err)
	}
	return x
}

func TestScore(t *testing.T) {
	a := Agent{Name: "a", Selector: sel("pool=web")}
	gpu := Agent{Name: "g", Selector: sel("pool=web"), RequiresGPU: true}
	tests := []struct {
		name  string
		a     Agent
		sb    Sandbox
		score int
	}{
		{"running, free", a, Sandbox{Phase: api.SandboxRunning}, 150},
		{"paused, free", a, Sandbox{Phase: api.SandboxPaused}, 50},
		{"running, busy", a, Sandbox{Phase: api.SandboxRunning, Agent: "x"}, 100},
		{"gpu match", gpu, Sandbox{Phase: api.SandboxPaused, GPU: true}, 75},
		{"gpu not asked", a, Sandbox{Phase: api.SandboxPaused, GPU: true}, 50},
		{"idle 95s", a, Sandbox{Phase: api.SandboxPaused, IdleSince: t0.Add(-95 * time.Second)}, 59},
		{"idle a day is capped", a, Sandbox{Phase: api.SandboxPaused, IdleSince: t0.Add(-24 * time.Hour)}, 99},
	}
	for _, tt := range tests {
		if got := Score(tt.a, tt.sb, t0); got != tt.score {
			t.Errorf("%s: score %d, want %d", tt.name, got, tt.score)
		}
	}
}

func TestFeasible(t *testing.T) {
	ok := Sandbox{Name: "s", Labels: map[string]string{"pool": "web"}, Phase: api.SandboxPaused, Healthy: true}
	tests := []struct {
		name string
		a    Agent
		sb   func(Sandbox) Sandbox
		want bool
	}{
		{"matches", Agent{Selector: sel("pool=web")}, func(s Sandbox) Sandbox { return s }, true},
		{"other pool", Agent{Selector: sel("pool=db")}, func(s Sandbox) Sandbox { return s }, false},
		{"by name", Agent{SandboxName: "s"}, func(s Sandbox) Sandbox { return s }, true},
		{"other name", Agent{SandboxName: "t"}, func(s Sandbox) Sandbox { return s }, false},
		{"busy", Agent{Selector: sel("pool=web")}, func(s Sandbox) Sandbox { s.Agent = "x"; return s }, false},
		{"unhealthy", Agent{Selector: sel("pool=web")}, func(s Sandbox) Sandbox { s.Healthy = false; return s }, false},
		{"deleting", Agent{Selector: sel("pool=web")}, func(s Sandbox) Sandbox { s.Deleting = true; return s }, false},
		{"creating", Agent{Selector: sel("pool=web")}, func(s Sandbox) Sandbox { s.Phase = api.SandboxCreating; return s }, false},
		{"error", Agent{Selector: sel("pool=web")}, func(s Sandbox) Sandbox { s.Phase = api.SandboxError; return s }, false},
		{"saved", Agent{Selector: sel("pool=web")}, func(s Sandbox) Sandbox { s.Phase = api.SandboxSaved; return s }, true},
		{"needs gpu", Agent{Selector: sel("pool=web"), RequiresGPU: true}, func(s Sandbox) Sandbox { return s }, false},
	}
	for _, tt := range tests {
		if got := Feasible(tt.a, tt.sb(ok)); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPlan(t *testing.T) {
	web := map[string]string{"pool": "web"}
	sandboxes := []Sandbox{
		{Name: "w1", Labels: web, Phase: api.SandboxPaused, Healthy: true},
		{Name: "w2", Labels: web, Phase: api.SandboxRunning, Healthy: true},
		{Name: "w3", Labels: web, Phase: api.SandboxPaused, Healthy: true, Agent: "busy"},
		{Name: "d1", Labels: map[string]string{"pool": "db"}, Phase: api.SandboxPaused, Healthy: true},
	}
	agents := []Agent{
		{Name: "late", Selector: sel("pool=web"), Created: t0.Add(2 * time.Second)},
		{Name: "first", Selector: sel("pool=web"), Created: t0},
		{Name: "third", Selector: sel("pool=web"), Created: t0.Add(3 * time.Second)},
		{Name: "db", Selector: sel("pool=db"), Created: t0.Add(time.Second)},
		{Name: "named", SandboxName: "d1", Created: t0.Add(4 * time.Second)},
	}
	got := fmt.Sprint(Plan(agents, sandboxes, t0))
	// The oldest takes the running sandbox; the next web agent the paused
	// one; the third finds none left; the named agent finds d1 taken.
	want := "[{first w2} {db d1} {late w1}]"
	if got != want {
		t.Fatalf("plan %s, want %s", got, want)
	}
}

// TestPlanNeverDoubleBinds plans many agents over many sandboxes and
// checks that no sandbox and no agent appears twice.
func TestPlanNeverDoubleBinds(t *testing.T) {
	var sbs []Sandbox
	for i := 0; i < 1000; i++ {
		sbs = append(sbs, Sandbox{Name: fmt.Sprintf("s%04d", i), Labels: map[string]string{"pool": fmt.Sprint(i % 3)}, Phase: api.SandboxPaused, Healthy: true})
	}
	var ags []Agent
	for i := 0; i < 10000; i++ {
		ags = append(ags, Agent{Name: fmt.Sprintf("a%05d", i), Selector: sel(fmt.Sprintf("pool=%d", i%3)), Created: t0.Add(time.Duration(i))})
	}
	plan := Plan(ags, sbs, t0)
	if len(plan) != 1000 {
		t.Fatalf("%d bindings, want 1000", len(plan))
	}
	seenA, seenS := map[string]bool{}, map[string]bool{}
	for _, b := range plan {
		if seenA[b.Agent] || seenS[b.Sandbox] {
			t.Fatalf("double bind: %v", b)
		}
		seenA[b.Agent], seenS[b.Sandbox] = true, true
	}
}

func BenchmarkPlan(b *testing.B) {
	var sbs []Sandbox
	for i := 0; i < 1000; i++ {
		sbs = append(sbs, Sandbox{Name: fmt.Sprintf("s%04d", i), Labels: map[string]string{"pool": "web"}, Phase: api.SandboxPaused, Healthy: true})
	}
	var ags []Agent
	for i := 0; i < 10000; i++ {
		ags = append(ags, Agent{Name: fmt.Sprintf("a%05d", i), Selector: sel("pool=web"), Created: t0.Add(time.Duration(i))})
	}
	for b.Loop() {
		Plan(ags, sbs, t0)
	}
}

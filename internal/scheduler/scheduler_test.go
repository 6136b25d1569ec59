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
		{"released, unwritten: above any idle one", a, Sandbox{Phase: api.SandboxPaused, Released: true}, 100},
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

// TestPlanCases covers how Plan picks among sandboxes: score, ties,
// GPU, names, selectors and sandboxes that cannot take an agent.
func TestPlanCases(t *testing.T) {
	web := map[string]string{"pool": "web"}
	db := map[string]string{"pool": "db"}
	paused := func(name string, labels map[string]string) Sandbox {
		return Sandbox{Name: name, Labels: labels, Phase: api.SandboxPaused, Healthy: true}
	}
	with := func(sb Sandbox, f func(*Sandbox)) Sandbox { f(&sb); return sb }
	agent := func(name, selector string, age int) Agent {
		return Agent{Name: name, Selector: sel(selector), Created: t0.Add(time.Duration(age) * time.Second)}
	}
	gpuAgent := func(name, selector string, age int) Agent {
		a := agent(name, selector, age)
		a.RequiresGPU = true
		return a
	}
	named := func(name, sandbox string, age int) Agent {
		return Agent{Name: name, SandboxName: sandbox, Created: t0.Add(time.Duration(age) * time.Second)}
	}
	tests := []struct {
		name      string
		sandboxes []Sandbox
		agents    []Agent
		want      string
	}{
		{"nothing to place", nil, nil, "[]"},
		{"no sandboxes", nil, []Agent{agent("a", "pool=web", 0)}, "[]"},
		{"equal scores go by name", []Sandbox{paused("w3", web), paused("w1", web), paused("w2", web)},
			[]Agent{agent("a", "pool=web", 0), agent("b", "pool=web", 1)}, "[{a w1} {b w2}]"},
		{"running first", []Sandbox{paused("w1", web), with(paused("w2", web), func(s *Sandbox) { s.Phase = api.SandboxRunning })},
			[]Agent{agent("a", "pool=web", 0)}, "[{a w2}]"},
		{"longest idle first", []Sandbox{
			with(paused("w1", web), func(s *Sandbox) { s.IdleSince = t0.Add(-10 * time.Second) }),
			with(paused("w2", web), func(s *Sandbox) { s.IdleSince = t0.Add(-30 * time.Second) }),
		}, []Agent{agent("a", "pool=web", 0)}, "[{a w2}]"},
		{"idle time past the cap ties", []Sandbox{
			with(paused("w2", web), func(s *Sandbox) { s.IdleSince = t0.Add(-time.Hour) }),
			with(paused("w1", web), func(s *Sandbox) { s.IdleSince = t0.Add(-2 * time.Hour) }),
		}, []Agent{agent("a", "pool=web", 0)}, "[{a w1}]"},
		{"idle since a time to come scores below zero", []Sandbox{
			with(paused("w1", web), func(s *Sandbox) { s.IdleSince = t0.Add(time.Hour) }),
		}, []Agent{agent("a", "pool=web", 0)}, "[]"},
		{"a GPU agent scores it back above zero", []Sandbox{
			with(paused("w1", web), func(s *Sandbox) { s.IdleSince, s.GPU = t0.Add(700*time.Second), true }),
		}, []Agent{agent("a", "pool=web", 0), gpuAgent("g", "pool=web", 1)}, "[{g w1}]"},
		{"GPU agent takes only a GPU sandbox", []Sandbox{
			with(paused("w1", web), func(s *Sandbox) { s.Phase = api.SandboxRunning }),
			with(paused("w2", web), func(s *Sandbox) { s.GPU = true }),
		}, []Agent{gpuAgent("g", "pool=web", 0), gpuAgent("h", "pool=web", 1)}, "[{g w2}]"},
		{"agent without GPU need may take one", []Sandbox{
			with(paused("w1", web), func(s *Sandbox) { s.GPU = true }), paused("w2", web),
		}, []Agent{agent("a", "pool=web", 0)}, "[{a w1}]"},
		{"oldest first, then by name", []Sandbox{paused("w1", web)},
			[]Agent{agent("b", "pool=web", 0), agent("c", "pool=web", 1), agent("a", "pool=web", 0)}, "[{a w1}]"},
		{"named takes from the middle of a class", []Sandbox{paused("w1", web), paused("w2", web), paused("w3", web)},
			[]Agent{named("n", "w1", 0), agent("a", "pool=web", 1), agent("b", "pool=web", 2)}, "[{n w1} {a w2} {b w3}]"},
		{"named ignores labels, takes nothing else", []Sandbox{paused("d1", db), paused("w1", web)},
			[]Agent{named("n", "d1", 0), named("m", "d1", 1), named("x", "nope", 2)}, "[{n d1}]"},
		{"named busy", []Sandbox{with(paused("w1", web), func(s *Sandbox) { s.Agent = "other" })},
			[]Agent{named("n", "w1", 0)}, "[]"},
		{"named without the GPU it needs", []Sandbox{paused("w1", web)},
			[]Agent{{Name: "n", SandboxName: "w1", RequiresGPU: true}}, "[]"},
		{"cannot take an agent", []Sandbox{
			with(paused("w1", web), func(s *Sandbox) { s.Healthy = false }),
			with(paused("w2", web), func(s *Sandbox) { s.Deleting = true }),
			with(paused("w3", web), func(s *Sandbox) { s.Phase = api.SandboxCreating }),
			with(paused("w4", web), func(s *Sandbox) { s.Agent = "other" }),
			with(paused("w5", web), func(s *Sandbox) { s.Phase = api.SandboxSaved }),
		}, []Agent{agent("a", "pool=web", 0), agent("b", "pool=web", 1)}, "[{a w5}]"},
		{"expressions across classes", []Sandbox{
			paused("d1", db), paused("w1", web), paused("x1", map[string]string{"pool": "x"}), paused("n1", nil),
			with(paused("t1", map[string]string{"pool": "web", "tier": "gpu"}), func(s *Sandbox) { s.Phase = api.SandboxRunning }),
		}, []Agent{
			agent("a", "pool in (web,db),tier!=gpu", 0), agent("b", "pool in (web,db),tier!=gpu", 1),
			agent("c", "pool in (web,db),tier!=gpu", 2), agent("d", "!pool", 3), agent("e", "tier", 4), agent("f", "pool notin (web)", 5),
		}, "[{a d1} {b w1} {d n1} {e t1} {f x1}]"},
		{"a retry takes another sandbox than the one it failed on", []Sandbox{
			with(paused("w1", web), func(s *Sandbox) { s.Phase = api.SandboxRunning }), paused("w2", web),
		}, []Agent{{Name: "r", Selector: sel("pool=web"), Avoid: "w1"}}, "[{r w2}]"},
		{"a retry takes the one it failed on when it is the only one", []Sandbox{paused("w1", web), paused("d1", db)},
			[]Agent{{Name: "r", Selector: sel("pool=web"), Avoid: "w1"}}, "[{r w1}]"},
		{"a retry leaves the others their best", []Sandbox{
			with(paused("w1", web), func(s *Sandbox) { s.Phase = api.SandboxRunning }), paused("w2", web), paused("w3", web),
		}, []Agent{{Name: "r", Selector: sel("pool=web"), Avoid: "w1"}, {Name: "s", Selector: sel("pool=web"), Created: t0}}, "[{r w2} {s w1}]"},
		{"empty selector takes any", []Sandbox{paused("w1", web), paused("d1", db)},
			[]Agent{agent("a", "", 0), agent("b", "", 1), agent("c", "", 2)}, "[{a d1} {b w1}]"},
		{"selectors alike as strings stay apart", []Sandbox{
			paused("s1", map[string]string{"a": "v,b=w"}), paused("s2", map[string]string{"a": "v", "b": "w"}),
		}, []Agent{
			{Name: "x", Selector: api.SelectorFromMap(map[string]string{"a": "v,b=w"})},
			{Name: "y", Selector: api.SelectorFromMap(map[string]string{"a": "v", "b": "w"}), Created: t0},
		}, "[{x s1} {y s2}]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fmt.Sprint(Plan(tt.agents, tt.sandboxes, t0))
			if got != tt.want {
				t.Fatalf("plan %s, want %s", got, tt.want)
			}
			if ref := fmt.Sprint(referencePlan(tt.agents, tt.sandboxes, t0)); ref != got {
				t.Fatalf("plan %s, reference %s", got, ref)
			}
		})
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

// BenchmarkPlan times Plan against referencePlan, the scan it replaced:
// 1,000 agents over 10,000 sandboxes in eight classes (four pools, with and
// without GPU; varied phases and idle times; a few agents asking for a GPU
// or naming their sandbox); the same with a label of its own on every
// sandbox, so that each is a class; and 10,000 agents over 1,000
// sandboxes of one pool.
func BenchmarkPlan(b *testing.B) {
	shapes := []struct {
		name      string
		agents    []Agent
		sandboxes []Sandbox
	}{
		{"agents=1000/sandboxes=10000", benchAgents(1000, 10000), benchSandboxes(10000, 4)},
		{"agents=1000/sandboxes=10000/distinct-labels", benchAgents(1000, 10000), withOwnLabel(benchSandboxes(10000, 4))},
		{"agents=10000/sandboxes=1000", benchAgents(10000, 0), benchSandboxes(1000, 1)},
	}
	plans := []struct {
		name string
		plan func([]Agent, []Sandbox, time.Time) []Binding
	}{{"indexed", Plan}, {"reference", referencePlan}}
	for _, sh := range shapes {
		for _, p := range plans {
			b.Run(sh.name+"/"+p.name, func(b *testing.B) {
				for b.Loop() {
					p.plan(sh.agents, sh.sandboxes, t0)
				}
			})
		}
	}
}

var benchPools = []string{"web", "db", "batch", "ml"}

// benchSandboxes returns n sandboxes spread over the first pools of
// benchPools, one in five with a GPU, most paused, idle from 0 to 10
// minutes.
func benchSandboxes(n, pools int) []Sandbox {
	phases := []string{api.SandboxPaused, api.SandboxPaused, api.SandboxRunning, api.SandboxSaved, api.SandboxCreating}
	out := make([]Sandbox, n)
	for i := range out {
		out[i] = Sandbox{Name: fmt.Sprintf("s%05d", i), Labels: map[string]string{"pool": benchPools[i%pools]},
			Phase: phases[i%len(phases)], Healthy: true, GPU: pools > 1 && i%5 == 1,
			IdleSince: t0.Add(-time.Duration(i%60) * 10 * time.Second)}
	}
	return out
}

// withOwnLabel gives each sandbox a label no other has.
func withOwnLabel(sbs []Sandbox) []Sandbox {
	for i := range sbs {
		sbs[i].Labels = map[string]string{"pool": sbs[i].Labels["pool"], "host": sbs[i].Name}
	}
	return sbs
}

// benchAgents returns n agents over the pools of benchPools, one in ten
// asking for a GPU and, when there are sandboxes to name, one in a hundred
// naming its sandbox.
func benchAgents(n, sandboxes int) []Agent {
	out := make([]Agent, n)
	for i := range out {
		a := Agent{Name: fmt.Sprintf("a%05d", i), Created: t0.Add(time.Duration(i))}
		switch {
		case sandboxes > 0 && i%100 == 7:
			a.SandboxName = fmt.Sprintf("s%05d", (i*37)%sandboxes)
		case sandboxes > 0:
			a.Selector, a.RequiresGPU = sel("pool="+benchPools[i%len(benchPools)]), i%10 == 3
		default:
			a.Selector = sel("pool=web")
		}
		out[i] = a
	}
	return out
}

// TestHeldSandboxTakesNoAgent: the scheduler passes over a sandbox whose
// input a person holds.
func TestHeldSandboxTakesNoAgent(t *testing.T) {
	sb := &api.Sandbox{Metadata: api.ObjectMeta{Name: "a"}, Status: api.SandboxStatus{Phase: api.SandboxRunning}}
	if !ViewOf(sb).Healthy {
		t.Fatal("a free running sandbox is not schedulable")
	}
	sb.Status.Control = &api.SandboxControl{ID: "x", Holder: "ana"}
	if ViewOf(sb).Healthy {
		t.Fatal("a held sandbox is schedulable")
	}
}

// TestSortForClaim: the order in which Plan hands out sandboxes, which
// the node readies desktops ahead in.
func TestSortForClaim(t *testing.T) {
	sbs := []Sandbox{
		{Name: "c", Phase: api.SandboxPaused, Healthy: true, IdleSince: t0.Add(-time.Minute)},
		{Name: "b", Phase: api.SandboxPaused, Healthy: true, IdleSince: t0.Add(-time.Hour)},
		{Name: "a", Phase: api.SandboxPaused, Healthy: true, IdleSince: t0.Add(-2 * time.Hour)},
		{Name: "d", Phase: api.SandboxRunning, Healthy: true, IdleSince: t0},
	}
	SortForClaim(sbs, t0)
	var got []string
	for _, sb := range sbs {
		got = append(got, sb.Name)
	}
	if fmt.Sprint(got) != "[d a b c]" {
		t.Errorf("order %v, want running first, then the longest idle", got)
	}
	// Past the idle score's cap, still the longest idle first: the order
	// does not change as more sandboxes reach the cap.
	capped := []Sandbox{
		{Name: "a", Phase: api.SandboxPaused, Healthy: true, IdleSince: t0.Add(-time.Hour)},
		{Name: "z", Phase: api.SandboxPaused, Healthy: true, IdleSince: t0.Add(-2 * time.Hour)},
	}
	SortForClaim(capped, t0)
	if capped[0].Name != "z" {
		t.Errorf("order %v, want z (idle longer) first", capped)
	}
	var agents []Agent
	for i := range 4 {
		agents = append(agents, Agent{Name: fmt.Sprint("x", i), Created: t0.Add(time.Duration(i))})
	}
	plan := Plan(agents, sbs, t0)
	if len(plan) != 4 {
		t.Fatalf("plan %v", plan)
	}
	for i, b := range plan {
		if b.Sandbox != got[i] {
			t.Errorf("Plan gave agent %d %s, SortForClaim %s", i, b.Sandbox, got[i])
		}
	}
}

package scheduler

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// referencePlan is Plan as it was before the index: for each agent, oldest
// first, a scan of every free sandbox. Plan must give the same bindings.
func referencePlan(agents []Agent, sandboxes []Sandbox, now time.Time) []Binding {
	agents = append([]Agent(nil), agents...)
	sort.SliceStable(agents, func(i, j int) bool {
		if !agents[i].Created.Equal(agents[j].Created) {
			return agents[i].Created.Before(agents[j].Created)
		}
		return agents[i].Name < agents[j].Name
	})
	free := make([]Sandbox, 0, len(sandboxes))
	for _, sb := range sandboxes {
		if sb.Agent == "" && !sb.Deleting && sb.Healthy {
			free = append(free, sb)
		}
	}
	sort.Slice(free, func(i, j int) bool {
		if !free[i].IdleSince.Equal(free[j].IdleSince) {
			return free[i].IdleSince.Before(free[j].IdleSince)
		}
		return free[i].Name < free[j].Name
	})
	taken := make([]bool, len(free))
	left := len(free)
	var out []Binding
	for _, a := range agents {
		if left == 0 {
			break
		}
		best, bestScore, avoided := -1, -1, -1
		for i, sb := range free {
			if taken[i] || !Feasible(a, sb) {
				continue
			}
			if sb.Name == a.Avoid && a.SandboxName == "" {
				avoided = i
				continue
			}
			if s := Score(a, sb, now); s > bestScore {
				best, bestScore = i, s
			}
		}
		if best < 0 && avoided >= 0 && Score(a, free[avoided], now) >= 0 {
			best = avoided
		}
		if best >= 0 {
			taken[best] = true
			left--
			out = append(out, Binding{Agent: a.Name, Sandbox: free[best].Name})
		}
	}
	return out
}

// gen draws random scheduling inputs from small alphabets, so that label
// sets repeat, selectors match several classes and scores tie.
type gen struct{ r *rand.Rand }

var (
	genKeys   = []string{"pool", "tier", "zone"}
	genValues = []string{"a", "b", "c"}
	genPhases = []string{api.SandboxRunning, api.SandboxPaused, api.SandboxSaved, api.SandboxCreating, api.SandboxError}
)

func (g gen) pick(list []string) string { return list[g.r.IntN(len(list))] }

// chance reports true with probability n in 100.
func (g gen) chance(n int) bool { return g.r.IntN(100) < n }

func (g gen) labels() map[string]string {
	if g.chance(10) {
		return nil
	}
	m := map[string]string{}
	for _, k := range genKeys {
		if g.chance(60) {
			m[k] = g.pick(genValues)
		}
	}
	return m
}

// term is one selector term of any kind.
func (g gen) term() string {
	k := g.pick(genKeys)
	switch g.r.IntN(6) {
	case 0:
		return k + "=" + g.pick(genValues)
	case 1:
		return k + "!=" + g.pick(genValues)
	case 2:
		return fmt.Sprintf("%s in (%s,%s)", k, g.pick(genValues), g.pick(genValues))
	case 3:
		return fmt.Sprintf("%s notin (%s)", k, g.pick(genValues))
	case 4:
		return k
	default:
		return "!" + k
	}
}

func (g gen) selector() api.Selector {
	if g.chance(30) {
		return api.SelectorFromMap(g.labels())
	}
	terms := make([]string, g.r.IntN(3))
	for i := range terms {
		terms[i] = g.term()
	}
	return sel(strings.Join(terms, ","))
}

// idle is a time a sandbox became idle: none, in the past in whole steps
// of the score (ties), up to past the cap, or now and then in the future.
func (g gen) idle(now time.Time) time.Time {
	switch {
	case g.chance(15):
		return time.Time{}
	case g.chance(5):
		return now.Add(time.Duration(g.r.IntN(1200)) * time.Second)
	default:
		return now.Add(-time.Duration(g.r.IntN(70)) * 10 * time.Second)
	}
}

func (g gen) sandboxes(n int, now time.Time) []Sandbox {
	out := make([]Sandbox, n)
	for i, j := range g.r.Perm(n) {
		out[i] = Sandbox{Name: fmt.Sprintf("s%03d", j), Labels: g.labels(), Phase: g.pick(genPhases),
			Healthy: !g.chance(10), Deleting: g.chance(5), GPU: g.chance(30), IdleSince: g.idle(now)}
		if g.chance(10) {
			out[i].Agent = "busy"
		}
	}
	return out
}

func (g gen) agents(n, nSandboxes int, now time.Time) []Agent {
	out := make([]Agent, n)
	for i, j := range g.r.Perm(n) {
		a := Agent{Name: fmt.Sprintf("a%03d", j), RequiresGPU: g.chance(25),
			Created: now.Add(-time.Duration(g.r.IntN(5)) * time.Second)}
		if g.chance(15) {
			a.SandboxName = fmt.Sprintf("s%03d", g.r.IntN(nSandboxes+2))
		} else {
			a.Selector = g.selector()
		}
		if g.chance(30) {
			a.Avoid = fmt.Sprintf("s%03d", g.r.IntN(nSandboxes+2))
		}
		out[i] = a
	}
	return out
}

// TestPlanMatchesReference checks Plan against referencePlan over many
// random inputs.
func TestPlanMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	g := gen{r}
	rounds := 3000
	if testing.Short() {
		rounds = 300
	}
	for round := range rounds {
		nS, nA := r.IntN(60), r.IntN(60)
		if round%100 == 0 {
			nS, nA = 400, 300
		}
		sbs, ags := g.sandboxes(nS, t0), g.agents(nA, nS, t0)
		want := fmt.Sprint(referencePlan(ags, sbs, t0))
		if got := fmt.Sprint(Plan(ags, sbs, t0)); got != want {
			t.Fatalf("round %d (%d sandboxes, %d agents):\nplan      %s\nreference %s\nsandboxes %+v\nagents %+v",
				round, nS, nA, got, want, sbs, ags)
		}
	}
}

// Package scheduler places pending agents on sandboxes. It is pure logic
// over a snapshot of the state: it reads no store and writes nothing; the
// caller commits each placement by a resourceVersion-checked claim on the
// sandbox, so a stale snapshot costs a retry, never a double bind.
package scheduler

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// Sandbox is a sandbox as the scheduler sees it.
type Sandbox struct {
	Name   string
	Labels map[string]string
	// Phase is the sandbox's phase: Running, Paused and Saved can take an
	// agent (a warm one is resumed on acquire).
	Phase string
	// Agent is the agent bound to it, if any.
	Agent string
	// Healthy is false while its health check fails.
	Healthy  bool
	Deleting bool
	GPU      bool
	// IdleSince is when it last became free (or ready).
	IdleSince time.Time
	// Released says its last agent released it and its node has not
	// written that yet (agentstate.Released): a claim of it is the
	// release's write too, and it is taken before the idle ones.
	Released bool
}

// Agent is a pending agent.
type Agent struct {
	Name string
	// SandboxName, when set, is the only sandbox it may take; otherwise
	// Selector picks the sandboxes.
	SandboxName string
	Selector    api.Selector
	RequiresGPU bool
	Created     time.Time
	// Avoid is the sandbox its last failed attempt ran on: it takes that
	// one only when no other sandbox it can take is free.
	Avoid string
}

// Binding places Agent on Sandbox.
type Binding struct {
	Agent, Sandbox string
}

// Feasible reports whether sb can take a.
func Feasible(a Agent, sb Sandbox) bool {
	if !open(sb) {
		return false
	}
	if a.RequiresGPU && !sb.GPU {
		return false
	}
	if a.SandboxName != "" {
		return sb.Name == a.SandboxName
	}
	return a.Selector.Matches(sb.Labels)
}

// open reports whether sb can take some agent: free, healthy, not being
// deleted, and Running, Paused or Saved.
func open(sb Sandbox) bool {
	if sb.Agent != "" || sb.Deleting || !sb.Healthy {
		return false
	}
	switch sb.Phase {
	case api.SandboxRunning, api.SandboxPaused, api.SandboxSaved:
		return true
	}
	return false
}

// maxIdleScore caps the idle-time part of a score below the running bonus,
// so that a long-idle warm sandbox never outranks a running one.
const maxIdleScore = 49

// releasedScore puts a sandbox released moments ago, whose claim is also
// its release's write, above any idle one, and below a running one.
const releasedScore = maxIdleScore + 1

// Score ranks a feasible sandbox for a, as seed 000 does: running +100,
// no agent +50, GPU match +25, and a point per 10 s idle (at most 49);
// and released with its release unwritten +50 (a claim of it saves a
// write).
func Score(a Agent, sb Sandbox, now time.Time) int {
	s := 0
	if sb.Phase == api.SandboxRunning {
		s += 100
	}
	if sb.Released {
		s += releasedScore
	}
	if sb.Agent == "" {
		s += 50
	}
	if a.RequiresGPU && sb.GPU {
		s += 25
	}
	if !sb.IdleSince.IsZero() {
		s += min(int(now.Sub(sb.IdleSince)/(10*time.Second)), maxIdleScore)
	}
	return s
}

// Plan places as many agents as it can, oldest first, each on the best
// feasible sandbox no earlier agent took (ties go to the one idle longer,
// then to the name first in order, so plans are repeatable). Agents that fit nowhere are left out.
//
// It finds each agent's best sandbox without a scan of every sandbox: the
// sandboxes that can take an agent are grouped into classes by label set
// and GPU, each class a heap in score order, and the classes a selector
// matches are found once per round and shared by all agents with that
// selector and GPU need.
func Plan(agents []Agent, sandboxes []Sandbox, now time.Time) []Binding {
	ix := newIndex(sandboxes, now)
	var out []Binding
	for _, a := range oldestFirst(agents) {
		if ix.left == 0 {
			break
		}
		if sb, ok := ix.take(a); ok {
			out = append(out, Binding{Agent: a.Name, Sandbox: sb})
		}
	}
	return out
}

// oldestFirst returns a copy of agents sorted by creation time, then name.
func oldestFirst(agents []Agent) []Agent {
	agents = slices.Clone(agents)
	slices.SortStableFunc(agents, func(x, y Agent) int { return CompareAge(x.Created, x.Name, y.Created, y.Name) })
	return agents
}

// CompareAge orders agents as Plan takes them: created first, then by
// name.
func CompareAge(xCreated time.Time, xName string, yCreated time.Time, yName string) int {
	if c := xCreated.Compare(yCreated); c != 0 {
		return c
	}
	return strings.Compare(xName, yName)
}

// Open reports whether sb can take some agent: Plan binds at most as many
// agents as there are open sandboxes.
func Open(sb Sandbox) bool { return open(sb) }

// ViewOf is a sandbox as the scheduler sees it.
func ViewOf(sb *api.Sandbox) Sandbox {
	idle := sb.Status.ReadyAt
	if sb.Status.ReleasedAt != nil {
		idle = sb.Status.ReleasedAt
	}
	// A sandbox a person holds (status.control) takes no new agent: its
	// input would be refused.
	v := Sandbox{Name: sb.Metadata.Name, Labels: sb.Metadata.Labels, Phase: sb.Status.Phase,
		Agent: sb.Status.CurrentAgent, Healthy: sb.Status.Healthy() && sb.Status.Control == nil,
		Deleting: sb.Metadata.DeletionTimestamp != nil, GPU: sb.Spec.Resources.GPU}
	if idle != nil {
		v.IdleSince = *idle
	}
	return v
}

// SortForClaim orders sandboxes as Plan offers them to an agent that
// names none and asks for no GPU: the best score first, then the one idle
// longer, then the name first in order.
func SortForClaim(sbs []Sandbox, now time.Time) {
	slices.SortStableFunc(sbs, func(x, y Sandbox) int {
		if c := cmp.Compare(Score(Agent{}, y, now), Score(Agent{}, x, now)); c != 0 {
			return c
		}
		return compareIdle(x, y)
	})
}

package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/capacity"
	"github.com/hvkube/hvkube/internal/drivers/fake"
)

func TestLRUIdle(t *testing.T) {
	at := func(m int) *time.Time { x := time.Date(2026, 1, 1, 0, m, 0, 0, time.UTC); return &x }
	pooled := func(name, phase, agent string, started, resumed *time.Time) *api.Sandbox {
		sb := &api.Sandbox{Metadata: api.ObjectMeta{Name: name, OwnerReferences: []api.OwnerReference{{Kind: api.KindSandboxPool, Name: "p"}}}}
		sb.Status.Phase, sb.Status.CurrentAgent, sb.Status.StartedAt, sb.Status.LastResumedAt = phase, agent, started, resumed
		return sb
	}
	own := pooled("own", api.SandboxPaused, "", at(0), nil)
	own.Metadata.OwnerReferences = nil
	deleting := pooled("deleting", api.SandboxPaused, "", at(0), nil)
	deleting.Metadata.DeletionTimestamp = at(9)
	got := lruIdle([]*api.Sandbox{
		pooled("used-late", api.SandboxPaused, "", at(1), at(30)),
		pooled("new", api.SandboxPaused, "", at(20), nil),
		pooled("old", api.SandboxPaused, "", at(2), nil),
		pooled("running", api.SandboxRunning, "", at(0), nil),
		pooled("claimed", api.SandboxPaused, "job", at(0), nil),
		pooled("saved", api.SandboxSaved, "", at(0), nil),
		own, deleting,
	})
	var names []string
	for _, sb := range got {
		names = append(names, sb.Metadata.Name)
	}
	if want := "old new used-late"; strings.Join(names, " ") != want {
		t.Errorf("lruIdle = %v, want %s", names, want)
	}
}

func TestPressureReason(t *testing.T) {
	tests := []struct {
		name string
		p    Pressure
		c    backend.Capacity
		want string // a word of the reason, or "" for none
	}{
		{"plenty", Pressure{}, backend.Capacity{TotalMemoryMB: 1000, AvailableMemoryMB: 500, MemoryPressure: -1}, ""},
		{"under 10 %", Pressure{}, backend.Capacity{TotalMemoryMB: 1000, AvailableMemoryMB: 99, MemoryPressure: -1}, "available"},
		{"at 10 %", Pressure{}, backend.Capacity{TotalMemoryMB: 1000, AvailableMemoryMB: 100}, ""},
		{"a higher threshold", Pressure{Percent: 30}, backend.Capacity{TotalMemoryMB: 1000, AvailableMemoryMB: 250}, "available"},
		{"PSI", Pressure{}, backend.Capacity{TotalMemoryMB: 1000, AvailableMemoryMB: 500, MemoryPressure: 25}, "waited"},
		{"turned off", Pressure{Percent: -1}, backend.Capacity{TotalMemoryMB: 1000, AvailableMemoryMB: 1, MemoryPressure: 90}, ""},
		{"unknown host", Pressure{}, backend.Capacity{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &Node{opt: Options{Pressure: tt.p}}
			got := n.pressureReason(tt.c)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("pressureReason = %q, want one with %q", got, tt.want)
			}
		})
	}
}

// hostMemory is a capacity.Reader for the FAKE backend whose available
// memory a test sets; every process uses 60 MiB.
type hostMemory struct {
	mu    sync.Mutex
	avail int
}

func (h *hostMemory) Host() (capacity.Host, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return capacity.Host{TotalMB: 10000, AvailableMB: h.avail, PressureAvg10: -1}, nil
}

func (h *hostMemory) FootprintMB(pid int) (int, error) { return 60, nil }

func (h *hostMemory) set(avail int) {
	h.mu.Lock()
	h.avail = avail
	h.mu.Unlock()
}

// TestPressureMovesIdleDesktops: when the (FAKE) host runs short of
// memory, the node moves idle paused desktops of pools to disk, least
// recently used first, with an event and a pool condition, and never one
// an agent holds; a claim brings a moved one back; the Node object says
// what happened.
func TestPressureMovesIdleDesktops(t *testing.T) {
	mem := &hostMemory{avail: 9000}
	c := newClusterWith(t, clusterOptions{fake: fake.Options{Memory: mem}, statusInterval: 50 * time.Millisecond})
	c.create(t, yamlObj(t, poolYAML("web", 3, "")))
	c.waitPool(t, "web", 3, api.SandboxPaused)
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: holder}
spec:
  sandboxSelector: {pool: web}
  task:
    steps:
    - {action: wait, duration: 30}
`))
	var held string
	eventually(t, "the agent runs", func() (bool, string) {
		a := c.agent(t, "holder")
		held = a.Status.Sandbox
		return a.Status.Phase == api.AgentRunning, a.Status.Phase
	})
	ctx := context.Background()
	node := func() *api.Node {
		o, err := c.st.Get(ctx, api.KindNode, "n1")
		if err != nil {
			t.Fatal(err)
		}
		return o.(*api.Node)
	}
	eventually(t, "the node reports its memory", func() (bool, string) {
		n := node()
		return n.Status.Memory.TotalMB == 10000 && n.Status.Memory.UsedMB >= 3*60 && len(n.Status.Templates) == 1,
			fmt.Sprintf("%+v", n.Status)
	})
	if tp := node().Status.Templates[0]; tp.Name != "desk" || tp.CloneMB != 60 || tp.Fit == 0 {
		t.Errorf("node template %+v, want desk with 60 MiB clones that fit", tp)
	}

	mem.set(500) // 5 %
	eventually(t, "the idle desktops move to disk", func() (bool, string) {
		var states []string
		moved := 0
		for _, sb := range c.members(t, "web") {
			states = append(states, sb.Metadata.Name+"="+sb.Status.Phase)
			if sb.Status.Phase == api.SandboxSaved && sb.Status.Reason == ReasonMovedToDisk {
				moved++
			}
		}
		return moved == 2, strings.Join(states, " ")
	})
	if sb := c.sandbox(t, held); sb.Status.Phase != api.SandboxRunning {
		t.Errorf("the held desktop is %s, want it left Running", sb.Status.Phase)
	}
	o, _ := c.st.Get(ctx, api.KindSandboxPool, "web")
	if cond := api.FindCondition(o.(*api.SandboxPool).Status.Conditions, ConditionMemoryPressure); cond == nil || cond.Status != api.ConditionTrue {
		t.Errorf("pool condition %+v, want MemoryPressure True", cond)
	}
	eventually(t, "the node reports the pressure", func() (bool, string) {
		n := node()
		cond := api.FindCondition(n.Status.Conditions, ConditionMemoryPressure)
		return n.Status.Pressure.Moved == 2 && cond != nil && cond.Status == api.ConditionTrue && n.Status.Sandboxes[api.SandboxSaved] == 2,
			fmt.Sprintf("%+v", n.Status)
	})
	var moved []string
	for _, sb := range c.members(t, "web") {
		if sb.Status.Phase == api.SandboxSaved {
			moved = append(moved, sb.Metadata.Name)
		}
	}
	if n := len(c.events(t, api.KindSandbox, moved[0], ReasonMovedToDisk)); n != 1 {
		t.Errorf("%d MovedToDisk events on %s, want 1", n, moved[0])
	}

	// Memory is back: the condition clears, and a claim restores a moved
	// desktop.
	mem.set(9000)
	eventually(t, "the pool's condition clears", func() (bool, string) {
		o, _ := c.st.Get(ctx, api.KindSandboxPool, "web")
		cond := api.FindCondition(o.(*api.SandboxPool).Status.Conditions, ConditionMemoryPressure)
		return cond != nil && cond.Status == api.ConditionFalse, fmt.Sprintf("%+v", cond)
	})
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: taker}
spec:
  sandboxSelector: {pool: web}
  task:
    steps:
    - {action: screenshot}
`))
	eventually(t, "an agent runs on a moved desktop", func() (bool, string) {
		a := c.agent(t, "taker")
		return a.Status.Phase == api.AgentCompleted, a.Status.Phase + " " + a.Status.Message
	})
	if sb := c.agent(t, "taker").Status.Sandbox; sb == held || !strings.Contains(strings.Join(moved, " "), sb) {
		t.Errorf("the agent ran on %s, want one of the moved %v", sb, moved)
	}
}

// TestHeartbeatDue: the Node object is written when its heartbeat is due,
// or sooner when something the cluster acts on changed; counts by phase
// and the measures' noise wait.
func TestHeartbeatDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := func() *api.NodeStatus {
		return &api.NodeStatus{Backend: "fake", LastHeartbeat: &t0,
			Memory:     api.NodeMemory{TotalMB: 10000, AvailableMB: 6000, LimitMB: 9000, UsedMB: 3000, ReservedMB: 500, FreeMB: 5500},
			Sandboxes:  map[string]int{api.SandboxPaused: 3},
			Templates:  []api.NodeTemplate{{Name: "desk", Snapshot: "desk-g1", CloneMB: 40, Fit: 100}},
			Conditions: []api.Condition{{Type: ConditionMemoryPressure, Status: api.ConditionFalse, Reason: "EnoughMemory"}}}
	}
	const within = 7500 * time.Millisecond
	tests := []struct {
		name   string
		change func(st *api.NodeStatus)
		want   bool
	}{
		{"nothing changed, 5 s on", func(st *api.NodeStatus) {}, false},
		{"nothing changed, 10 s on", func(st *api.NodeStatus) { at := t0.Add(10 * time.Second); st.LastHeartbeat = &at }, true},
		{"counts by phase", func(st *api.NodeStatus) { st.Sandboxes = map[string]int{api.SandboxRunning: 1, api.SandboxPaused: 2} }, false},
		{"memory within the noise", func(st *api.NodeStatus) { st.Memory.AvailableMB -= 50; st.Memory.FreeMB -= 99 }, false},
		{"memory past the noise", func(st *api.NodeStatus) { st.Memory.FreeMB -= 101 }, true},
		{"what fits", func(st *api.NodeStatus) { st.Templates[0].Fit = 99 }, true},
		{"a new template", func(st *api.NodeStatus) { st.Templates = append(st.Templates, api.NodeTemplate{Name: "web"}) }, true},
		{"pressure", func(st *api.NodeStatus) {
			st.Conditions[0] = api.Condition{Type: ConditionMemoryPressure, Status: api.ConditionTrue, Reason: "LowMemory"}
		}, true},
		{"address", func(st *api.NodeStatus) { st.Address = "10.0.0.2:7443" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			last, st := base(), base()
			at := t0.Add(5 * time.Second)
			st.LastHeartbeat = &at
			tt.change(st)
			if got := heartbeatDue(last, st, within); got != tt.want {
				t.Errorf("due %v, want %v", got, tt.want)
			}
		})
	}
}

package controller

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store/storefault"
)

// TestPlacement places sandboxes on nodes: spread over the nodes by pool,
// maxPerHost per node, nodes under memory pressure last, lost nodes never,
// and nothing before a node has reported.
func TestPlacement(t *testing.T) {
	type node struct {
		name     string
		free     int
		pressure bool
		lost     bool
		silent   bool // made, but no status written yet
	}
	type member struct{ name, node string }
	tests := []struct {
		name       string
		nodes      []node
		maxPerHost int
		placed     []member // the pool's members already placed
		want       string   // "" : left unplaced
		// capturedOn makes the template one captured on that node.
		capturedOn string
	}{
		{"no node yet", nil, 0, nil, "", ""},
		{"one node", []node{{"n1", 1000, false, false, false}}, 0, nil, "n1", ""},
		{"the most free memory", []node{{"n1", 1000, false, false, false}, {"n2", 3000, false, false, false}}, 0, nil, "n2", ""},
		{"spread before free memory", []node{{"n1", 1000, false, false, false}, {"n2", 3000, false, false, false}},
			0, []member{{"web-a", "n2"}}, "n1", ""},
		{"maxPerHost per node", []node{{"n1", 1000, false, false, false}, {"n2", 3000, false, false, false}},
			1, []member{{"web-a", "n1"}, {"web-b", "n2"}}, "", ""},
		{"maxPerHost leaves one", []node{{"n1", 1000, false, false, false}, {"n2", 3000, false, false, false}},
			2, []member{{"web-a", "n2"}, {"web-b", "n2"}, {"web-c", "n1"}}, "n1", ""},
		{"pressure last", []node{{"n1", 1000, false, false, false}, {"n2", 3000, true, false, false}}, 0, nil, "n1", ""},
		{"never a lost node", []node{{"n1", 1000, false, true, false}}, 0, nil, "", ""},
		// A node's object is made before its first status: until that
		// status, its free memory reads 0 and says nothing.
		{"never a node that has not reported", []node{{"n1", 1000, false, false, false}, {"n2", 0, false, false, true}},
			0, []member{{"web-a", "n1"}}, "n1", ""},
		{"only a node that has not reported", []node{{"n2", 0, false, false, true}}, 0, nil, "", ""},
		{"a captured template's node", []node{{"n1", 1000, false, false, false}, {"n2", 3000, false, false, false}}, 0, nil, "n1", "n1"},
		{"a captured template's node, not ready", []node{{"n1", 1000, false, true, false}, {"n2", 3000, false, false, false}}, 0, nil, "", "n1"},
		{"a captured template's node, full", []node{{"n1", 1000, false, false, false}, {"n2", 3000, false, false, false}},
			1, []member{{"web-a", "n1"}}, "", "n1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			p := NewPlacement(e.m, e.st, e.log, e.clk.Now)
			pool := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}}
			pool.Metadata.Name = "web"
			pool.Spec.Replicas = 5
			pool.Spec.MaxPerHost = tt.maxPerHost
			pool.Spec.Template.Spec.TemplateRef = "desk"
			api.Default(pool)
			pool = e.create(pool).(*api.SandboxPool)
			tpl := &api.Template{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindTemplate}}
			tpl.Metadata.Name = "desk"
			tpl.Spec.QEMU = &api.QEMUImage{Image: "linux-desktop"}
			if tt.capturedOn != "" {
				tpl.Spec.Source = &api.TemplateSource{Sandbox: "set-up", Node: tt.capturedOn}
			}
			e.create(tpl)
			for _, n := range tt.nodes {
				nd := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindNode}}
				nd.Metadata.Name = n.name
				nd.Status.Memory.FreeMB = n.free
				if !n.silent {
					at := e.clk.Now()
					nd.Status.LastHeartbeat = &at
				}
				if n.pressure {
					nd.Status.Conditions = []api.Condition{{Type: "MemoryPressure", Status: api.ConditionTrue}}
				}
				if n.lost {
					nd.Status.Conditions = []api.Condition{{Type: "Ready", Status: api.ConditionFalse, Reason: "NodeLost"}}
				}
				e.create(nd)
			}
			member := func(name, node string) {
				sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
				sb.Metadata.Name = name
				sb.Metadata.OwnerReferences = []api.OwnerReference{{Kind: api.KindSandboxPool, Name: "web", UID: pool.Metadata.UID}}
				sb.Spec.TemplateRef = "desk"
				api.Default(sb)
				sb.Status.Phase, sb.Status.Node = api.SandboxPending, node
				e.create(sb)
			}
			for _, m := range tt.placed {
				member(m.name, m.node)
			}
			member("web-new", "")
			e.sync()
			if _, err := p.Reconcile(e.ctx, "web-new"); err != nil {
				t.Fatal(err)
			}
			if got := e.sandbox("web-new").Status.Node; got != tt.want {
				t.Errorf("placed on %q, want %q", got, tt.want)
			}
			if tt.want != "" && len(e.events(api.KindSandbox, "web-new", "Placed")) != 1 {
				t.Error("no Placed event")
			}
		})
	}
}

// TestPlacementsInFlightCount places a pool's sandboxes with every
// placement's write held until all of them have chosen their node: the
// choices count the placements still being written, so maxPerHost holds
// on every node and the pool spreads evenly.
func TestPlacementsInFlightCount(t *testing.T) {
	const nodes, perHost = 3, 2
	e := newEnv(t)
	fs := storefault.New(e.st)
	p := NewPlacement(e.m, fs, e.log, e.clk.Now)
	pool := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}}
	pool.Metadata.Name = "web"
	pool.Spec.Replicas = nodes * perHost
	pool.Spec.MaxPerHost = perHost
	pool.Spec.Template.Spec.TemplateRef = "desk"
	api.Default(pool)
	pool = e.create(pool).(*api.SandboxPool)
	reportedNodes(e, nodes)
	// One more sandbox than there is room for: it waits.
	var names []string
	for i := range nodes*perHost + 1 {
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = fmt.Sprintf("web-%d", i)
		sb.Metadata.OwnerReferences = []api.OwnerReference{{Kind: api.KindSandboxPool, Name: "web", UID: pool.Metadata.UID}}
		sb.Spec.TemplateRef = "desk"
		api.Default(sb)
		sb.Status.Phase = api.SandboxPending
		e.create(sb)
		names = append(names, sb.Metadata.Name)
	}
	e.sync()
	var (
		chosen sync.WaitGroup
		writes atomic.Int32
	)
	chosen.Add(nodes * perHost)
	fs.Inject(storefault.Fault{Op: storefault.UpdateStatus, Kind: api.KindSandbox, Before: func(c storefault.Call) {
		if writes.Add(1) > nodes*perHost {
			t.Errorf("placement of %s written: every node already had maxPerHost (%d) in flight", c.Name, perHost)
			return
		}
		chosen.Done()
		chosen.Wait()
	}})
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Reconcile(e.ctx, name); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	per := map[string]int{}
	for _, name := range names {
		per[e.sandbox(name).Status.Node]++
	}
	for i := range nodes {
		if n := per[fmt.Sprintf("n%d", i)]; n != perHost {
			t.Errorf("node n%d holds %d of the pool, want %d (maxPerHost): %v", i, n, perHost, per)
		}
	}
	if per[""] != 1 {
		t.Errorf("%d sandboxes left unplaced, want 1: %v", per[""], per)
	}
}

// TestPlacedAsCreated: with placement beside it, the pool controller
// creates its members placed (status.node in the creation, held by the
// VM finalizer from it), spread over the nodes by maxPerHost while their
// creations are in flight, with no placement write or Placed event of
// their own; with no node to place it on, a member is created unplaced
// and without the finalizer, for placement to place later.
func TestPlacedAsCreated(t *testing.T) {
	newPool := func(e *env, replicas, perHost int) {
		pool := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}}
		pool.Metadata.Name = "web"
		pool.Spec.Replicas = replicas
		pool.Spec.MaxPerHost = perHost
		pool.Spec.Template.Spec.TemplateRef = "desk"
		api.Default(pool)
		e.create(pool)
	}
	t.Run("spread", func(t *testing.T) {
		const nodes = 3
		e := newEnv(t)
		fs := storefault.New(e.st)
		p := NewPools(e.m, fs, e.log, e.clk.Now)
		p.place = NewPlacement(e.m, fs, e.log, e.clk.Now).placeNew
		reportedNodes(e, nodes)
		newPool(e, nodes, 1)
		// Every creation waits until all have chosen their node: the
		// choices count the creations still in flight.
		var chosen sync.WaitGroup
		chosen.Add(nodes)
		fs.Inject(storefault.Fault{Op: storefault.Create, Kind: api.KindSandbox, Before: func(storefault.Call) {
			chosen.Done()
			chosen.Wait()
		}})
		for _, op := range []storefault.Op{storefault.Update, storefault.UpdateStatus, storefault.PatchStatus} {
			fs.Inject(storefault.Fault{Op: op, Kind: api.KindSandbox, Before: func(c storefault.Call) {
				t.Errorf("sandbox %s: %s after its creation", c.Name, op)
			}})
		}
		e.sync()
		if _, err := p.Reconcile(e.ctx, "web"); err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, sb := range e.members("web") {
			per[sb.Status.Node]++
			if !slices.Contains(sb.Metadata.Finalizers, api.FinalizerVM) {
				t.Errorf("sandbox %s on node %q was created without the VM finalizer", sb.Metadata.Name, sb.Status.Node)
			}
			if len(e.events(api.KindSandbox, sb.Metadata.Name, "Placed")) != 0 {
				t.Errorf("sandbox %s has a Placed event", sb.Metadata.Name)
			}
		}
		for i := range nodes {
			if n := per[fmt.Sprintf("n%d", i)]; n != 1 {
				t.Errorf("node n%d holds %d of the pool, want 1 (maxPerHost): %v", i, n, per)
			}
		}
	})
	t.Run("no node", func(t *testing.T) {
		e := newEnv(t)
		p := NewPools(e.m, e.st, e.log, e.clk.Now)
		p.place = NewPlacement(e.m, e.st, e.log, e.clk.Now).placeNew
		newPool(e, 1, 0)
		e.sync()
		if _, err := p.Reconcile(e.ctx, "web"); err != nil {
			t.Fatal(err)
		}
		members := e.members("web")
		if len(members) != 1 || members[0].Status.Node != "" || len(members[0].Metadata.Finalizers) != 0 {
			t.Fatalf("members %+v, want one unplaced, without finalizers", members)
		}
	})
}

// reportedNodes makes nodes n0…n(count-1), each reported, n(i) with
// 1000×(i+1) MB free.
func reportedNodes(e *env, count int) {
	for i := range count {
		nd := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindNode}}
		nd.Metadata.Name = fmt.Sprintf("n%d", i)
		nd.Status.Memory.FreeMB = 1000 * (i + 1)
		at := e.clk.Now()
		nd.Status.LastHeartbeat = &at
		e.create(nd)
	}
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// Placement gives each new sandbox its node (status.node) before any node
// acts on it: a node clones only the sandboxes placed on it, so no VM is
// cloned by two nodes. A pool's maxPerHost holds per node; among the nodes
// with room, the one with the fewest of the pool's sandboxes is chosen,
// then the one with the most free memory.
//
// Placements are written placementWorkers at a time: each is chosen under
// mu, counting the placements still in flight (assumed), and written
// outside it, so that a fill of many sandboxes does not wait for each
// write's round trip in turn.
type Placement struct {
	mu sync.Mutex // guards assumed, and makes each choice see the ones before
	// assumed is the node of each placement written and not yet in the
	// cache.
	assumed map[string]string
	// creating is the node and pool of each sandbox placed as it is
	// created (placeNew), until its creation is in the cache.
	creating  map[string]creation
	st        store.Interface
	log       *slog.Logger
	now       func() time.Time
	sandboxes *reconcile.Cache
	nodes     *reconcile.Cache
	pools     *reconcile.Cache
	templates *reconcile.Cache
	q         *reconcile.Queue
}

// NewPlacement registers the placement controller with m.
func NewPlacement(m *reconcile.Manager, st store.Interface, log *slog.Logger, now func() time.Time) *Placement {
	if now == nil {
		now = time.Now
	}
	p := &Placement{st: st, log: log, now: now, sandboxes: m.Cache(api.KindSandbox), nodes: m.Cache(api.KindNode), pools: m.Cache(api.KindSandboxPool),
		templates: m.Cache(api.KindTemplate), assumed: map[string]string{}, creating: map[string]creation{}}
	p.sandboxes.AddIndex(poolNodeIndex, func(o api.Object) []string {
		if pool := api.OwnerOf(o, api.KindSandboxPool); pool != "" && o.GetMeta().DeletionTimestamp == nil {
			return []string{poolNodeKey(pool, o.(*api.Sandbox).Status.Node)}
		}
		return nil
	})
	p.q = m.Register(reconcile.Controller{Name: "placement", For: api.KindSandbox, Reconciler: p, Workers: placementWorkers,
		Watches: []reconcile.Watch{{Kind: api.KindNode, Map: p.unplaced}}})
	return p
}

// poolNodeIndex holds the live members of pools by pool and node
// (poolNodeKey): a placement counts a pool's members on each node without
// going over every sandbox of the cluster, or of the pool.
const poolNodeIndex = "pool-node"

// poolNodeKey is the poolNodeIndex value of pool's members on node ("":
// none yet).
func poolNodeKey(pool, node string) string { return pool + "/" + node }

// placementWorkers is how many placements are written at once.
const placementWorkers = 8

// unplaced maps a change of a node (a new one, more room) to the sandboxes
// still waiting for one.
func (p *Placement) unplaced(api.Object) []string {
	var keys []string
	p.sandboxes.Range(func(o api.Object) bool {
		if needsNode(o.(*api.Sandbox)) {
			keys = append(keys, o.GetMeta().Name)
		}
		return true
	})
	return keys
}

func needsNode(sb *api.Sandbox) bool {
	if sb.Status.Node != "" || sb.Metadata.DeletionTimestamp != nil {
		return false
	}
	switch sb.Status.Phase {
	case "", api.SandboxPending:
		return true
	}
	return false
}

// Reconcile implements Reconciler.
func (p *Placement) Reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	o, ok := p.sandboxes.Get(name)
	if !ok || p.sandboxes.Pending(name) || !needsNode(o.(*api.Sandbox)) {
		return reconcile.Result{}, nil
	}
	sb := o.(*api.Sandbox)
	p.mu.Lock()
	if _, ok := p.creating[name]; ok {
		// Its creator placed it; the watch may bring the object before
		// the status that says where (a Kubernetes store writes it
		// second). Looked at again in case that write failed.
		p.mu.Unlock()
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	node, why := p.choose(sb)
	if node != "" {
		p.assumed[name] = node
	}
	p.mu.Unlock()
	if node == "" {
		// A node that appears or frees room asks again (its watch).
		p.log.Debug("no node for sandbox", "sandbox", name, "why", why)
		return reconcile.Result{RequeueAfter: 10 * time.Second}, nil
	}
	placed := api.DeepCopy(sb)
	placed.Status.Node = node
	out, err := p.st.UpdateStatus(ctx, placed)
	p.mu.Lock()
	if err == nil {
		// The cache has it before the assumption goes: a choice never
		// sees the placement neither way.
		p.sandboxes.Expect(out)
	}
	delete(p.assumed, name)
	p.mu.Unlock()
	if errors.Is(err, api.ErrConflict) {
		return reconcile.Result{RequeueAfter: 10 * time.Millisecond}, nil // read again once the watch brings the change
	}
	if errors.Is(err, api.ErrNotFound) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	reconcile.Event(ctx, p.st, p.log, out, api.EventNormal, "Placed", fmt.Sprintf("placed on node %s", node))
	return reconcile.Result{}, nil
}

// choose picks sb's node, or says why there is none. The caller holds
// p.mu.
func (p *Placement) choose(sb *api.Sandbox) (string, string) {
	type cand struct {
		name       string
		ofPool     int
		free       int
		notPressed bool
	}
	var cands []*cand
	byName := map[string]*cand{}
	p.nodes.Range(func(o api.Object) bool {
		n := o.(*api.Node)
		// A node's object is made before its first status (free memory
		// 0 until then): it is a candidate once it has reported.
		if n.Metadata.DeletionTimestamp != nil || nodeLost(n) || n.Status.LastHeartbeat == nil {
			return true
		}
		c := &cand{name: n.Metadata.Name, free: n.Status.Memory.FreeMB}
		pc := api.FindCondition(n.Status.Conditions, "MemoryPressure")
		c.notPressed = pc == nil || pc.Status != api.ConditionTrue
		cands = append(cands, c)
		byName[c.name] = c
		return true
	})
	if len(cands) == 0 {
		return "", "no node has reported (start hvkube serve with a backend, or hvkube node)"
	}
	pool := api.OwnerOf(sb, api.KindSandboxPool)
	maxPer := 0
	if pool != "" {
		if po, ok := p.pools.Get(pool); ok {
			maxPer = po.(*api.SandboxPool).Spec.MaxPerHost
		}
		// Its own placements count before the watch brings them, and
		// those still being written too.
		keys := make([]string, len(cands))
		for i, c := range cands {
			keys[i] = poolNodeKey(pool, c.name)
		}
		for i, n := range p.sandboxes.CountLatestIn(poolNodeIndex, keys) {
			cands[i].ofPool = n
		}
		// Members with no node written yet: placed here, or being made
		// on a node.
		p.sandboxes.RangeLatestIn(poolNodeIndex, poolNodeKey(pool, ""), func(o api.Object) bool {
			name := o.GetMeta().Name
			node := ""
			if n, ok := p.assumed[name]; ok {
				node = n
			} else if cr, ok := p.creating[name]; ok {
				node = cr.node
			}
			if c := byName[node]; c != nil {
				c.ofPool++
			}
			return true
		})
		for name, cr := range p.creating {
			if _, cached := p.sandboxes.Latest(name); !cached && cr.pool == pool {
				if c := byName[cr.node]; c != nil {
					c.ofPool++
				}
			}
		}
	}
	// A template captured from a sandbox (hvkube snapshot) is on the
	// source's node alone.
	only := ""
	if t, ok := p.templates.Get(sb.Spec.TemplateRef); ok {
		if src := t.(*api.Template).Spec.Source; src != nil {
			only = src.Node
			if byName[only] == nil {
				return "", fmt.Sprintf("template %s was captured on node %s, which is not ready", sb.Spec.TemplateRef, only)
			}
		}
	}
	kept := cands[:0]
	for _, c := range cands {
		if (maxPer == 0 || c.ofPool < maxPer) && (only == "" || c.name == only) {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 {
		return "", fmt.Sprintf("every node holds maxPerHost (%d) of pool %s", maxPer, pool)
	}
	sort.Slice(kept, func(i, j int) bool {
		a, b := kept[i], kept[j]
		if a.notPressed != b.notPressed {
			return a.notPressed
		}
		if a.ofPool != b.ofPool {
			return a.ofPool < b.ofPool
		}
		if a.free != b.free {
			return a.free > b.free
		}
		return a.name < b.name
	})
	return kept[0].name, ""
}

// placeNew chooses the node of sb, a sandbox about to be created, as
// Reconcile chooses one for a sandbox that exists, and counts it as
// placed there until done is called: after the creation, its result
// expected in the cache, or after it failed. "" is no node (none has
// room, or none has reported): the sandbox is created unplaced and
// placed later.
func (p *Placement) placeNew(sb *api.Sandbox) (node string, done func()) {
	name := sb.Metadata.Name
	p.mu.Lock()
	defer p.mu.Unlock()
	if node, _ = p.choose(sb); node == "" {
		return "", func() {}
	}
	p.creating[name] = creation{node: node, pool: api.OwnerOf(sb, api.KindSandboxPool)}
	return node, func() {
		p.mu.Lock()
		delete(p.creating, name)
		p.mu.Unlock()
	}
}

// creation is a sandbox placed as it is created.
type creation struct{ node, pool string }

// nodeLost reports whether a node is known to be gone (its Ready condition
// says NodeLost).
func nodeLost(n *api.Node) bool {
	c := api.FindCondition(n.Status.Conditions, "Ready")
	return c != nil && c.Status == api.ConditionFalse && c.Reason == ReasonNodeLost
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// ClaimsOptions size the claims benchmark.
type ClaimsOptions struct {
	Nodes   int // simulated nodes, each with a FAKE backend of its own
	PerNode int // warm sandboxes per node: the pool is Nodes×PerNode, maxPerHost PerNode
	Claims  int // agents submitted
	// Parallel is how many claims are in flight at once: each submitter
	// creates an agent, waits until it runs, then creates the next.
	Parallel int
	// HealthInterval is the sandboxes' healthCheck.intervalSeconds
	// (0: the API's default).
	HealthInterval time.Duration
	// NodeResync is how often each node's controllers reconcile all of
	// their objects again (0: the Manager's default, a minute).
	NodeResync time.Duration
	// Store opens the store (Kubernetes; SQLite when nil), StoreName
	// names it in the title.
	Store     StoreFunc
	StoreName string
	// Cleanup deletes the agents and the pool at the end (for a store
	// that outlives the benchmark).
	Cleanup bool
	Log     io.Writer
	// Command is the command line the report names.
	Command string
	// Requests, when set, returns the API requests the benchmark's
	// client has made so far: the report says how many each claim cost.
	Requests func() RequestCounts
	// ServerCPU, when set, returns the CPU time the API server (and its
	// etcd) has used so far: the report says how many claims one
	// CPU-second of it buys.
	ServerCPU func() (time.Duration, error)
	// ServerProfile, when set, is started with the claims: it profiles
	// the API server's CPU while they run (cancelled when they are done).
	ServerProfile func(ctx context.Context) error

	traceCalls bool
	// releaseWriteDelay is the nodes' Options.ReleaseWriteDelay (0: its
	// default).
	releaseWriteDelay time.Duration
}

// claimsTimeout bounds each wait of the benchmark.
const claimsTimeout = 30 * time.Minute

// Claims measures how many agents per second a cluster binds to warm
// sandboxes and starts: one store, the cluster's controllers once, and
// o.Nodes nodes in this process, each over a FAKE backend (sandboxes that
// live in memory and run nothing) holding o.PerNode warm sandboxes of one
// pool. The nodes share one watch per kind (nodeViews), each seeing only
// its own sandboxes and agents. Then o.Claims one-step workflow agents
// are created in the store (as the API's POST does, after admission), by
// o.Parallel submitters each waiting for its agent to run before the
// next; each claim's time is agent created → Running as a watch sees it.
// It checks that no sandbox is bound to two agents at once, that every
// agent completes, and in one attempt.
func Claims(ctx context.Context, o ClaimsOptions) (*Report, error) {
	rep, _, err := runClaims(ctx, o)
	return rep, err
}

// runClaims is Claims, with what the checker found.
func runClaims(ctx context.Context, o ClaimsOptions) (*Report, *checked, error) {
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.Store == nil {
		o.Store = openSQLite
	}
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, format+"\n", args...) }
	log := quietLogger(o.Log)
	dir, err := os.MkdirTemp("", "hvkube-bench-claims-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	st, closeStore, err := o.Store(ctx, dir, log)
	if err != nil {
		return nil, nil, err
	}
	defer closeStore()
	calls := newCallCounter(st)
	st = calls
	counted := calls.(interface {
		reset()
		snapshot() map[string]int64
	})

	// Everything lives until the deferred stops, not until ctx ends.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	mgr := reconcile.NewManager(st, log, 0)
	controller.RegisterAll(mgr, st, log, nil)
	if err := mgr.Start(runCtx); err != nil {
		return nil, nil, err
	}
	defer mgr.Stop()

	views, err := newNodeViews(runCtx, st, api.KindTemplate, api.KindSandbox, api.KindAgent)
	if err != nil {
		return nil, nil, err
	}
	var nodes []*node.Node
	var mgrs []*reconcile.Manager
	defer func() {
		for _, m := range mgrs {
			m.Stop()
		}
		for _, nd := range nodes {
			nd.Stop()
		}
	}()
	startNode := func(i int, snap *api.Template) error {
		name := fmt.Sprintf("sim-%03d", i)
		be := fake.New(fake.Options{MemoryMB: (o.PerNode + 16) * fake.DefaultTemplateMemoryMB * 2})
		if snap != nil {
			// The template's snapshot is on the host before its node
			// starts, as if built there: otherwise every node would
			// build it and write the template's one status.
			if _, err := be.BuildTemplate(runCtx, templateSpec(snap), func(string) {}); err != nil {
				return fmt.Errorf("node %s: %w", name, err)
			}
		}
		v := views.view(name)
		nd := node.New(node.Options{Store: v, Backend: be, Name: name, Logger: log, DataDir: filepath.Join(dir, name), WaitForPlacement: true,
			ReleaseWriteDelay: o.releaseWriteDelay})
		if err := nd.Start(runCtx); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		nodes = append(nodes, nd)
		m := reconcile.NewManager(v, log, o.NodeResync)
		nd.Register(m)
		if err := m.Start(runCtx); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		mgrs = append(mgrs, m)
		return nil
	}

	// The first node builds the template; the others start with it.
	if err := startNode(0, nil); err != nil {
		return nil, nil, err
	}
	if _, err := st.Create(ctx, benchTemplate("bench", "linux-desktop")); err != nil {
		return nil, nil, err
	}
	var tpl *api.Template
	if err := waitFor(ctx, 5*time.Minute, func() (bool, error) {
		t, err := st.Get(ctx, api.KindTemplate, "bench")
		if err != nil {
			return false, err
		}
		tpl = t.(*api.Template)
		return tpl.Status.Phase == api.TemplateReady && tpl.Status.Snapshot != nil, nil
	}); err != nil {
		return nil, nil, fmt.Errorf("template: %w", err)
	}
	logf("starting %d nodes (fake backends)…", o.Nodes)
	for i := 1; i < o.Nodes; i++ {
		if err := startNode(i, tpl); err != nil {
			return nil, nil, err
		}
	}

	size := o.Nodes * o.PerNode
	logf("filling a pool of %d sandboxes (%d per node)…", size, o.PerNode)
	pool := benchPool("bench", "bench", size)
	pool.Spec.MaxPerHost = o.PerNode
	if o.HealthInterval > 0 {
		pool.Spec.Template.Spec.HealthCheck.IntervalSeconds = int(o.HealthInterval / time.Second)
	}
	fillReqsBefore := o.requests()
	fillStart := time.Now()
	if _, err := st.Create(ctx, pool); err != nil {
		return nil, nil, err
	}
	lastLog := time.Now()
	var firstWarm time.Duration
	if err := waitFor(ctx, claimsTimeout, func() (bool, error) {
		time.Sleep(500 * time.Millisecond) // a GET of the pool every half second at most
		p, err := st.Get(ctx, api.KindSandboxPool, "bench")
		if err != nil {
			return false, err
		}
		s := p.(*api.SandboxPool).Status
		if s.Warm > 0 && firstWarm == 0 {
			firstWarm = time.Since(fillStart)
		}
		if time.Since(lastLog) >= 10*time.Second {
			logf("  %d of %d warm after %s", s.Warm, size, time.Since(fillStart).Round(time.Second))
			lastLog = time.Now()
		}
		return s.Warm >= size && s.Busy == 0, nil
	}); err != nil {
		return nil, nil, fmt.Errorf("pool: waiting for %d warm sandboxes: %w", size, err)
	}
	fill := time.Since(fillStart)
	fillReqs := o.requests().since(fillReqsBefore)
	logf("pool filled in %s", fill.Round(time.Millisecond))

	// The checker follows agents and sandboxes from a watch of their
	// own, as a client of the cluster would.
	chk := newChecker(o.Claims, size)
	var runMu sync.Mutex // guards running
	running := map[string]chan time.Time{}
	chk.onRunning = func(name string, at time.Time) {
		runMu.Lock()
		defer runMu.Unlock()
		if ch := running[name]; ch != nil {
			ch <- at // buffered: one send, never blocks
		}
	}
	wctx, stopWatch := context.WithCancel(runCtx)
	defer stopWatch()
	if err := chk.watch(wctx, st, api.KindAgent, api.KindSandbox); err != nil {
		return nil, nil, err
	}

	agents := make([]*api.Agent, o.Claims)
	for i := range agents {
		agents[i] = claimAgent(agentName(i))
	}
	logf("claiming: %d agents, %d at once…", o.Claims, o.Parallel)
	reqsBefore := o.requests()
	cpuBefore, cpuErr := o.serverCPU()
	counted.reset()
	var next atomic.Int64
	var lastRunning atomic.Int64 // since start, in ns
	errc := make(chan error, o.Parallel)
	start := time.Now()
	chk.begin(start)
	profiled := make(chan error, 1)
	pctx, stopProfile := context.WithCancel(runCtx)
	defer stopProfile()
	if o.ServerProfile != nil {
		go func() { profiled <- o.ServerProfile(pctx) }()
	} else {
		profiled <- nil
	}
	for w := 0; w < o.Parallel; w++ {
		go func() {
			errc <- func() error {
				for {
					i := int(next.Add(1)) - 1
					if i >= o.Claims {
						return nil
					}
					a := agents[i]
					ch := make(chan time.Time, 1)
					runMu.Lock()
					running[a.Metadata.Name] = ch
					runMu.Unlock()
					chk.created(a.Metadata.Name, time.Now())
					if _, err := st.Create(ctx, a); err != nil {
						return fmt.Errorf("create agent %s: %w", a.Metadata.Name, err)
					}
					select {
					case at := <-ch:
						for d := int64(at.Sub(start)); ; {
							old := lastRunning.Load()
							if d <= old || lastRunning.CompareAndSwap(old, d) {
								break
							}
						}
					case <-time.After(5 * time.Minute):
						cur, err := st.Get(ctx, api.KindAgent, a.Metadata.Name)
						if err != nil {
							return fmt.Errorf("agent %s not running after 5m: %w", a.Metadata.Name, err)
						}
						s := cur.(*api.Agent).Status
						return fmt.Errorf("agent %s not running after 5m: %s on sandbox %q of node %q (%s: %s)", a.Metadata.Name, s.Phase, s.Sandbox, s.Node, s.Reason, s.Message)
					case <-ctx.Done():
						return ctx.Err()
					}
				}
			}()
		}()
	}
	var claimErr error
	for w := 0; w < o.Parallel; w++ {
		if err := <-errc; err != nil && claimErr == nil {
			claimErr = err
			next.Store(int64(o.Claims)) // stop the others
		}
	}
	stopProfile()
	if err := <-profiled; err != nil {
		logf("API server profile: %v", err)
	}
	if claimErr != nil {
		return nil, nil, claimErr
	}
	claimedIn := time.Duration(lastRunning.Load())
	reqs := o.requests().since(reqsBefore)
	cpuAfter, err := o.serverCPU()
	if cpuErr == nil {
		cpuErr = err
	}

	logf("%d agents running after %s (%.0f/s); waiting for them to complete…", o.Claims, claimedIn.Round(time.Millisecond), float64(o.Claims)/claimedIn.Seconds())
	if err := chk.waitFinished(ctx, claimsTimeout, func(done, failed, sched int) {
		logf("  %d scheduled, %d completed, %d failed", sched, done, failed)
	}); err != nil {
		return nil, nil, err
	}
	// Releases that land after the last completion still count for the
	// checks.
	time.Sleep(2 * time.Second)
	callCounts := counted.snapshot()
	allReqs := o.requests().since(reqsBefore)
	stopWatch()
	chk.wait()
	res, err := chk.result()
	if err != nil {
		return nil, nil, err
	}
	res.calls = callCounts
	if err := chk.checkStore(ctx, st, o.Claims); err != nil {
		res.problems = append(res.problems, err.Error())
	}

	storeName := o.StoreName
	if storeName == "" {
		storeName = "sqlite"
	}
	rep := &Report{Title: fmt.Sprintf("Claims on a simulated cluster: %d nodes × %d warm sandboxes (fake backend), %s store", o.Nodes, o.PerNode, storeName), Command: o.Command}
	var toRun Result
	for _, r := range res.rows {
		switch r.Name {
		case "agent created → Running":
			r.Name = fmt.Sprintf("agent created → Running on a warm sandbox, %d at once", o.Parallel)
			toRun = r
		}
		rep.Results = append(rep.Results, r)
	}
	rate := float64(o.Claims) / claimedIn.Seconds()
	target := "not met"
	switch {
	case rate >= 1000:
		target = "met, and the stretch goal of 1000/s"
	case rate >= 300:
		target = "met (stretch 1000/s not)"
	}
	rep.Facts = append(rep.Facts,
		fmt.Sprintf("claims: %.0f/s (%d agents created → Running in %s, %d at once; target ≥ 300/s, %s)", rate, o.Claims, fmtDur(claimedIn), o.Parallel, target),
		fmt.Sprintf("agent created → Running, p50 / p95 / p99: %s / %s / %s", fmtDur(toRun.Percentile(50)), fmtDur(toRun.Percentile(95)), fmtDur(toRun.Percentile(99))),
		fmt.Sprintf("fill: a pool of %d (maxPerHost %d on %d nodes) warm %s after it was created (first warm after %s): %.0f sandboxes/s", size, o.PerNode, o.Nodes, fmtDur(fill), fmtDur(firstWarm), float64(size)/fill.Seconds()),
		fmt.Sprintf("agents completed: %d of %d (%d failed); double binds: %d (a sandbox bound to a second agent while the first held it, or its claim overwritten; target 0); agents claimed on two sandboxes at once: %d", res.completed, o.Claims, res.failed, res.doubleBinds, res.twoClaims),
	)
	rep.Facts = append(rep.Facts, "store calls per claim, from the first claim until the last release: "+perClaim(callCounts, o.Claims))
	if o.ServerCPU != nil {
		if cpuErr != nil {
			rep.Facts = append(rep.Facts, "API server CPU: not measured: "+cpuErr.Error())
		} else if used := cpuAfter - cpuBefore; used > 0 {
			rep.Facts = append(rep.Facts, fmt.Sprintf("API server CPU (kube-apiserver and etcd) from the first claim until the last agent ran: %.1f CPU-seconds in %s (%.2f cores): %.0f claims per API-server CPU-second",
				used.Seconds(), fmtDur(claimedIn), used.Seconds()/claimedIn.Seconds(), float64(o.Claims)/used.Seconds()))
		}
	}
	if len(fillReqs) > 0 {
		rep.Facts = append(rep.Facts, fmt.Sprintf("API requests of all clients during the fill, from the pool's creation until it was warm: %s", fillReqs.per(size, "sandbox")))
	}
	if len(reqs) > 0 {
		rep.Facts = append(rep.Facts, fmt.Sprintf("API requests of all clients (controllers, nodes, submitters, checker) from the first claim until the last agent ran: %s", reqs.perClaim(o.Claims)))
		// Events are queued, never waited for: many are written after
		// the last agent ran.
		rep.Facts = append(rep.Facts, fmt.Sprintf("Event writes from the first claim until 2 s after the last release: %.1f per claim (%.1f until the last agent ran)",
			float64(allReqs.events())/float64(o.Claims), float64(reqs.events())/float64(o.Claims)))
	}
	for _, f := range res.failures {
		rep.Facts = append(rep.Facts, "failed: "+f)
	}
	for _, p := range res.problems {
		rep.Facts = append(rep.Facts, "problem: "+p)
	}
	if o.Cleanup {
		logf("deleting the agents and the pool…")
		if err := cleanupClaims(ctx, st, o.Claims); err != nil {
			rep.Facts = append(rep.Facts, "cleanup: "+err.Error())
		}
	}
	return rep, res, nil
}

// templateSpec is what a node asks its backend to build for t.
func templateSpec(t *api.Template) backend.TemplateSpec {
	spec := backend.TemplateSpec{ID: t.Status.Snapshot.ID, GuestOS: t.Spec.Guest.OS, CPU: t.Spec.Resources.CPU, MemoryMB: t.Spec.Resources.MemoryMB,
		Resolution: t.Spec.Display.Resolution, NetworkMode: t.Spec.Network.Mode}
	if t.Spec.QEMU != nil {
		spec.Image = *t.Spec.QEMU
	}
	return spec
}

// claimAgent is a one-step workflow agent on the bench pool, admitted as
// the API admits one: defaulted, with its run finalizer, validated.
func claimAgent(name string) *api.Agent {
	a := stepAgent(name, "bench", "b0")
	api.Default(a)
	if !slices.Contains(a.Metadata.Finalizers, api.FinalizerRun) {
		a.Metadata.Finalizers = append(a.Metadata.Finalizers, api.FinalizerRun)
	}
	return a
}

// cleanupClaims deletes the agents, the pool and the template, and waits
// until the sandboxes are gone (their nodes remove their finalizers).
func cleanupClaims(ctx context.Context, st store.Interface, agents int) error {
	for i := 0; i < agents; i++ {
		if _, _, err := st.Delete(ctx, api.KindAgent, agentName(i), store.DeleteOptions{}); err != nil && !errors.Is(err, api.ErrNotFound) {
			return err
		}
	}
	if _, _, err := st.Delete(ctx, api.KindSandboxPool, "bench", store.DeleteOptions{}); err != nil && !errors.Is(err, api.ErrNotFound) {
		return err
	}
	err := waitFor(ctx, claimsTimeout, func() (bool, error) {
		time.Sleep(time.Second)
		items, _, err := st.List(ctx, api.KindSandbox, api.Selector{})
		return len(items) == 0, err
	})
	if err != nil {
		return fmt.Errorf("sandboxes: %w", err)
	}
	if _, _, err := st.Delete(ctx, api.KindTemplate, "bench", store.DeleteOptions{}); err != nil && !errors.Is(err, api.ErrNotFound) {
		return err
	}
	return nil
}

// serverCPU is what o.ServerCPU says so far (0 without it).
func (o ClaimsOptions) serverCPU() (time.Duration, error) {
	if o.ServerCPU == nil {
		return 0, nil
	}
	return o.ServerCPU()
}

// requests is what o.Requests counts so far (nothing without it).
func (o ClaimsOptions) requests() RequestCounts {
	if o.Requests == nil {
		return nil
	}
	return o.Requests()
}

// RequestCounts are API requests by kind of request ("GET", "PUT",
// "POST", "DELETE", "LIST", "WATCH"), those of Events prefixed "event "
// ("event POST").
type RequestCounts map[string]int64

// since is c less before.
func (c RequestCounts) since(before RequestCounts) RequestCounts {
	out := RequestCounts{}
	for k, v := range c {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// events is how many requests of c were of Events ("event POST", …).
func (c RequestCounts) events() int64 {
	var n int64
	for k, v := range c {
		if strings.HasPrefix(k, "event ") {
			n += v
		}
	}
	return n
}

// perClaim says how many requests of each kind c holds per claim.
func (c RequestCounts) perClaim(claims int) string { return c.per(claims, "claim") }

// per says how many requests of each kind c holds per one of n units.
func (c RequestCounts) per(n int, unit string) string {
	var total int64
	keys := make([]string, 0, len(c))
	for k, v := range c {
		total += v
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return int(c[b] - c[a]) })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(c[k])/float64(n)))
	}
	return fmt.Sprintf("%.1f per %s (%s)", float64(total)/float64(n), unit, strings.Join(parts, ", "))
}

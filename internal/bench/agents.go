package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/secrets"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

// ControlOptions size the control-plane benchmark on the fake backend.
type ControlOptions struct {
	Sandboxes int // the pool's size
	Agents    int // agents submitted
	// Clients is how many clients submit agents at once (default 4).
	Clients int
	Log     io.Writer
}

// Control measures the control loop at scale: a real server, SQLite store,
// controllers and node over the FAKE backend (sandboxes that live in
// memory and run nothing), a pool of o.Sandboxes warm sandboxes, and
// o.Agents one-step workflow agents submitted through the HTTP API as fast
// as o.Clients clients can. It reports how fast agents are scheduled and
// completed, checks that no sandbox was bound to two agents and no agent
// completed twice, and times GET and LIST requests of a side client while
// the load runs.
func Control(ctx context.Context, o ControlOptions) (*Report, error) {
	if o.Clients <= 0 {
		o.Clients = 4
	}
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, format+"\n", args...) }
	dir, err := os.MkdirTemp("", "hvkube-bench-control-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// Room for every sandbox under the fake's memory limit (80 %).
	be := fake.New(fake.Options{MemoryMB: (o.Sandboxes + 16) * fake.DefaultTemplateMemoryMB * 2})
	cl, err := startCluster(ctx, dir, be, nil, quietLogger(o.Log))
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	sqlite := cl.st.(*store.Store) // what it counts is SQLite's
	h := newHTTPAPI(cl.url, o.Clients+2)

	if err := h.create(ctx, "templates", benchTemplate("bench", "linux-desktop")); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, time.Minute, func() (bool, error) {
		return templateReady(ctx, h, "bench")
	}); err != nil {
		return nil, err
	}

	// The checker follows every change from the store's own watches,
	// started before the first agent exists, in commit order.
	chk := newChecker(o.Agents, o.Sandboxes)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := chk.watch(wctx, sqlite); err != nil {
		return nil, err
	}

	logf("filling a pool of %d sandboxes…", o.Sandboxes)
	fillStart := time.Now()
	if err := h.create(ctx, "sandboxpools", benchPool("bench", "bench", o.Sandboxes)); err != nil {
		return nil, err
	}
	if err := waitPoolWarm(ctx, h, "bench", o.Sandboxes, 10*time.Minute); err != nil {
		return nil, err
	}
	fill := time.Since(fillStart)
	logf("pool filled in %s", fill.Round(time.Millisecond))
	var sandboxNames []string
	for _, it := range cl.mgr.Cache(api.KindSandbox).List(api.Selector{}) {
		sandboxNames = append(sandboxNames, it.GetMeta().Name)
	}

	// Agent bodies are made before the clock starts.
	buckets := max(o.Agents/100, 1)
	bodies := make([][]byte, o.Agents)
	for i := range bodies {
		bodies[i], err = json.Marshal(stepAgent(agentName(i), "bench", fmt.Sprintf("b%03d", i%buckets)))
		if err != nil {
			return nil, err
		}
	}

	rv0, err := sqlite.Revision(ctx)
	if err != nil {
		return nil, err
	}
	logf("submitting %d agents from %d clients…", o.Agents, o.Clients)
	side := newSideClient(h, sandboxNames, buckets, o.Sandboxes)
	var submitted atomic.Int64
	sctx, stopSide := context.WithCancel(ctx)
	defer stopSide()
	sideDone := make(chan struct{})
	go func() {
		defer close(sideDone)
		side.run(sctx, func() int { return int(submitted.Load()) })
	}()
	post := Result{Name: "submit agent (POST), under load"}
	var postMu sync.Mutex
	var next atomic.Int64
	errc := make(chan error, o.Clients)
	start := time.Now()
	chk.begin(start)
	for c := 0; c < o.Clients; c++ {
		go func() {
			var mine []time.Duration
			err := func() error {
				for {
					i := int(next.Add(1)) - 1
					if i >= o.Agents {
						return nil
					}
					t := time.Now()
					if err := h.post(ctx, "/api/v1/agents", bodies[i]); err != nil {
						return fmt.Errorf("submit agent %d: %w", i, err)
					}
					mine = append(mine, time.Since(t))
					submitted.Add(1)
				}
			}()
			postMu.Lock()
			post.Samples = append(post.Samples, mine...)
			postMu.Unlock()
			errc <- err
		}()
	}
	var submitErr error
	for c := 0; c < o.Clients; c++ {
		if err := <-errc; err != nil && submitErr == nil {
			submitErr = err
			next.Store(int64(o.Agents)) // stop the others
		}
	}
	submittedIn := time.Since(start)
	if submitErr != nil {
		stopSide()
		<-sideDone
		return nil, submitErr
	}
	logf("submitted in %s (%.0f/s); waiting for them to complete…", submittedIn.Round(time.Millisecond), float64(o.Agents)/submittedIn.Seconds())
	waitErr := chk.waitFinished(ctx, 30*time.Minute, func(done, failed, sched int) {
		logf("  %d scheduled, %d completed, %d failed", sched, done, failed)
	})
	stopSide()
	<-sideDone
	if waitErr != nil {
		return nil, waitErr
	}
	// Changes that land after the last completion (releases, events)
	// still count for the checks.
	time.Sleep(2 * time.Second)
	stopWatch()
	chk.wait()
	rv1, err := sqlite.Revision(ctx)
	if err != nil {
		return nil, err
	}
	res, err := chk.result()
	if err != nil {
		return nil, err
	}
	if err := chk.checkStore(ctx, sqlite, o.Agents); err != nil {
		res.problems = append(res.problems, err.Error())
	}

	rep := &Report{Title: fmt.Sprintf("Control plane on the fake backend (%d sandboxes, %d agents)", o.Sandboxes, o.Agents)}
	rep.Results = append(rep.Results, post)
	rep.Results = append(rep.Results, res.rows...)
	rep.Results = append(rep.Results, side.results()...)
	rate := func(n int, d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f/s", float64(n)/d.Seconds())
	}
	status := "met"
	if float64(o.Agents)/res.scheduledAll.Seconds() < 1000 {
		status = "not met"
	}
	rep.Facts = append(rep.Facts,
		fmt.Sprintf("agents scheduled: %s (all %d bound to a sandbox %s after the first submission; target ≥ 1000/s, %s)", rate(o.Agents, res.scheduledAll), o.Agents, fmtDur(res.scheduledAll), status),
		fmt.Sprintf("the first %d agents (one per warm sandbox) scheduled at %s, in %s; the rest wait for a sandbox to be released", res.firstN, rate(res.firstN, res.scheduledFirstN), fmtDur(res.scheduledFirstN)),
		fmt.Sprintf("agents completed: %s (%d of %d in %s; %d failed)", rate(res.completed, res.completedAll), res.completed, o.Agents, fmtDur(res.completedAll), res.failed),
		fmt.Sprintf("agents submitted: %s over the HTTP API from %d clients (all in %s)", rate(o.Agents, submittedIn), o.Clients, fmtDur(submittedIn)),
		fmt.Sprintf("double binds: %d (a sandbox bound to a second agent while the first held it, or its claim overwritten; target 0); agents claimed on two sandboxes at once: %d; agents completed twice: %d (status) / %d (Completed events)", res.doubleBinds, res.twoClaims, res.doubleCompleted, res.doubleCompletedEvents),
		fmt.Sprintf("API latency under load, p50 / p95 / p99: %s", side.summary()),
		fmt.Sprintf("store writes per agent, submission to release: %.1f object writes and %.1f events", float64(rv1-rv0)/float64(o.Agents), float64(res.events)/float64(o.Agents)),
		fmt.Sprintf("pool of %d filled from zero in %s", o.Sandboxes, fmtDur(fill)),
	)
	for _, f := range res.failures {
		rep.Facts = append(rep.Facts, "failed: "+f)
	}
	for _, p := range res.problems {
		rep.Facts = append(rep.Facts, "problem: "+p)
	}
	rep.Command = fmt.Sprintf("hvkube bench control --sandboxes %d --agents %d", o.Sandboxes, o.Agents)
	return rep, nil
}

// cluster is a server wired as hvkube serve wires it: the store, the node
// over a backend, the controllers, and the HTTP API on a loopback port.
type cluster struct {
	st   store.API
	mgr  *reconcile.Manager
	nd   *node.Node
	url  string
	stop func()
}

// StoreFunc opens the store a benchmark's server runs on, with its data
// (SQLite's) in dataDir, and returns how to close it.
type StoreFunc func(ctx context.Context, dataDir string, log *slog.Logger) (store.API, func() error, error)

func openSQLite(ctx context.Context, dataDir string, log *slog.Logger) (store.API, func() error, error) {
	st, err := store.Open(ctx, dataDir, store.Options{Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return st, st.Close, nil
}

// startCluster starts a cluster with its data in dir. stop ends the
// server, the controllers and the node's runs, then closes the store; the
// backend is the caller's to close.
func startCluster(ctx context.Context, dir string, be backend.Backend, open StoreFunc, log *slog.Logger, more ...func(*node.Options)) (*cluster, error) {
	dataDir := filepath.Join(dir, "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	if open == nil {
		open = openSQLite
	}
	st, closeStore, err := open(ctx, dataDir, log)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeStore()
		return nil, err
	}
	key, err := authtoken.LoadOrCreate(filepath.Join(dataDir, "token.key"))
	if err != nil {
		ln.Close()
		closeStore()
		return nil, err
	}
	url := "http://" + ln.Addr().String()
	sealer, err := secrets.NewSealer(key.SecretSeed())
	if err != nil {
		ln.Close()
		closeStore()
		return nil, err
	}
	mgr := reconcile.NewManager(st, log, 0)
	opts := node.Options{Store: st, Backend: be, Name: "bench", Logger: log, DataDir: dataDir, ServerURL: url,
		Tokens: func(_ context.Context, a *api.Agent, ttl time.Duration) (string, error) {
			return key.Mint(authtoken.ForAttempt(a, a.Status.Attempts), time.Now(), ttl), nil
		},
		Env: sealer.EnvFor(st.Get)}
	for _, f := range more {
		f(&opts)
	}
	nd := node.New(opts)
	if err := nd.Start(ctx); err != nil {
		ln.Close()
		closeStore()
		return nil, err
	}
	nd.Register(mgr)
	controller.RegisterAll(mgr, st, log, nil)
	// The controllers and the server live until stop, not until ctx ends:
	// stop runs on the way out of a cancelled benchmark too.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := mgr.Start(runCtx); err != nil {
		cancel()
		nd.Stop()
		ln.Close()
		closeStore()
		return nil, err
	}
	srv := server.New(server.Options{Store: st, Logger: log, ScopedKey: key, Sealer: sealer, Sandboxes: nd, Actions: nd.Actions(), Agents: nd, Ready: mgr.Ready})
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(runCtx, ln)
	}()
	var once sync.Once
	return &cluster{st: st, mgr: mgr, nd: nd, url: url, stop: func() {
		once.Do(func() {
			cancel()
			<-served
			mgr.Stop()
			nd.Stop()
			closeStore()
		})
	}}, nil
}

// quietLogger logs warnings and errors only.
func quietLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// httpAPI is a plain HTTP client of the API with enough idle connections
// for the clients that share it, so that none opens a connection per
// request.
type httpAPI struct {
	base string
	hc   *http.Client
}

func newHTTPAPI(base string, conns int) *httpAPI {
	tr := &http.Transport{MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns * 2, IdleConnTimeout: time.Minute}
	return &httpAPI{base: base, hc: &http.Client{Transport: tr}}
}

// do sends a request and reads the answer into out (when not nil); an
// answer that is not 2xx is an error.
func (h *httpAPI) do(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		err := fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
		if resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w: %w", err, api.ErrNotFound)
		}
		return err
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

func (h *httpAPI) post(ctx context.Context, path string, body []byte) error {
	return h.do(ctx, http.MethodPost, path, body, nil)
}

func (h *httpAPI) get(ctx context.Context, path string, out any) error {
	return h.do(ctx, http.MethodGet, path, nil, out)
}

// create posts o to /api/v1/RESOURCE.
func (h *httpAPI) create(ctx context.Context, resource string, o api.Object) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return h.post(ctx, "/api/v1/"+resource, b)
}

// remove deletes an object; a missing one is fine.
func (h *httpAPI) remove(ctx context.Context, resource, name string) error {
	err := h.do(ctx, http.MethodDelete, "/api/v1/"+resource+"/"+name, nil, nil)
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	return err
}

func benchTemplate(name, image string) *api.Template {
	t := &api.Template{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindTemplate}}
	t.Metadata.Name = name
	t.Spec.QEMU = &api.QEMUImage{Image: image}
	api.Default(t)
	return t
}

// benchPool is a pool of n sandboxes of template tpl that keeps its size:
// no scaling with the queue.
func benchPool(name, tpl string, n int) *api.SandboxPool {
	p := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}}
	p.Metadata.Name = name
	p.Spec.Replicas = n
	p.Spec.Template.Metadata.Labels = map[string]string{"pool": name}
	p.Spec.Template.Spec.TemplateRef = tpl
	api.Default(p)
	return p
}

// stepAgent is a one-step workflow agent on pool.
func stepAgent(name, pool, bucket string) *api.Agent {
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name = name
	a.Metadata.Labels = map[string]string{"bucket": bucket}
	a.Spec.SandboxSelector = &api.SandboxSelector{MatchLabels: map[string]string{"pool": pool}}
	a.Spec.Type = "workflow"
	a.Spec.Task.Steps = []api.Action{{Action: "mouse_move", Coordinate: []int{1, 1}}}
	return a
}

func agentName(i int) string { return fmt.Sprintf("agent-%06d", i) }

// waitFor polls cond every 20 ms until it holds, fails, or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func templateReady(ctx context.Context, h *httpAPI, name string) (bool, error) {
	var t api.Template
	if err := h.get(ctx, "/api/v1/templates/"+name, &t); err != nil {
		return false, err
	}
	if t.Status.Phase == api.TemplateFailed {
		return false, fmt.Errorf("template %s failed: %s", name, t.Status.Message)
	}
	return t.Status.Phase == api.TemplateReady, nil
}

// waitPoolWarm waits until pool has n sandboxes warm: ready, idle and not
// running.
func waitPoolWarm(ctx context.Context, h *httpAPI, pool string, n int, timeout time.Duration) error {
	err := waitFor(ctx, timeout, func() (bool, error) {
		var p api.SandboxPool
		if err := h.get(ctx, "/api/v1/sandboxpools/"+pool, &p); err != nil {
			return false, err
		}
		return p.Status.Warm >= n && p.Status.Busy == 0, nil
	})
	if err != nil {
		return fmt.Errorf("pool %s: waiting for %d warm sandboxes: %w", pool, n, err)
	}
	return nil
}

// checker follows agents, sandboxes and events in commit order: when
// agents are scheduled and completed, whether a sandbox is ever bound to a
// second agent while the first holds it, and whether an agent completes
// twice.
type checker struct {
	want, firstN int

	mu              sync.Mutex // guards the following fields
	changed         chan struct{}
	start           time.Time
	agents          map[string]*seenAgent
	holder          map[string]string // sandbox -> the agent bound to it (agent stream)
	claims          map[string]string // sandbox -> status.currentAgent (sandbox stream)
	claimOf         map[string]string // agent -> the sandbox last claimed for it
	scheduled       []time.Duration   // since start, in the order agents were scheduled
	completed       []time.Duration
	completedEvents map[string]int
	failures        map[string]string // agent -> reason and message of its failure
	finished        int               // agents completed or failed
	events          int               // events recorded since start
	doubleBinds     []string
	twoClaims       []string
	// released maps an agent that finished with its sandbox released
	// (status.releasedSandbox) to that sandbox and the version that said
	// so; overtaken holds the claims that replaced an agent's claim
	// before the agent stream showed that release, to check once it
	// does (the two streams keep no order between them).
	released  map[string]releasedAt
	overtaken map[string][]overtake
	watchErr  error
	wg        sync.WaitGroup

	// eventsWatched says whether events are followed (the Completed
	// events are checked only then).
	eventsWatched bool
	// onRunning, when set, hears of each agent the first time it is seen
	// Running (or finished, if its Running was not seen), under mu: it
	// must not block.
	onRunning func(name string, at time.Time)
}

type seenAgent struct {
	phase, sandbox string
	created        time.Time
	scheduled      time.Time // when first seen claimed (or Scheduled, or later)
	running        time.Time
	completed      time.Time
	completions    int
	finished       bool // completed or failed, once
	heard          bool // onRunning called
}

func newChecker(want, sandboxes int) *checker {
	return &checker{want: want, firstN: min(want, sandboxes), changed: make(chan struct{}),
		agents: map[string]*seenAgent{}, holder: map[string]string{}, claims: map[string]string{},
		claimOf: map[string]string{}, completedEvents: map[string]int{}, failures: map[string]string{},
		released: map[string]releasedAt{}, overtaken: map[string][]overtake{}}
}

// begin sets the time the measured load starts.
func (c *checker) begin(t time.Time) {
	c.mu.Lock()
	c.start = t
	c.mu.Unlock()
}

// created sets the time agent name was created, before its first change
// is seen: a Kubernetes creationTimestamp has whole seconds only.
func (c *checker) created(name string, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.agents[name] == nil {
		c.agents[name] = &seenAgent{created: t}
	}
}

// watch starts following the store: agents, sandboxes and events, or the
// kinds given.
func (c *checker) watch(ctx context.Context, st store.Interface, kinds ...string) error {
	if len(kinds) == 0 {
		kinds = []string{api.KindAgent, api.KindSandbox, api.KindEvent}
	}
	c.eventsWatched = slices.Contains(kinds, api.KindEvent)
	for _, kind := range kinds {
		items, w, err := st.ListAndWatch(ctx, kind, api.Selector{})
		if err != nil {
			return err
		}
		for _, it := range items {
			c.apply(store.Added, it)
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for ev := range w.Events() {
				c.apply(ev.Type, ev.Object)
			}
			if err := w.Err(); err != nil {
				c.mu.Lock()
				c.watchErr = fmt.Errorf("the checker's watch of %s ended: %w", kind, err)
				c.mu.Unlock()
				c.notify()
			}
		}()
	}
	return nil
}

// wait waits for the watches to end (after their context is cancelled).
func (c *checker) wait() { c.wg.Wait() }

func (c *checker) notify() {
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

func bound(phase, sandbox string) bool {
	return (phase == api.AgentScheduled || phase == api.AgentRunning) && sandbox != ""
}

func (c *checker) apply(typ string, o api.Object) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch x := o.(type) {
	case *api.Agent:
		c.applyAgent(typ, x, now)
	case *api.Sandbox:
		c.applySandbox(typ, x, now)
	case *api.Event:
		if !c.start.IsZero() {
			c.events++
		}
		if x.InvolvedObject.Kind == api.KindAgent && x.Reason == "Completed" {
			c.completedEvents[x.InvolvedObject.Name]++
		}
	}
}

func (c *checker) applyAgent(typ string, a *api.Agent, now time.Time) {
	name := a.Metadata.Name
	s := c.agents[name]
	if s == nil {
		s = &seenAgent{created: a.Metadata.CreationTimestamp}
		c.agents[name] = s
	}
	phase, sandbox := a.Status.Phase, a.Status.Sandbox
	if typ == store.Deleted {
		phase, sandbox = "", ""
	}
	wasBound, isBound := bound(s.phase, s.sandbox), bound(phase, sandbox)
	if wasBound && (!isBound || s.sandbox != sandbox) && c.holder[s.sandbox] == name {
		delete(c.holder, s.sandbox)
	}
	if isBound && !(wasBound && s.sandbox == sandbox) {
		if h := c.holder[sandbox]; h != "" && h != name {
			c.doubleBinds = append(c.doubleBinds, fmt.Sprintf("sandbox %s bound to agent %s while agent %s held it", sandbox, name, h))
		}
		c.holder[sandbox] = name
	}
	switch phase {
	case api.AgentScheduled, api.AgentRunning, api.AgentCompleted, api.AgentFailed:
		if s.scheduled.IsZero() {
			s.scheduled = now
			c.scheduled = append(c.scheduled, now.Sub(c.start))
		}
	}
	if phase == api.AgentRunning && s.running.IsZero() {
		s.running = now
	}
	if c.onRunning != nil && !s.heard && (phase == api.AgentRunning || phase == api.AgentCompleted || phase == api.AgentFailed) {
		// A run the watch saw start, or only end (the two writes came
		// too close together for one of them to be seen).
		s.heard = true
		c.onRunning(name, now)
	}
	if phase == api.AgentCompleted && s.phase != api.AgentCompleted {
		s.completions++
		if s.completed.IsZero() {
			s.completed = now
			c.completed = append(c.completed, now.Sub(c.start))
		}
	}
	if phase == api.AgentFailed && s.phase != api.AgentFailed {
		c.failures[name] = a.Status.Reason + ": " + a.Status.Message
	}
	if r := a.Status.ReleasedSandbox; r != "" && (phase == api.AgentCompleted || phase == api.AgentFailed) {
		if _, ok := c.released[name]; !ok {
			c.released[name] = releasedAt{sandbox: r, rv: a.Metadata.ResourceVersion}
		}
	}
	if typ == store.Deleted || phase == api.AgentCompleted || phase == api.AgentFailed {
		// The agent's end, which says whether it released the sandboxes
		// claimed from it since.
		for _, o := range c.overtaken[name] {
			if rel, ok := c.released[name]; !ok || rel.sandbox != o.sandbox || !before(rel.rv, o.rv) {
				c.doubleBinds = append(c.doubleBinds, fmt.Sprintf("the claim on sandbox %s went from agent %s to agent %s", o.sandbox, name, o.to))
			}
		}
		delete(c.overtaken, name)
	}
	finished := phase == api.AgentCompleted || phase == api.AgentFailed
	if finished && !s.finished {
		s.finished = true
		c.finished++
		if c.finished == c.want {
			close(c.changed)
			c.changed = make(chan struct{})
		}
	}
	s.phase, s.sandbox = phase, sandbox
}

// releasedAt is a sandbox an agent's outcome released, and that
// outcome's resourceVersion.
type releasedAt struct{ sandbox, rv string }

// overtake is a claim that replaced an agent's: of sandbox, for agent to,
// at resourceVersion rv.
type overtake struct{ sandbox, to, rv string }

// before reports whether resourceVersion a was written before b, when
// both are numbers (both stores number their writes in one sequence);
// true when they are not.
func before(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 != nil || err2 != nil || x < y
}

func (c *checker) applySandbox(typ string, sb *api.Sandbox, now time.Time) {
	name := sb.Metadata.Name
	cur := sb.Status.CurrentAgent
	if typ == store.Deleted {
		cur = ""
	}
	old := c.claims[name]
	if old != "" && cur != "" && old != cur {
		// A claim may replace that of an agent whose outcome released
		// the sandbox (agentstate.Released), written before it.
		rel, ok := c.released[old]
		switch {
		case !ok:
			c.overtaken[old] = append(c.overtaken[old], overtake{sandbox: name, to: cur, rv: sb.Metadata.ResourceVersion})
		case rel.sandbox != name || !before(rel.rv, sb.Metadata.ResourceVersion):
			c.doubleBinds = append(c.doubleBinds, fmt.Sprintf("the claim on sandbox %s went from agent %s to agent %s", name, old, cur))
		}
	}
	if cur != "" && cur != old {
		if other := c.claimOf[cur]; other != "" && other != name && c.claims[other] == cur {
			c.twoClaims = append(c.twoClaims, fmt.Sprintf("agent %s claimed sandbox %s while its claim on %s stood", cur, name, other))
		}
		c.claimOf[cur] = name
		// A claim is the agent's binding: its node starts it from there.
		if s := c.agents[cur]; s != nil && s.scheduled.IsZero() {
			s.scheduled = now
			c.scheduled = append(c.scheduled, now.Sub(c.start))
		}
	}
	c.claims[name] = cur
}

// waitFinished waits until every agent has completed or failed, reporting
// progress every ten seconds.
func (c *checker) waitFinished(ctx context.Context, timeout time.Duration, progress func(done, failed, scheduled int)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		c.mu.Lock()
		done, failed, sched, finished := len(c.completed), len(c.failures), len(c.scheduled), c.finished
		err, ch := c.watchErr, c.changed
		c.mu.Unlock()
		switch {
		case err != nil:
			return err
		case finished >= c.want:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%d of %d agents completed, %d failed (%d scheduled) after %s", done, c.want, failed, sched, timeout)
		case <-tick.C:
			progress(done, failed, sched)
		case <-ch:
		}
	}
}

// checked is what the checker found.
type checked struct {
	rows                                   []Result
	scheduledAll, scheduledFirstN          time.Duration
	completedAll                           time.Duration
	firstN, events, completed, failed      int
	failures                               []string
	doubleBinds, twoClaims                 int
	doubleCompleted, doubleCompletedEvents int
	problems                               []string
	// calls are the store's calls by operation and kind ("Get Sandbox"),
	// from the first claim until the last release (Claims).
	calls map[string]int64
}

func (c *checker) result() (*checked, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watchErr != nil {
		return nil, c.watchErr
	}
	if len(c.scheduled) < c.want || len(c.completed) == 0 {
		return nil, fmt.Errorf("%d scheduled, %d completed of %d", len(c.scheduled), len(c.completed), c.want)
	}
	for old, os := range c.overtaken {
		// Claims that replaced an agent's whose release never showed.
		for _, o := range os {
			c.doubleBinds = append(c.doubleBinds, fmt.Sprintf("the claim on sandbox %s went from agent %s to agent %s", o.sandbox, old, o.to))
		}
	}
	c.overtaken = map[string][]overtake{}
	r := &checked{firstN: c.firstN, doubleBinds: len(c.doubleBinds), twoClaims: len(c.twoClaims), events: c.events, completed: len(c.completed), failed: len(c.failures)}
	r.scheduledAll = c.scheduled[c.want-1]
	r.scheduledFirstN = c.scheduled[c.firstN-1]
	r.completedAll = c.completed[len(c.completed)-1]
	// Failures grouped by reason, with an example each.
	byReason := map[string][]string{}
	for name, msg := range c.failures {
		reason, _, _ := strings.Cut(msg, ":")
		byReason[reason] = append(byReason[reason], name+" ("+msg+")")
	}
	for reason, list := range byReason {
		sort.Strings(list)
		r.failures = append(r.failures, fmt.Sprintf("%d agents failed with %s, e.g. %s", len(list), reason, list[0]))
	}
	toSched := Result{Name: "agent created → claimed (seen by a watch)"}
	toRun := Result{Name: "agent created → Running"}
	toDone := Result{Name: "agent created → Completed"}
	for name, s := range c.agents {
		toSched.Samples = append(toSched.Samples, s.scheduled.Sub(s.created))
		if !s.running.IsZero() {
			toRun.Samples = append(toRun.Samples, s.running.Sub(s.created))
		}
		if !s.completed.IsZero() {
			toDone.Samples = append(toDone.Samples, s.completed.Sub(s.created))
		}
		if s.completions > 1 {
			r.doubleCompleted++
			r.problems = append(r.problems, fmt.Sprintf("agent %s completed %d times", name, s.completions))
		}
		if n := c.completedEvents[name]; c.eventsWatched && (n > 1 || (n == 0 && !s.completed.IsZero())) {
			if n > 1 {
				r.doubleCompletedEvents++
			}
			r.problems = append(r.problems, fmt.Sprintf("agent %s has %d Completed events", name, n))
		}
	}
	r.rows = []Result{toSched, toRun, toDone}
	r.problems = append(r.problems, firstFew(c.doubleBinds, 5)...)
	r.problems = append(r.problems, firstFew(c.twoClaims, 5)...)
	sort.Strings(r.problems)
	if len(r.problems) > 20 {
		r.problems = append(r.problems[:20], fmt.Sprintf("… and %d more", len(r.problems)-20))
	}
	return r, nil
}

// checkStore looks at the agents as stored at the end: each completed, in
// one attempt, with a sandbox recorded.
func (c *checker) checkStore(ctx context.Context, st store.Interface, want int) error {
	items, _, err := st.List(ctx, api.KindAgent, api.Selector{})
	if err != nil {
		return err
	}
	var bad []string
	for _, it := range items {
		a := it.(*api.Agent)
		if a.Status.Phase != api.AgentCompleted || a.Status.Attempts != 1 {
			bad = append(bad, fmt.Sprintf("%s (%s, %d attempts)", a.Metadata.Name, a.Status.Phase, a.Status.Attempts))
		}
	}
	switch {
	case len(items) != want:
		return fmt.Errorf("the store holds %d agents, want %d", len(items), want)
	case len(bad) > 0:
		return fmt.Errorf("%d agents not completed in one attempt: %s", len(bad), strings.Join(firstFew(bad, 5), ", "))
	}
	return nil
}

func firstFew(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string(nil), s[:n]...), fmt.Sprintf("… and %d more", len(s)-n))
}

// sideClient times GET and LIST requests, one at a time with a short
// pause between them, as a dashboard or a watching user would make them.
type sideClient struct {
	h         *httpAPI
	sandboxes []string
	buckets   int
	pool      int
	ops       []*Result
}

func newSideClient(h *httpAPI, sandboxes []string, buckets, pool int) *sideClient {
	return &sideClient{h: h, sandboxes: sandboxes, buckets: buckets, pool: pool, ops: []*Result{
		{Name: "GET agent, under load"},
		{Name: "GET sandbox, under load"},
		{Name: "LIST agents by label (1 in " + fmt.Sprint(buckets) + "), under load"},
		{Name: fmt.Sprintf("LIST sandboxes of the pool (all %d), under load", pool)},
	}}
}

// run makes requests until ctx ends; submitted says how many agents exist.
func (s *sideClient) run(ctx context.Context, submitted func() int) {
	for i := 0; ctx.Err() == nil; i++ {
		op := i % len(s.ops)
		var path string
		switch op {
		case 0:
			n := submitted()
			if n == 0 {
				time.Sleep(time.Millisecond)
				continue
			}
			path = "/api/v1/agents/" + agentName(rand.IntN(n))
		case 1:
			path = "/api/v1/sandboxes/" + s.sandboxes[rand.IntN(len(s.sandboxes))]
		case 2:
			path = fmt.Sprintf("/api/v1/agents?labelSelector=bucket%%3Db%03d", rand.IntN(s.buckets))
		case 3:
			path = "/api/v1/sandboxes?labelSelector=pool%3Dbench"
		}
		t := time.Now()
		err := s.h.get(ctx, path, nil)
		d := time.Since(t)
		if err == nil {
			s.ops[op].Samples = append(s.ops[op].Samples, d)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *sideClient) results() []Result {
	out := make([]Result, len(s.ops))
	for i, r := range s.ops {
		out[i] = *r
	}
	return out
}

// summary gives p50 / p95 / p99 of GET and of LIST requests.
func (s *sideClient) summary() string {
	var get, list Result
	for i, r := range s.ops {
		if i < 2 {
			get.Samples = append(get.Samples, r.Samples...)
		} else {
			list.Samples = append(list.Samples, r.Samples...)
		}
	}
	f := func(r Result) string {
		return fmt.Sprintf("%s / %s / %s over %d requests", fmtDur(r.Percentile(50)), fmtDur(r.Percentile(95)), fmtDur(r.Percentile(99)), len(r.Samples))
	}
	return "GET " + f(get) + "; LIST " + f(list)
}

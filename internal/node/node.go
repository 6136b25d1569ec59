// Package node is the part of hvkube that owns the VMs of one host, as a
// kubelet owns its pods: it builds template snapshots here, reconciles the
// sandboxes whose status names this node against the backend, runs the
// agents bound to them, and serves the sandbox operations of the API
// (pause, screen, input, exec, …). Everything it knows of the cluster it
// reads from the store; everything it does to VMs goes through the
// backend.
package node

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/hostpath"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/secrets"
	"github.com/hvkube/hvkube/internal/store"
)

// Options configure a Node.
type Options struct {
	Store   store.Interface
	Backend backend.Backend
	// Name is this node's name, recorded in the status of the sandboxes
	// and agents it runs (default: the host name).
	Name string
	// DefaultTemplate is used by sandboxes that name no templateRef.
	DefaultTemplate string
	Logger          *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// DataDir keeps the agents' logs, screenshots and artifacts (under
	// agents/NAME/ATTEMPT).
	DataDir string
	// ServerURL is the API's address, given to custom agents.
	ServerURL string
	// ServerCAFile is the authority the API's certificate is checked by
	// (when not the system's), given to custom agents as HVKUBE_CA_FILE
	// and NODE_EXTRA_CA_CERTS.
	ServerCAFile string
	// Tokens gets a token for the running attempt of a custom agent
	// that reaches only that attempt's agent and sandbox, valid for ttl
	// (minted in this process, or asked of the API servers by a node
	// that holds no key); nil gives none.
	Tokens func(ctx context.Context, a *api.Agent, ttl time.Duration) (string, error)
	// Env resolves the session variables of a sandbox (spec.env and
	// spec.envFrom), and of an agent's claim of it when a is not nil
	// (env.go): in this process where the key is, or asked of the API
	// servers by a node that holds none. Nil refuses them.
	Env func(ctx context.Context, sb *api.Sandbox, a *api.Agent) (secrets.Env, error)
	// HostCommands lets custom agents run commands on this host, as it
	// says; nil refuses them (spec.task.in: guest is unaffected).
	HostCommands *HostCommands
	// AllowedRoots are the host directories the sandboxes' host paths
	// must lie under on this node; the zero Roots allows none.
	AllowedRoots hostpath.Roots
	// ObserveAcquire, when set, hears how long each acquire took and how
	// it went: resume, restore (the clean snapshot) or clone.
	ObserveAcquire func(how string, d time.Duration)
	// WaitForPlacement makes the node act only on sandboxes placement put
	// on it (status.node), as each node of several must. Without it the
	// node also takes a sandbox no one placed yet, with a write
	// conditioned on what it read (a lone node, as hvkube serve runs one;
	// placement may get there first, and then one of the two writes loses).
	WaitForPlacement bool
	// StatusInterval is how often the node looks at memory pressure and
	// writes its Node object when what the cluster acts on changed; it
	// writes it every other one regardless, its heartbeat (default
	// DefaultStatusInterval).
	StatusInterval time.Duration
	// Pressure is the memory pressure policy (memory.go).
	Pressure Pressure
	// ReadyAhead is the fewest idle desktops of each pool that a backend
	// which leaves clones as cloned (backend.Readier) is asked to ready
	// ahead of their claim (readyahead.go; 0: DefaultReadyAhead,
	// negative: none).
	ReadyAhead int
	// Address is where this node's agent answers the API servers
	// (host:port), written in its Node object so that they can reach it;
	// empty for the node inside hvkube serve.
	Address string
	// FenceAfter is how long the node goes on without a successful write
	// of its Node object before it fences itself: it ends the attempts it
	// runs and starts none until a write succeeds, so that no agent runs
	// on two nodes once the cluster has marked it lost (0:
	// DefaultFenceAfter). FenceAfter plus StatusInterval must stay under
	// the cluster's grace (controller.Options.NodeGrace).
	FenceAfter time.Duration
	// ReleaseWriteDelay is how long a pool's sandbox reset before its
	// agent's outcome (api.AgentStatus.ReleasedSandbox) waits for a new
	// claim before the node writes its release (0: DefaultReleaseWriteDelay;
	// negative: the release is written after the outcome, never folded).
	ReleaseWriteDelay time.Duration
}

// DefaultReleaseWriteDelay is Options.ReleaseWriteDelay's default: under
// a backlog a new claim takes a released sandbox within milliseconds on
// one host, and its one write is the release's too; on a busy API server
// a claim takes a second or two to reach the node (at a pool of 10,000 on
// 100 nodes with a delay of one second, a third of the releases were
// written on their own). An idle pool's sandbox shows released three
// seconds later; a person's operation on it writes the release at once.
const DefaultReleaseWriteDelay = 3 * time.Second

// Node reconciles this host's templates and sandboxes and serves their
// operations. Its reconcilers run in a reconcile.Manager (Register).
type Node struct {
	st   store.Interface
	be   backend.Backend
	log  *slog.Logger
	opt  Options
	name string
	now  func() time.Time

	templates *reconcile.Queue
	sandboxes *reconcile.Queue
	agentsQ   *reconcile.Queue
	// caches are the Manager's views of this node's sandboxes, agents
	// and pools (see read); set by Register. The node's writes are
	// expected in them (st is a reconcile.Expecting).
	cachesMu sync.RWMutex
	caches   map[string]*reconcile.Cache
	locks    keyedMutex
	held     holders
	claims   claimIndex
	deferred deferredReleases

	nodeMu   sync.Mutex // guards lastNode
	lastNode *api.Node  // the Node object as its last heartbeat wrote it

	// runCtx bounds the agents' attempts; Stop cancels it and waits.
	runCtx    context.Context
	runCancel context.CancelFunc
	runs      runs
	logs      attemptLogs // of the layouts before the journal
	journal   logJournal  // the attempts' logs (logjournal.go)
	// status is the status loop (memory.go), started by Start.
	status   sync.WaitGroup
	pressure pressureBook
	// peaks are each pool's busiest moments (readyahead.go).
	peaks busyPeaks
	// checkpointUnit is what spec.checkpoint.everyMinutes counts in
	// (a minute; tests shorten it).
	checkpointUnit time.Duration
	// egress remembers when each sandbox's last EgressDenied event was
	// recorded (network.go).
	egress egressReports
	// fence ends this node's attempts when it cannot write its Node
	// object (fence.go).
	fence fenceState

	// actions is the action layer over this node's sandboxes: the API, MCP
	// and workflow steps act through it.
	actions *display.Actions
	// idle is when each sandbox was last used (idle.go).
	idle idleBook
	// sessions are the variables written into each sandbox (env.go).
	sessions sessions
	// captures are the snapshots captured lately (snapshot.go).
	captures captureBook
}

// New returns a Node.
func New(opts Options) *Node {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Name == "" {
		opts.Name = DefaultName()
	}
	n := &Node{be: opts.Backend, log: opts.Logger.With("node", opts.Name), opt: opts, name: opts.Name, now: opts.Now}
	if opts.DataDir != "" {
		n.journal.dir = n.agentsDir()
	}
	n.st = reconcile.Expecting{Interface: opts.Store, Caches: n.cache}
	n.runs.m = map[string]*run{}
	n.actions = display.NewActions(n)
	n.runCtx, n.runCancel = context.WithCancel(context.Background())
	return n
}

// Stop ends the attempts this node runs and waits for them; they write
// nothing, and run again when a node starts. Call it after the Manager's
// Stop and before the backend closes.
func (n *Node) Stop() {
	n.disarmFence()
	n.runCancel()
	n.runs.wg.Wait()
	n.status.Wait()
	// The releases no claim took yet are written now: the next start
	// need not reset their sandboxes again.
	ctx, cancel := context.WithTimeout(context.Background(), stopFlushTimeout)
	defer cancel()
	n.flushDeferred(ctx)
	n.journal.close()
}

// stopFlushTimeout bounds the writes of the releases Stop flushes.
const stopFlushTimeout = 5 * time.Second

// DefaultName is the host name, or "local" when it has none that is a DNS
// label.
func DefaultName() string {
	h, err := os.Hostname()
	if err != nil || api.ValidateName("node", h) != nil {
		return "local"
	}
	return h
}

// Name is the node's name.
func (n *Node) Name() string { return n.name }

// Register adds the node's controllers to m: templates (whose builds block
// for a while, so they get their own workers) and sandboxes. A template
// change also looks again at the sandboxes waiting for it.
func (n *Node) Register(m *reconcile.Manager) {
	n.cachesMu.Lock()
	n.caches = map[string]*reconcile.Cache{api.KindSandbox: m.Cache(api.KindSandbox), api.KindAgent: m.Cache(api.KindAgent),
		api.KindSandboxPool: m.Cache(api.KindSandboxPool), api.KindTemplate: m.Cache(api.KindTemplate)}
	n.cachesMu.Unlock()
	n.templates = m.Register(reconcile.Controller{Name: "template", For: api.KindTemplate, Workers: 2,
		Reconciler: reconcile.ReconcilerFunc(n.reconcileTemplate)})
	n.sandboxes = m.Register(reconcile.Controller{Name: "sandbox", For: api.KindSandbox, Workers: SandboxWorkers(runtime.NumCPU()),
		Reconciler: reconcile.ReconcilerFunc(n.reconcileSandbox),
		Watches:    []reconcile.Watch{{Kind: api.KindTemplate, Map: n.sandboxesWaitingFor}}})
	n.agentsQ = m.Register(reconcile.Controller{Name: "agent-run", For: api.KindAgent, Workers: agentWorkers,
		Reconciler: reconcile.ReconcilerFunc(n.reconcileAgent),
		Watches:    []reconcile.Watch{{Kind: api.KindSandbox, Map: n.claimant}}})
}

// agentWorkers is how many of the node's agents are reconciled at once.
// A start is one write of the agent, awaited: with four workers a node
// started at most four agents per store commit (a few milliseconds), under
// a thousand a second, however many claims waited; the store's group
// commit takes sixteen writes as one.
const agentWorkers = 16

// claimant maps a sandbox to the agent its claim names: a new claim is
// how the node learns of an agent to start (its watch shows it no agent
// before it runs here), and an agent bound the older way (Scheduled)
// waits for its claim's event. It notes the claim in the node's index.
func (n *Node) claimant(o api.Object) []string {
	sb := o.(*api.Sandbox)
	a := sb.Status.CurrentAgent
	if a == "" {
		return nil
	}
	n.claims.note(a, sb.Metadata.Name)
	return []string{a}
}

// SandboxWorkers is how many sandboxes a node clones (and reconciles) at
// once on a host with cpus cores: two per core, at least four and at most
// sixteen. A clone mostly waits for QEMU to start and load its state, so
// two per core keep the cores busy; more contend for them (measured on
// two cores: a pool of ten fills slower with eight than with four).
func SandboxWorkers(cpus int) int { return min(max(2*cpus, 4), 16) }

// sandboxesWaitingFor maps a template change to the sandboxes still
// waiting for a snapshot of it.
func (n *Node) sandboxesWaitingFor(o api.Object) []string {
	items, _, err := n.st.List(context.Background(), api.KindSandbox, api.Selector{})
	if err != nil {
		return nil
	}
	var keys []string
	for _, it := range items {
		sb := it.(*api.Sandbox)
		switch sb.Status.Phase {
		case "", api.SandboxPending, api.SandboxCreating:
			keys = append(keys, sb.Metadata.Name)
		}
	}
	return keys
}

// Start reconciles the backend with the store before the controllers run:
// VMs that no Sandbox object owns are deleted (a sandbox deleted while the
// server was down, an interrupted create), and so are VMs whose sandbox
// the store says another node owns (sweep). It touches only this node's
// backend. Then it starts the status loop and the fence (fence.go).
func (n *Node) Start(ctx context.Context) error {
	if err := n.sweep(ctx); err != nil {
		return err
	}
	n.armFence()
	n.status.Add(1)
	go func() {
		defer n.status.Done()
		n.statusLoop(n.runCtx)
	}()
	return nil
}

// event records an event, logging instead of failing.
func (n *Node) event(ctx context.Context, o api.Object, typ, reason, msg string) {
	reconcile.Event(ctx, n.st, n.log, o, typ, reason, msg)
}

// cache is the node's watch cache of kind, nil when it keeps none.
func (n *Node) cache(kind string) *reconcile.Cache {
	n.cachesMu.RLock()
	defer n.cachesMu.RUnlock()
	return n.caches[kind]
}

// read returns kind/name as this node's watch last brought it, or from the
// store when the watch has not brought it, when a write of the node's own
// is in flight (the watch has not brought it back yet), or when no Manager
// runs the node's controllers. What someone else wrote it may lag by the
// time a change takes to arrive; every write is conditioned on the
// resourceVersion read, so a stale read costs a conflict and a retry,
// never a wrong write. It saves the API server a GET in each reconcile of
// a node's objects.
func (n *Node) read(ctx context.Context, kind, name string) (api.Object, error) {
	return reconcile.GetLatest(ctx, n.cache(kind), n.st, kind, name)
}

// peek is read without the copy, for the checks of the data plane (each
// input and screenshot): the object may be the cache's own, never to be
// changed.
func (n *Node) peek(ctx context.Context, kind, name string) (api.Object, error) {
	o, _, err := reconcile.PeekLatest(ctx, n.cache(kind), n.st, kind, name)
	return o, err
}

// updateStatus applies change to sb's status and writes it, conditioned on
// sb's resourceVersion (another writer, such as the scheduler claiming the
// sandbox, is never overwritten): if sb is stale the change is made again
// on a fresh read. It records the generation it acted on, and writes
// nothing when nothing changed.
func (n *Node) updateStatus(ctx context.Context, sb *api.Sandbox, change func(*api.SandboxStatus)) error {
	_, err := reconcile.UpdateStatusFrom(ctx, n.st, api.KindSandbox, sb, func(cur *api.Sandbox) bool {
		before := api.DeepCopy(cur).Status
		change(&cur.Status)
		cur.Status.ObservedGeneration = cur.Metadata.Generation
		api.SetCondition(&cur.Status.Conditions, cur.ReadyCondition(), n.now())
		return !statusEqual(before, cur.Status)
	})
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	return err
}

// snapshotID names the backend snapshot of a template generation: a new
// spec builds a new snapshot, and the old one stays for its clones.
func snapshotID(t *api.Template) string {
	gen := "-g" + strconv.FormatInt(t.Metadata.Generation, 10)
	name := t.Metadata.Name
	if len(name)+len(gen) > api.MaxNameLength {
		name = name[:api.MaxNameLength-len(gen)]
		for len(name) > 0 && name[len(name)-1] == '-' {
			name = name[:len(name)-1]
		}
	}
	return name + gen
}

// keyedMutex is one mutex per key. A check that runs without the lock
// (observe) is cancelled when someone takes it: an operation on a
// sandbox (a reset, a release, a deletion) does not wait for a health
// check that the operation itself would make fail.
type keyedMutex struct {
	mu        sync.Mutex
	locks     map[string]*keyLock
	observers map[string]map[*context.CancelFunc]bool
}

// observe returns a context that ends when key is locked (or ctx ends),
// and its release.
func (k *keyedMutex) observe(ctx context.Context, key string) (context.Context, func()) {
	octx, cancel := context.WithCancel(ctx)
	k.mu.Lock()
	if k.observers == nil {
		k.observers = map[string]map[*context.CancelFunc]bool{}
	}
	if k.observers[key] == nil {
		k.observers[key] = map[*context.CancelFunc]bool{}
	}
	k.observers[key][&cancel] = true
	k.mu.Unlock()
	return octx, func() {
		k.mu.Lock()
		delete(k.observers[key], &cancel)
		if len(k.observers[key]) == 0 {
			delete(k.observers, key)
		}
		k.mu.Unlock()
		cancel()
	}
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// busy reports whether key is locked now.
func (k *keyedMutex) busy(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.locks[key]
	return ok
}

// lock locks key and returns its unlock.
func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l, ok := k.locks[key]
	if !ok {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	for c := range k.observers[key] {
		(*c)()
	}
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

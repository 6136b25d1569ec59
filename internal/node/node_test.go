package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/secrets"
	"github.com/hvkube/hvkube/internal/store"
)

// cluster is a node and the object controllers over a real SQLite store
// and the fake backend.
type cluster struct {
	st  store.API
	be  *fake.Backend
	nd  *Node
	mgr *reconcile.Manager
	dir string
	log *slog.Logger
	now func() time.Time
	// hostCommands is the node's Options.HostCommands.
	hostCommands *HostCommands
	// statusInterval and pressure are the node's Options.
	statusInterval time.Duration
	pressure       Pressure
	// nodeStore wraps the store the node is given (clusterOptions).
	nodeStore func(store.API) store.API
	env       func(context.Context, *api.Sandbox, *api.Agent) (secrets.Env, error)
	// checkpointUnit is the node's checkpointUnit.
	checkpointUnit time.Duration
	// releaseWriteDelay is the node's Options.ReleaseWriteDelay.
	releaseWriteDelay time.Duration
}

// clusterOptions change what newClusterWith builds.
type clusterOptions struct {
	// now is the clock of the node and the controllers (time.Now when
	// nil).
	now func() time.Time
	// fake configures the fake backend.
	fake fake.Options
	// hostCommands lets custom agents run on the host (nil: refused).
	hostCommands *HostCommands
	// statusInterval and pressure are the node's (Options).
	statusInterval time.Duration
	pressure       Pressure
	// nodeStore, when set, wraps the store the node is given (the
	// controllers and the test use the store itself).
	nodeStore func(store.API) store.API
	// env is the node's Options.Env.
	env func(context.Context, *api.Sandbox, *api.Agent) (secrets.Env, error)
	// checkpointUnit is what spec.checkpoint.everyMinutes counts in.
	checkpointUnit time.Duration
	// releaseWriteDelay is the node's Options.ReleaseWriteDelay.
	releaseWriteDelay time.Duration
}

// testStore, when set, opens the store of each cluster instead of SQLite
// in the test's directory (TestControlLoopOnKubernetes sets it).
var testStore func(t *testing.T) store.API

func newCluster(t *testing.T) *cluster {
	t.Helper()
	return newClusterWith(t, clusterOptions{})
}

func newClusterWith(t *testing.T, opts clusterOptions) *cluster {
	t.Helper()
	dir := t.TempDir()
	var st store.API
	if testStore != nil {
		st = testStore(t)
	} else {
		s, err := store.Open(context.Background(), dir, store.Options{Now: opts.now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		st = s
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c := &cluster{st: st, be: fake.New(opts.fake), dir: dir, log: log, now: opts.now, hostCommands: opts.hostCommands, statusInterval: opts.statusInterval, pressure: opts.pressure,
		nodeStore: opts.nodeStore, env: opts.env, checkpointUnit: opts.checkpointUnit, releaseWriteDelay: opts.releaseWriteDelay}
	c.nd, c.mgr = c.startNode(t)
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Template
metadata: {name: desk}
spec:
  qemu: {image: linux-desktop}
`))
	return c
}

// startNode starts a node and the object controllers on the cluster's
// store and backend, as a start of the server does; they stop when the
// test ends (before the store closes).
func (c *cluster) startNode(t *testing.T) (*Node, *reconcile.Manager) {
	t.Helper()
	mgr := reconcile.NewManager(c.st, c.log, time.Second)
	nst := c.st
	if c.nodeStore != nil {
		nst = c.nodeStore(c.st)
	}
	nd := New(Options{Store: nst, Backend: c.be, Name: "n1", DataDir: c.dir, Logger: c.log, DefaultTemplate: "desk", Now: c.now, HostCommands: c.hostCommands,
		StatusInterval: c.statusInterval, Pressure: c.pressure, Env: c.env, ReleaseWriteDelay: c.releaseWriteDelay})
	nd.checkpointUnit = c.checkpointUnit
	if err := nd.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	nd.Register(mgr)
	controller.RegisterAll(mgr, c.st, c.log, c.now)
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mgr.Stop()
		nd.Stop()
	})
	return nd, mgr
}

// restart stops the node and the controllers, as a stop of the server
// does, and starts new ones on the same store and backend.
func (c *cluster) restart(t *testing.T) {
	t.Helper()
	c.mgr.Stop()
	c.nd.Stop()
	c.nd, c.mgr = c.startNode(t)
}

func yamlObj(t *testing.T, y string) api.Object {
	t.Helper()
	o, err := api.DecodeOne([]byte(y), api.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	api.Default(o)
	if err := api.Validate(o); err != nil {
		t.Fatal(err)
	}
	if a, ok := o.(*api.Agent); ok {
		a.Metadata.Finalizers = append(a.Metadata.Finalizers, api.FinalizerRun)
	}
	return o
}

func (c *cluster) create(t *testing.T, o api.Object) {
	t.Helper()
	if _, err := c.st.Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

// eventually waits until cond holds (20 s at most).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	waitFor(t, 20*time.Second, 20*time.Millisecond, what, cond)
}

// waitFor polls cond every poll until it holds, failing the test after d.
func waitFor(t *testing.T, d, poll time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(poll)
	}
	t.Fatalf("%s: not within %s (%s)", what, d, last)
}

func (c *cluster) agent(t *testing.T, name string) *api.Agent {
	t.Helper()
	o, err := c.st.Get(context.Background(), api.KindAgent, name)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*api.Agent)
}

func TestWorkflowAgentOnPool(t *testing.T) {
	c := newCluster(t)
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: SandboxPool
metadata: {name: demo}
spec:
  replicas: 2
  template:
    spec: {templateRef: desk}
`))
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job-1}
spec:
  sandboxSelector: {pool: demo}
  task:
    steps:
    - {action: left_click, coordinate: [400, 300]}
    - {action: type, text: "hello"}
    - {action: exec, command: [tee, /tmp/out.txt]}
  output: {artifacts: [/tmp/out.txt]}
`))
	eventually(t, "agent completes", func() (bool, string) {
		a := c.agent(t, "job-1")
		return a.Status.Phase == api.AgentCompleted, fmt.Sprintf("%s %s %s", a.Status.Phase, a.Status.Reason, a.Status.Message)
	})
}

// TestShapeSnapshot: a sandbox whose memory and resolution differ from its
// template's gets a snapshot of that shape, built on first use, listed in
// the template's status, and cloned from.
func TestShapeSnapshot(t *testing.T) {
	c := newCluster(t)
	for _, name := range []string{"big-1", "big-2"} {
		c.create(t, yamlObj(t, fmt.Sprintf(`apiVersion: hvkube/v1
kind: Sandbox
metadata: {name: %s}
spec:
  templateRef: desk
  resources: {memoryMB: 1024}
  display: {resolution: 1920x1080}
`, name)))
	}
	for _, name := range []string{"big-1", "big-2"} {
		eventually(t, name+" runs", func() (bool, string) {
			o, err := c.st.Get(context.Background(), api.KindSandbox, name)
			if err != nil {
				return false, err.Error()
			}
			sb := o.(*api.Sandbox)
			return sb.Status.Phase == api.SandboxRunning, sb.Status.Phase + " " + sb.Status.Reason + " " + sb.Status.Message
		})
	}
	o, _ := c.st.Get(context.Background(), api.KindTemplate, "desk")
	tpl := o.(*api.Template)
	if len(tpl.Status.Shapes) != 1 || tpl.Status.Shapes[0].Phase != "Ready" || tpl.Status.Shapes[0].MemoryMB != 1024 || tpl.Status.Shapes[0].Node != "n1" {
		t.Fatalf("shapes: %+v", tpl.Status.Shapes)
	}
	if n := c.be.Count(fake.OpBuildTemplate); n != 2 {
		t.Fatalf("%d template builds, want 2 (the spec's and one shape)", n)
	}
	info, err := c.be.Inspect(context.Background(), "big-2")
	if err != nil || info.TemplateID != tpl.Status.Shapes[0].ID || info.Resolution != "1920x1080" {
		t.Fatalf("big-2 cloned from %q at %s (%v), want %s", info.TemplateID, info.Resolution, err, tpl.Status.Shapes[0].ID)
	}
}

func (c *cluster) sandbox(t *testing.T, name string) *api.Sandbox {
	t.Helper()
	o, err := c.st.Get(context.Background(), api.KindSandbox, name)
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return o.(*api.Sandbox)
}

// members returns the pool's sandboxes that are not being deleted, by
// name.
func (c *cluster) members(t *testing.T, pool string) []*api.Sandbox {
	t.Helper()
	items, _, err := c.st.List(context.Background(), api.KindSandbox, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*api.Sandbox
	for _, it := range items {
		if api.OwnerOf(it, api.KindSandboxPool) == pool && it.GetMeta().DeletionTimestamp == nil {
			out = append(out, it.(*api.Sandbox))
		}
	}
	return out
}

// waitPool waits until the pool has n sandboxes, all idle in phase, and
// returns their names.
func (c *cluster) waitPool(t *testing.T, pool string, n int, phase string) []string {
	t.Helper()
	var names []string
	eventually(t, fmt.Sprintf("pool %s has %d %s sandboxes", pool, n, phase), func() (bool, string) {
		names = names[:0]
		var states []string
		for _, sb := range c.members(t, pool) {
			names = append(names, sb.Metadata.Name)
			states = append(states, fmt.Sprintf("%s=%s/%s(%s)", sb.Metadata.Name, sb.Status.Phase, sb.Status.Reason, sb.Status.CurrentAgent))
			if sb.Status.Phase != phase || sb.Status.CurrentAgent != "" {
				return false, fmt.Sprint(states)
			}
		}
		return len(names) == n, fmt.Sprint(states)
	})
	return names
}

// waitAgent waits until the agent is in phase and returns it.
func (c *cluster) waitAgent(t *testing.T, name, phase string) *api.Agent {
	t.Helper()
	var a *api.Agent
	eventually(t, fmt.Sprintf("agent %s is %s", name, phase), func() (bool, string) {
		a = c.agent(t, name)
		if agentstate.Finished(a) && a.Status.Phase != phase {
			t.Fatalf("agent %s ended %s (%s: %s), want %s", name, a.Status.Phase, a.Status.Reason, a.Status.Message, phase)
		}
		return a.Status.Phase == phase, fmt.Sprintf("%s %s: %s (attempts %d, failures %d)", a.Status.Phase, a.Status.Reason, a.Status.Message, a.Status.Attempts, a.Status.Failures)
	})
	return a
}

// waitGone waits until the object is no longer stored.
func (c *cluster) waitGone(t *testing.T, kind, name string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s %s is gone", kind, name), func() (bool, string) {
		o, err := c.st.Get(context.Background(), kind, name)
		if errors.Is(err, api.ErrNotFound) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("there, deletionTimestamp %v, finalizers %v", o.GetMeta().DeletionTimestamp, o.GetMeta().Finalizers)
	})
}

// events returns the reasons of an object's events, oldest first, that
// are in reasons (all of them when reasons is empty).
func (c *cluster) events(t *testing.T, kind, name string, reasons ...string) []string {
	t.Helper()
	return storeEvents(t, c.st, kind, name, reasons...)
}

func storeEvents(t *testing.T, st store.API, kind, name string, reasons ...string) []string {
	t.Helper()
	evs, err := st.ListEvents(context.Background(), store.EventFilter{Kind: kind, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if len(reasons) == 0 || slices.Contains(reasons, ev.Reason) {
			// An aggregated event stands for each time it happened.
			for range max(ev.Count, 1) {
				out = append(out, ev.Reason)
			}
		}
	}
	return out
}

// count returns how many of the reasons are reason.
func count(reasons []string, reason string) int {
	n := 0
	for _, r := range reasons {
		if r == reason {
			n++
		}
	}
	return n
}

// guestShell is an Options.Exec for the fake backend that, besides a few
// programs of its built-in interpreter (true, false, echo, cat, tee),
// answers the shell glob the node runs to find artifacts, which the
// built-in interpreter does not know.
func guestShell(id string, fs fake.FS, req backend.ExecRequest) (backend.ExecResult, error) {
	var stdout, stderr bytes.Buffer
	code := 0
	args := req.Args
	switch path.Base(req.Path) {
	case "sh":
		if len(args) != 4 || args[0] != "-c" || !strings.HasPrefix(args[1], "IFS=; for f in $1;") {
			return backend.ExecResult{ExitCode: 2, Stderr: []byte("sh: the fake runs only the artifact glob")}, nil
		}
		for _, p := range fs.Paths() {
			if ok, _ := path.Match(args[3], p); ok {
				fmt.Fprintln(&stdout, p)
			}
		}
	case "true":
	case "false":
		code = 1
	case "echo":
		fmt.Fprintln(&stdout, strings.Join(args, " "))
	case "cat":
		for _, p := range args {
			data, ok := fs.ReadFile(p)
			if !ok {
				fmt.Fprintf(&stderr, "cat: %s: No such file or directory\n", p)
				code = 1
				continue
			}
			stdout.Write(data)
		}
	case "tee":
		for _, p := range args {
			fs.WriteFile(p, req.Stdin)
		}
		stdout.Write(req.Stdin)
	default:
		fmt.Fprintf(&stderr, "%s: command not found\n", req.Path)
		code = 127
	}
	return backend.ExecResult{ExitCode: code, Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, nil
}

// newNode is a node over a real store and the fake backend with no
// Manager: for calling its reconcilers directly.
func newNode(t *testing.T, now func() time.Time) (*Node, *store.Store, *fake.Backend) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir, store.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	be := fake.New(fake.Options{Now: now})
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nd := New(Options{Store: st, Backend: be, Name: "n1", DataDir: dir, Logger: log, DefaultTemplate: "desk", Now: now})
	t.Cleanup(nd.Stop)
	return nd, st, be
}

// waitEvents waits until the object has at least n events of reason (an
// event may be recorded just after the status write a test waits for)
// and returns how many it has.
func (c *cluster) waitEvents(t *testing.T, kind, name, reason string, n int) int {
	t.Helper()
	got := 0
	eventually(t, fmt.Sprintf("%d %s events of %s %s", n, reason, kind, name), func() (bool, string) {
		got = count(c.events(t, kind, name), reason)
		return got >= n, fmt.Sprint(c.events(t, kind, name))
	})
	return got
}

package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend/fake"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/store"
)

// cluster is a node and the object controllers over a real SQLite store
// and the fake backend.
type cluster struct {
	st  *store.Store
	be  *fake.Backend
	nd  *Node
	mgr *controller.Manager
	dir string
	log *slog.Logger
	now func() time.Time
}

// clusterOptions change what newClusterWith builds.
type clusterOptions struct {
	// now is the clock of the node and the controllers (time.Now when
	// nil).
	now func() time.Time
	// fake configures the fake backend.
	fake fake.Options
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	return newClusterWith(t, clusterOptions{})
}

func newClusterWith(t *testing.T, opts clusterOptions) *cluster {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir, store.Options{Now: opts.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c := &cluster{st: st, be: fake.New(opts.fake), dir: dir, log: log, now: opts.now}
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
func (c *cluster) startNode(t *testing.T) (*Node, *controller.Manager) {
	t.Helper()
	mgr := controller.NewManager(c.st, c.log, time.Second)
	nd := New(Options{Store: c.st, Backend: c.be, Name: "n1", DataDir: c.dir, Logger: c.log, DefaultTemplate: "desk", Now: c.now})
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

// eventually waits until cond holds.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: still %s", what, last)
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

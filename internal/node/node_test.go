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
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	be := fake.New(fake.Options{})
	mgr := controller.NewManager(st, log, time.Second)
	nd := New(Options{Store: st, Backend: be, Name: "n1", DataDir: dir, Logger: log, DefaultTemplate: "desk"})
	if err := nd.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	nd.Register(mgr)
	controller.RegisterAll(mgr, st, log, nil)
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mgr.Stop()
		nd.Stop()
		st.Close()
	})
	c := &cluster{st: st, be: be, nd: nd, mgr: mgr, dir: dir}
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Template
metadata: {name: desk}
spec:
  qemu: {image: linux-desktop}
`))
	return c
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

package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// TestNodeLeavesAnotherNodesSandbox puts a second node on the cluster's
// store: a sandbox the first node runs is not the second's to clone, to
// delete the VM of, or to let go of (its finalizer) when it is deleted;
// and the second node's start-up sweep deletes only its own stale VM.
func TestNodeLeavesAnotherNodesSandbox(t *testing.T) {
	c := newCluster(t)
	c.runningBox(t)
	ctx := context.Background()

	be2 := fake.New(fake.Options{})
	// A stale copy of box on the second host (it ran there once).
	if _, err := be2.BuildTemplate(ctx, backend.TemplateSpec{ID: "t"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := be2.Create(ctx, backend.SandboxSpec{ID: "box", UID: c.sandbox(t, "box").Metadata.UID, TemplateID: "t"}); err != nil {
		t.Fatal(err)
	}
	n2 := New(Options{Store: c.st, Backend: be2, Name: "n2", DataDir: t.TempDir(), Logger: c.log, DefaultTemplate: "desk"})
	if err := n2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer n2.Stop()
	if vms, _ := be2.List(ctx); len(vms) != 0 {
		t.Errorf("the second node kept %d VMs of sandboxes it does not own", len(vms))
	}
	if _, err := c.be.Inspect(ctx, "box"); err != nil {
		t.Fatalf("the first node's VM: %v", err)
	}

	// Reconciled by the second node, running and then being deleted, box
	// stays the first node's.
	if _, err := n2.reconcileSandbox(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	c.mgr.Stop() // the first node no longer acts: only n2 could
	if _, _, err := c.st.Delete(ctx, api.KindSandbox, "box", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.reconcileSandbox(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	sb := c.sandbox(t, "box")
	if sb == nil || !slices.Contains(sb.Metadata.Finalizers, api.FinalizerVM) {
		t.Fatalf("the second node let go of the first node's sandbox: %+v", sb)
	}
	if sb.Status.Node != "n1" || sb.Status.Phase == api.SandboxTerminating {
		t.Errorf("node %q phase %q after the second node's reconcile, want n1's, not Terminating", sb.Status.Node, sb.Status.Phase)
	}
	if _, err := c.be.Inspect(ctx, "box"); err != nil {
		t.Errorf("the first node's VM is gone: %v", err)
	}
}

// TestPoolSpansTwoNodes runs two nodes that wait for placement, each with
// a backend of its own, on one store with the controllers: a pool of four
// with maxPerHost 2 puts two sandboxes on each, each node clones only its
// own, and neither clones a sandbox of the other.
func TestPoolSpansTwoNodes(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	backends := map[string]*fake.Backend{}
	for i, name := range []string{"n1", "n2"} {
		backends[name] = fake.New(fake.Options{})
		startNodeOn(t, st, name, backends[name], i == 0)
	}
	for _, y := range []string{`apiVersion: hvkube/v1
kind: Template
metadata: {name: desk}
spec:
  qemu: {image: linux-desktop}
`, poolYAML("web", 4, "  maxPerHost: 2\n")} {
		if _, err := st.Create(ctx, yamlObj(t, y)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, 20*time.Millisecond, "four paused sandboxes, two on each node", func() (bool, string) {
		items, _, err := st.List(ctx, api.KindSandbox, api.Selector{})
		if err != nil {
			return false, err.Error()
		}
		per := map[string]int{}
		paused := 0
		for _, it := range items {
			sb := it.(*api.Sandbox)
			per[sb.Status.Node]++
			if sb.Status.Phase == api.SandboxPaused {
				paused++
			}
		}
		return paused == 4 && per["n1"] == 2 && per["n2"] == 2, fmt.Sprintf("%d paused, by node %v", paused, per)
	})
	items, _, _ := st.List(ctx, api.KindSandbox, api.Selector{})
	for _, it := range items {
		sb := it.(*api.Sandbox)
		for name, be := range backends {
			_, err := be.Inspect(ctx, sb.Metadata.Name)
			if has := err == nil; has != (name == sb.Status.Node) {
				t.Errorf("sandbox %s (node %s): node %s has a VM of it: %v", sb.Metadata.Name, sb.Status.Node, name, has)
			}
		}
	}
}

// TestLateNodeBuildsItsOwnCopy: a node that joins after a template is
// Ready builds its own copy of the snapshot while the template stays
// Ready for the node that has it; its sandboxes wait for the copy
// (TemplateNotOnNode), then run.
func TestLateNodeBuildsItsOwnCopy(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	start := func(name string, be *fake.Backend, controllers bool) *reconcile.Manager {
		return startNodeOn(t, st, name, be, controllers)
	}
	cluster := start("n1", fake.New(fake.Options{}), true)
	if _, err := st.Create(ctx, yamlObj(t, "apiVersion: hvkube/v1\nkind: Template\nmetadata: {name: desk}\nspec:\n  qemu: {image: linux-desktop}\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the template is Ready on n1", func() (bool, string) {
		tpl := getTemplate(t, st, "desk")
		return tpl.Status.Phase == api.TemplateReady, tpl.Status.Phase
	})
	rv := getTemplate(t, st, "desk").Metadata.ResourceVersion

	// n2's build takes a while, and n2 has the most free memory, so the
	// next sandbox goes there.
	slow := fake.New(fake.Options{MemoryMB: 8 * fake.DefaultMemoryMB, Delay: func(op string) time.Duration {
		if op == fake.OpBuildTemplate {
			return 2 * time.Second
		}
		return 0
	}})
	start("n2", slow, false)
	// As placement sees it: its watch of the nodes may lag the store.
	waitFor(t, 30*time.Second, 20*time.Millisecond, "placement sees n2's memory", func() (bool, string) {
		o, ok := cluster.Cache(api.KindNode).Get("n2")
		if !ok {
			return false, "not in the watch"
		}
		return o.(*api.Node).Status.Memory.FreeMB > 0, "no free memory yet"
	})
	if _, err := st.Create(ctx, yamlObj(t, "apiVersion: hvkube/v1\nkind: Sandbox\nmetadata: {name: late}\nspec: {templateRef: desk}\n")); err != nil {
		t.Fatal(err)
	}
	var waited bool
	waitFor(t, 30*time.Second, 20*time.Millisecond, "a sandbox on n2 runs", func() (bool, string) {
		o, err := st.Get(ctx, api.KindSandbox, "late")
		if err != nil {
			return false, err.Error()
		}
		sb := o.(*api.Sandbox)
		if sb.Status.Node != "" && sb.Status.Node != "n2" {
			t.Fatalf("placement put the sandbox on %s, not on n2, which has the most free memory", sb.Status.Node)
		}
		waited = waited || sb.Status.Reason == "TemplateNotOnNode"
		return sb.Status.Phase == api.SandboxRunning, sb.Status.Phase + " " + sb.Status.Reason
	})
	if !waited {
		t.Error("the sandbox never waited for n2's copy (TemplateNotOnNode)")
	}
	if _, err := slow.InspectTemplate(ctx, getTemplate(t, st, "desk").Status.Snapshot.ID); err != nil {
		t.Errorf("n2 has no copy of the snapshot: %v", err)
	}
	if tpl := getTemplate(t, st, "desk"); tpl.Status.Phase != api.TemplateReady || tpl.Metadata.ResourceVersion != rv {
		t.Errorf("the template changed while n2 built its copy: %s, rv %s -> %s", tpl.Status.Phase, rv, tpl.Metadata.ResourceVersion)
	}
}

// openStore opens a SQLite store in the test's directory, closed after
// the nodes the test starts have stopped.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// startNodeOn starts a node named name on st and be (waiting for
// placement, as on a cluster), with the cluster controllers beside it if
// controllers is set; both stop when the test ends.
func startNodeOn(t *testing.T, st store.API, name string, be *fake.Backend, controllers bool) *reconcile.Manager {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mgr := reconcile.NewManager(st, log, time.Second)
	nd := New(Options{Store: st, Backend: be, Name: name, DataDir: t.TempDir(), Logger: log, DefaultTemplate: "desk", WaitForPlacement: true})
	if err := nd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	nd.Register(mgr)
	if controllers {
		controller.RegisterAll(mgr, st, log, nil)
	}
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mgr.Stop(); nd.Stop() })
	return mgr
}

// TestDeletedTemplateLeavesNoNode: when a template is deleted, every node
// removes its copy of the snapshot, not only the one whose finalizer let
// it go; a node that was down then removes its copy when it starts. A
// template that stays keeps its snapshot everywhere.
func TestDeletedTemplateLeavesNoNode(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	bes := []*fake.Backend{fake.New(fake.Options{}), fake.New(fake.Options{}), fake.New(fake.Options{})}
	startNodeOn(t, st, "n1", bes[0], true)
	startNodeOn(t, st, "n2", bes[1], false)
	for _, name := range []string{"desk", "keep"} {
		if _, err := st.Create(ctx, yamlObj(t, "apiVersion: hvkube/v1\nkind: Template\nmetadata: {name: "+name+"}\nspec:\n  qemu: {image: linux-desktop}\n")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, 20*time.Millisecond, "template "+name+" is Ready", func() (bool, string) {
			tpl := getTemplate(t, st, name)
			return tpl.Status.Phase == api.TemplateReady, tpl.Status.Phase
		})
	}
	// Each node holds a copy of both, as if it had built them (n3 is down).
	for _, be := range bes {
		for _, id := range []string{"desk-g1", "keep-g1"} {
			if _, err := be.BuildTemplate(ctx, backend.TemplateSpec{ID: id}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := st.Delete(ctx, api.KindTemplate, "desk", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	has := func(be *fake.Backend, id string) bool {
		_, err := be.InspectTemplate(ctx, id)
		return err == nil
	}
	waitFor(t, 30*time.Second, 20*time.Millisecond, "n1 and n2 remove their copies of desk", func() (bool, string) {
		return !has(bes[0], "desk-g1") && !has(bes[1], "desk-g1"), fmt.Sprintf("n1 %v, n2 %v", has(bes[0], "desk-g1"), has(bes[1], "desk-g1"))
	})
	startNodeOn(t, st, "n3", bes[2], false)
	waitFor(t, 30*time.Second, 20*time.Millisecond, "n3 removes its copy of desk when it starts", func() (bool, string) {
		return !has(bes[2], "desk-g1"), "still there"
	})
	for i, be := range bes {
		if !has(be, "keep-g1") {
			t.Errorf("n%d lost the snapshot of template keep, which is not deleted", i+1)
		}
	}
}

package node

import (
	"context"
	"slices"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/fake"
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

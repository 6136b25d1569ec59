package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/store"
)

const deskTemplate = `apiVersion: hvkube/v1
kind: Template
metadata: {name: desk}
spec:
  qemu: {image: linux-desktop}
`

func getTemplate(t *testing.T, st *store.Store, name string) *api.Template {
	t.Helper()
	o, err := st.Get(context.Background(), api.KindTemplate, name)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*api.Template)
}

func reconcileTemplate(t *testing.T, nd *Node, name string) {
	t.Helper()
	if _, err := nd.reconcileTemplate(context.Background(), name); err != nil {
		t.Fatalf("reconcile template %s: %v", name, err)
	}
}

func TestTemplateSnapshotLifecycle(t *testing.T) {
	ctx := context.Background()
	nd, st, be := newNode(t, nil)
	if _, err := st.Create(ctx, yamlObj(t, deskTemplate)); err != nil {
		t.Fatal(err)
	}

	// Built once, then Ready.
	reconcileTemplate(t, nd, "desk")
	tpl := getTemplate(t, st, "desk")
	if got, want := tpl.Status.Phase+"/"+tpl.Status.Reason, "Ready/SnapshotReady"; got != want {
		t.Fatalf("phase/reason %s, want %s (%s)", got, want, tpl.Status.Message)
	}
	if tpl.Status.Snapshot == nil || tpl.Status.Snapshot.ID != "desk-g1" {
		t.Fatalf("snapshot %+v, want desk-g1", tpl.Status.Snapshot)
	}
	if got, want := tpl.Status.Snapshot.MemoryBytes, int64(512)<<20; got != want {
		t.Errorf("snapshot memory %d, want %d", got, want)
	}
	if got, want := tpl.Status.ObservedGeneration, int64(1); got != want {
		t.Errorf("observedGeneration %d, want %d", got, want)
	}
	if !slices.Contains(tpl.Metadata.Finalizers, api.FinalizerSnapshot) {
		t.Errorf("finalizers %v, want %s", tpl.Metadata.Finalizers, api.FinalizerSnapshot)
	}
	if _, err := be.InspectTemplate(ctx, "desk-g1"); err != nil {
		t.Errorf("the backend has no snapshot desk-g1: %v", err)
	}
	if got, want := fmt.Sprint(storeEvents(t, st, api.KindTemplate, "desk", "Building", "Ready")), "[Building Building Ready]"; got != want {
		t.Errorf("events %s, want %s (start, progress, ready)", got, want)
	}

	// Ready and there: nothing to do.
	builds, rv := be.Count(fake.OpBuildTemplate), tpl.Metadata.ResourceVersion
	reconcileTemplate(t, nd, "desk")
	if got := be.Count(fake.OpBuildTemplate); got != builds {
		t.Errorf("a ready template was built again (%d builds, want %d)", got, builds)
	}
	if got := getTemplate(t, st, "desk").Metadata.ResourceVersion; got != rv {
		t.Errorf("a ready template was written again (rv %s -> %s)", rv, got)
	}

	// The snapshot vanished from the backend (or another node built it):
	// built again here, and the template stays Ready all along for the
	// nodes that have it.
	if err := be.DeleteTemplate(ctx, "desk-g1"); err != nil {
		t.Fatal(err)
	}
	rv = getTemplate(t, st, "desk").Metadata.ResourceVersion
	reconcileTemplate(t, nd, "desk")
	if got := getTemplate(t, st, "desk").Metadata.ResourceVersion; got != rv {
		t.Errorf("building this node's copy wrote the template (rv %s -> %s)", rv, got)
	}
	if got, want := be.Count(fake.OpBuildTemplate), builds+1; got != want {
		t.Errorf("%d builds, want %d", got, want)
	}
	if _, err := be.InspectTemplate(ctx, "desk-g1"); err != nil {
		t.Errorf("the missing snapshot was not built again: %v", err)
	}
	evs, err := st.ListEvents(ctx, store.EventFilter{Kind: api.KindTemplate, Name: "desk"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(ev *api.Event) bool { return ev.Reason == "Building" && strings.Contains(ev.Message, "on node n1") }) {
		t.Errorf("no event says this node builds its copy")
	}
	if got := getTemplate(t, st, "desk").Status.Phase; got != api.TemplateReady {
		t.Errorf("phase %s after the rebuild, want Ready", got)
	}

	// A new spec is a new snapshot.
	tpl = getTemplate(t, st, "desk")
	tpl.Spec.Resources.MemoryMB = 1024
	if _, _, err := st.Update(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	reconcileTemplate(t, nd, "desk")
	tpl = getTemplate(t, st, "desk")
	if tpl.Status.Snapshot == nil || tpl.Status.Snapshot.ID != "desk-g2" || tpl.Status.Snapshot.MemoryBytes != 1024<<20 {
		t.Fatalf("snapshot %+v, want desk-g2 of 1024 MB", tpl.Status.Snapshot)
	}
	if got, want := tpl.Status.ObservedGeneration, int64(2); got != want {
		t.Errorf("observedGeneration %d, want %d", got, want)
	}

	// Deleting the template deletes its snapshot, then lets it go.
	if _, _, err := st.Delete(ctx, api.KindTemplate, "desk", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	reconcileTemplate(t, nd, "desk")
	if _, err := st.Get(ctx, api.KindTemplate, "desk"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("template after deletion: %v, want not found", err)
	}
	if _, err := be.InspectTemplate(ctx, "desk-g2"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("snapshot desk-g2 after the template's deletion: %v, want not found", err)
	}
	// A deleted template is nothing to do.
	reconcileTemplate(t, nd, "desk")
}

// TestTemplateDeletionRemovesEverySnapshot deletes a template whose spec
// changed after a shape of it was built: the snapshots of the earlier
// generation (its own and its shape's, kept while clones of them may run)
// must go with the template too.
func TestTemplateDeletionRemovesEverySnapshot(t *testing.T) {
	ctx := context.Background()
	nd, st, be := newNode(t, nil)
	if _, err := st.Create(ctx, yamlObj(t, deskTemplate)); err != nil {
		t.Fatal(err)
	}
	reconcileTemplate(t, nd, "desk")
	// A sandbox of another shape asks for it; the template builds it.
	if _, err := st.Create(ctx, yamlObj(t, sandboxYAML("big", "  resources: {memoryMB: 1024}\n"))); err != nil {
		t.Fatal(err)
	}
	if _, err := nd.reconcileSandbox(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	reconcileTemplate(t, nd, "desk")
	tpl := getTemplate(t, st, "desk")
	if len(tpl.Status.Shapes) != 1 || tpl.Status.Shapes[0].Phase != "Ready" {
		t.Fatalf("shapes %+v, want one ready", tpl.Status.Shapes)
	}
	ids := []string{"desk-g1", tpl.Status.Shapes[0].ID}
	tpl.Spec.Resources.MemoryMB = 2048
	if _, _, err := st.Update(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	reconcileTemplate(t, nd, "desk")
	ids = append(ids, getTemplate(t, st, "desk").Status.Snapshot.ID)
	if _, _, err := st.Delete(ctx, api.KindTemplate, "desk", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	reconcileTemplate(t, nd, "desk")
	for _, id := range ids {
		if _, err := be.InspectTemplate(ctx, id); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("snapshot %s after the template's deletion: %v, want not found", id, err)
		}
	}
}

func TestTemplateBuildFails(t *testing.T) {
	tests := []struct {
		err    error
		reason string
	}{
		{fmt.Errorf("image linux-desktop: %w", api.ErrNotFound), "ImageNotFound"},
		{fmt.Errorf("1024 MB more: %w", api.ErrUnavailable), "InsufficientMemory"},
		{errors.New("the guest never answered"), "BuildFailed"},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			ctx := context.Background()
			nd, st, be := newNode(t, nil)
			if _, err := st.Create(ctx, yamlObj(t, deskTemplate)); err != nil {
				t.Fatal(err)
			}
			be.FailNext(fake.OpBuildTemplate, "desk-g1", tt.err)
			res, err := nd.reconcileTemplate(ctx, "desk")
			if err != nil {
				t.Fatal(err)
			}
			tpl := getTemplate(t, st, "desk")
			if got, want := tpl.Status.Phase+"/"+tpl.Status.Reason, "Failed/"+tt.reason; got != want {
				t.Errorf("phase/reason %s, want %s", got, want)
			}
			if tpl.Status.Snapshot != nil {
				t.Errorf("a failed build has snapshot %+v", tpl.Status.Snapshot)
			}
			if res.RequeueAfter <= 0 {
				t.Errorf("requeue after %s, want a later try", res.RequeueAfter)
			}
			if got := count(storeEvents(t, st, api.KindTemplate, "desk"), tt.reason); got != 1 {
				t.Errorf("%d %s events, want 1", got, tt.reason)
			}
			// The next try succeeds.
			reconcileTemplate(t, nd, "desk")
			if got := getTemplate(t, st, "desk").Status.Phase; got != api.TemplateReady {
				t.Errorf("after a good try: phase %s, want Ready", got)
			}
		})
	}
}

// TestTemplateReadyStartsWaitingSandboxes creates a sandbox before its
// template: it waits, Pending with the reason, and starts once the
// template is applied and built.
func TestTemplateReadyStartsWaitingSandboxes(t *testing.T) {
	c := newCluster(t)
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Sandbox
metadata: {name: box}
spec: {templateRef: later}
`))
	eventually(t, "sandbox waits for its template", func() (bool, string) {
		sb := c.sandbox(t, "box")
		return sb.Status.Phase == api.SandboxPending && sb.Status.Reason == "TemplateNotFound", sb.Status.Phase + "/" + sb.Status.Reason
	})
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Template
metadata: {name: later}
spec:
  qemu: {image: linux-desktop}
`))
	eventually(t, "sandbox runs once its template is ready", func() (bool, string) {
		sb := c.sandbox(t, "box")
		return sb.Status.Phase == api.SandboxRunning, sb.Status.Phase + "/" + sb.Status.Reason
	})
	if got, want := c.sandbox(t, "box").Status.Template, "later"; got != want {
		t.Errorf("status.template %q, want %q", got, want)
	}
}

// TestSweepSnapshots: a node removes its snapshots of templates that are
// gone, and keeps every snapshot a template still names or may be
// building, and those of a template its sandboxes still name.
func TestSweepSnapshots(t *testing.T) {
	ctx := context.Background()
	long := strings.Repeat("a", api.MaxNameLength)
	cut := snapshotID(&api.Template{Metadata: api.ObjectMeta{Name: long, Generation: 12}})
	tpl := func(name string, gen int64, status api.TemplateStatus) *api.Template {
		return &api.Template{Metadata: api.ObjectMeta{Name: name, Generation: gen}, Status: status}
	}
	tests := []struct {
		name  string
		have  []string
		tpls  []*api.Template
		uses  []string // the templates this node's sandboxes name
		after []string
	}{
		{name: "a deleted template's snapshots and shapes go",
			have: []string{"gone-g1", "gone-g2-m1024-1280x800", "desk-g1"},
			tpls: []*api.Template{tpl("desk", 1, api.TemplateStatus{Snapshot: &api.TemplateSnapshot{ID: "desk-g1"}})}, after: []string{"desk-g1"}},
		{name: "retired and shape snapshots stay",
			have:  []string{"desk-g1", "desk-g1-m1024-1280x800", "desk-g2"},
			tpls:  []*api.Template{tpl("desk", 2, api.TemplateStatus{Snapshot: &api.TemplateSnapshot{ID: "desk-g2"}, Retired: []string{"desk-g1", "desk-g1-m1024-1280x800"}})},
			after: []string{"desk-g1", "desk-g1-m1024-1280x800", "desk-g2"}},
		{name: "a build of the current generation not yet in status stays",
			have: []string{"desk-g3", "desk-g3-m2048-1920x1080"}, tpls: []*api.Template{tpl("desk", 3, api.TemplateStatus{})},
			after: []string{"desk-g3", "desk-g3-m2048-1920x1080"}},
		{name: "a template of a similar name keeps nothing of another",
			have: []string{"desk-g1", "desk-g1-g1"}, tpls: []*api.Template{tpl("desk-g1", 1, api.TemplateStatus{})}, after: []string{"desk-g1-g1"}},
		{name: "a sandbox here still names the deleted template",
			have: []string{"gone-g1", "other-g1"}, uses: []string{"gone"}, after: []string{"gone-g1"}},
		{name: "a long name cut to fit", have: []string{cut, "b-g1"}, uses: []string{long}, after: []string{cut}},
		{name: "no templates at all", have: []string{"desk-g1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nd, _, be := newNode(t, nil)
			for _, id := range tt.have {
				if _, err := be.BuildTemplate(ctx, backend.TemplateSpec{ID: id}, nil); err != nil {
					t.Fatal(err)
				}
			}
			var sbs []*api.Sandbox
			for _, name := range tt.uses {
				sbs = append(sbs, &api.Sandbox{Spec: api.SandboxSpec{TemplateRef: name}})
			}
			c, err := be.Capacity(ctx)
			if err != nil {
				t.Fatal(err)
			}
			nd.sweepSnapshots(ctx, c, sbs, tt.tpls)
			var left []string
			for _, id := range tt.have {
				if _, err := be.InspectTemplate(ctx, id); err == nil {
					left = append(left, id)
				}
			}
			if !slices.Equal(left, tt.after) {
				t.Errorf("snapshots left %v, want %v", left, tt.after)
			}
		})
	}
}

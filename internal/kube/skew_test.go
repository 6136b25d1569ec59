package kube_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// TestUnknownFieldsSurviveOnKubernetes is version skew: a newer hvkube
// installed CRDs with fields this binary does not know and wrote them.
// A spec update and a status write of this binary (a replica of the older
// version) keep them: each write names only what it changes.
func TestUnknownFieldsSurviveOnKubernetes(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The newer CRD: spec.future and status.future (added, so the other
	// tests of this API server are unaffected; taken out after).
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	crd, err := crds.Get(ctx, "sandboxes.hvkube.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orig := crd.DeepCopy()
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for i, v := range versions {
		vm := v.(map[string]any)
		for _, part := range []string{"spec", "status"} {
			path := []string{"schema", "openAPIV3Schema", "properties", part, "properties", "future"}
			if err := unstructured.SetNestedField(vm, map[string]any{"type": "string"}, path...); err != nil {
				t.Fatal(err)
			}
		}
		versions[i] = vm
	}
	unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions")
	if _, err := crds.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur, err := crds.Get(context.Background(), "sandboxes.hvkube.io", metav1.GetOptions{})
		if err == nil {
			orig.SetResourceVersion(cur.GetResourceVersion())
			crds.Update(context.Background(), orig, metav1.UpdateOptions{})
		}
	})

	st, err := kube.Open(ctx, kube.Options{Config: env.Config, Namespace: ns, Component: "hvkube-older"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "skew"
	sb.Spec.TemplateRef = "desk"
	api.Default(sb)
	if _, err := st.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	// The newer version writes its fields (the schema takes a moment to
	// be served).
	res := dyn.Resource(schema.GroupVersionResource{Group: "hvkube.io", Version: "v1", Resource: "sandboxes"}).Namespace(ns)
	future := func() (string, string) {
		u, err := res.Get(ctx, "skew", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, _, _ := unstructured.NestedString(u.Object, "spec", "future")
		b, _, _ := unstructured.NestedString(u.Object, "status", "future")
		return a, b
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		res.Patch(ctx, "skew", types.MergePatchType, []byte(`{"spec":{"future":"kept"}}`), metav1.PatchOptions{})
		res.Patch(ctx, "skew", types.MergePatchType, []byte(`{"status":{"future":"kept"}}`), metav1.PatchOptions{}, "status")
		if a, b := future(); a == "kept" && b == "kept" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the API server never took the newer CRD's fields")
		}
	}

	// This binary: a spec update and status writes, conditioned and not.
	o, err := st.Get(ctx, api.KindSandbox, "skew")
	if err != nil {
		t.Fatal(err)
	}
	o.GetMeta().Labels = map[string]string{"pool": "web"}
	o.(*api.Sandbox).Spec.Lifecycle.TimeoutMinutes = 30
	if _, changed, err := st.Update(ctx, o); err != nil || !changed {
		t.Fatalf("spec update: changed %v, %v", changed, err)
	}
	if _, err := reconcile.UpdateStatus(ctx, st, api.KindSandbox, "skew", func(s *api.Sandbox) bool {
		s.Status.Message = "written by the older version"
		return true
	}); err != nil {
		t.Fatalf("status write: %v", err)
	}
	cur, err := st.Get(ctx, api.KindSandbox, "skew")
	if err != nil {
		t.Fatal(err)
	}
	next := api.DeepCopy(cur.(*api.Sandbox))
	next.Status.Message = ""
	next.Status.Phase = api.SandboxPaused
	if _, err := st.UpdateStatus(ctx, next); err != nil {
		t.Fatalf("conditioned status write: %v", err)
	}
	if a, b := future(); a != "kept" || b != "kept" {
		t.Errorf("after this binary's writes: spec.future %q, status.future %q; want both kept", a, b)
	}
	got, err := st.Get(ctx, api.KindSandbox, "skew")
	if err != nil {
		t.Fatal(err)
	}
	g := got.(*api.Sandbox)
	if g.Spec.Lifecycle.TimeoutMinutes != 30 || g.Metadata.Labels["pool"] != "web" || g.Status.Phase != api.SandboxPaused || g.Status.Message != "" {
		t.Errorf("this binary's own writes: timeout %d, labels %v, phase %s, message %q", g.Spec.Lifecycle.TimeoutMinutes, g.Metadata.Labels, g.Status.Phase, g.Status.Message)
	}
	// The writes are the component's (its field manager), on both the
	// object and its status.
	u, err := res.Get(ctx, "skew", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	managed := map[string]bool{}
	for _, f := range u.GetManagedFields() {
		managed[f.Manager+"/"+f.Subresource] = true
	}
	if !managed["hvkube-older/"] || !managed["hvkube-older/status"] {
		t.Errorf("field managers %v, want hvkube-older on the object and its status", managed)
	}
	// A write conditioned on a version older than the stored one loses.
	stale := api.DeepCopy(cur.(*api.Sandbox))
	stale.Status.Message = "stale"
	if _, err := st.UpdateStatus(ctx, stale); err == nil {
		t.Error("a status write at an old version went through")
	}
}

//go:build linux

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/hvkube/hvkube/internal/kube/kubetest"
)

// TestServeOnKubernetes runs hvkube serve --store kubernetes on a real
// kube-apiserver and drives it with the CLI, unchanged: what it applies
// lands as custom resources in the namespace, the pool controller makes
// its members there, and get, scale, describe and delete work as on
// SQLite.
func TestServeOnKubernetes(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	p := startServe(t, t.TempDir(), nil, "--backend", "none", "--store", "kubernetes", "--kubeconfig", env.Kubeconfig(t, ns))
	if !strings.Contains(p.log(), "namespace="+ns) {
		t.Errorf("the server did not say which namespace it uses:\n%s", p.log())
	}
	mustHV(t, p, "apply", "-f", "../../examples/template.yaml", "-f", "../../examples/sandboxpool.yaml")
	out := mustHV(t, p, "get", "pools")
	if !strings.Contains(out, "browser-workers") {
		t.Fatalf("get pools:\n%s", out)
	}
	mustHV(t, p, "scale", "pool", "browser-workers", "--replicas", "2")

	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := func(plural string) dynamic.ResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: "hvkube.io", Version: "v1", Resource: plural}).Namespace(ns)
	}
	pool, err := gvr("sandboxpools").Get(context.Background(), "browser-workers", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the pool is not a custom resource in %s: %v", ns, err)
	}
	if r, _, _ := unstructured.NestedInt64(pool.Object, "spec", "replicas"); r != 2 {
		t.Errorf("spec.replicas %d in Kubernetes, want 2", r)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := gvr("sandboxes").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sandboxes in Kubernetes after 30s, want the pool's 2", len(l.Items))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out := mustHV(t, p, "get", "sandboxes"); strings.Count(out, "browser-workers-") != 2 {
		t.Errorf("get sandboxes:\n%s", out)
	}
	if out := mustHV(t, p, "describe", "pool", "browser-workers"); !strings.Contains(out, "Scaled") {
		t.Errorf("describe shows no Scaled event:\n%s", out)
	}
	mustHV(t, p, "delete", "pool", "browser-workers")
	if out, err := hv(t, p, "get", "template", "nope"); err == nil || !strings.Contains(out, "not found") {
		t.Errorf("get of a missing template: %v %s", err, out)
	}
}

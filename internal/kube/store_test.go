package kube_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/crd"

	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// open returns a Kubernetes store on a namespace of the test's own.
func open(t *testing.T) *kube.Store {
	t.Helper()
	env := kubetest.Start(t)
	s, err := kube.Open(context.Background(), kube.Options{Config: env.Config, Namespace: env.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the store suite on a real kube-apiserver.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Interface { return open(t) })
}

// TestCRDsValidateSeedYAML sends the seed's YAML and the examples, with
// apiVersion hvkube.io/v1, to the API server (dry run, strict field
// validation): the CRDs' schemas accept every document hvkube accepts.
func TestCRDsValidateSeedYAML(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../api/testdata/seed/*.yaml")
	more, _ := filepath.Glob("../../examples/*.yaml")
	files = append(files, more...)
	if len(files) < 5 {
		t.Fatalf("found %d documents to check", len(files))
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(b), "\n---") {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			if m == nil {
				continue
			}
			// hvkube takes it first: only documents it accepts count.
			if _, err := api.DecodeOne([]byte(doc), api.DecodeOptions{}); err != nil {
				continue
			}
			m["apiVersion"] = api.KubeVersion
			k, ok := api.LookupKind(m["kind"].(string))
			if !ok {
				t.Fatalf("%s #%d: kind %v", f, i, m["kind"])
			}
			r := dyn.Resource(schema.GroupVersionResource{Group: crd.Group, Version: crd.Version, Resource: k.Plural}).Namespace(ns)
			_, err := r.Create(context.Background(), &unstructured.Unstructured{Object: m}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
			if err != nil {
				t.Errorf("%s #%d (%s): the CRD refused it: %v", filepath.Base(f), i, k.Kind, err)
			}
			n++
		}
	}
	t.Logf("%d documents validated", n)
	if n < 5 {
		t.Errorf("only %d documents validated", n)
	}
	// And the schemas are not open: a field no Go type has, or a value of
	// the wrong type, is refused.
	pools := dyn.Resource(schema.GroupVersionResource{Group: crd.Group, Version: crd.Version, Resource: "sandboxpools"}).Namespace(ns)
	for _, spec := range []map[string]any{
		{"replicas": 1, "bogus": true},
		{"replicas": "three"},
	} {
		bad := map[string]any{"apiVersion": api.KubeVersion, "kind": api.KindSandboxPool, "metadata": map[string]any{"name": "bad"}, "spec": spec}
		if _, err := pools.Create(context.Background(), &unstructured.Unstructured{Object: bad}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err == nil {
			t.Errorf("spec %v was accepted", spec)
		}
	}
}

// TestWatchFromTooOld: a watch from a resourceVersion the API server no
// longer holds ends with api.ErrGone (its 410), which makes a Manager list
// again.
func TestWatchFromTooOld(t *testing.T) {
	s := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := s.WatchFrom(ctx, api.KindSandboxPool, api.Selector{}, "1")
	if err != nil {
		if !errors.Is(err, api.ErrGone) {
			t.Fatalf("watch from 1: %v, want ErrGone", err)
		}
		return
	}
	for range w.Events() {
	}
	if err := w.Err(); !errors.Is(err, api.ErrGone) {
		t.Fatalf("the watch from 1 ended with %v, want ErrGone", err)
	}
}

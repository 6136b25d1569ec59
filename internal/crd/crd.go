// Package crd installs hvkube's CustomResourceDefinitions: one per kind, in
// group hvkube.io, version v1, namespaced, with the status subresource (and
// scale for pools) and the printer columns of `hvkube get`. They are
// generated from the Go types of package api and their markers into
// deploy/crds (make crds, by ./crdgen), and the binary carries those files.
package crd

import (
	"context"
	"fmt"
	"path"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/hvkube/hvkube/deploy"
	"github.com/hvkube/hvkube/internal/api"
)

// Group is the API group of hvkube's kinds on Kubernetes.
const Group = "hvkube.io"

// Version is the one version served.
const Version = "v1"

// Category lets `kubectl get hvkube` list every kind.
const Category = "hvkube"

// FileName is where deploy/crds keeps the CRD of a kind.
func FileName(k api.KindInfo) string { return Group + "_" + k.Plural + ".yaml" }

// Files returns the generated CRD of each kind as its file holds it, in the
// order of api.Kinds.
func Files() ([][]byte, error) {
	var out [][]byte
	for _, k := range api.Kinds {
		b, err := deploy.CRDs.ReadFile(path.Join("crds", FileName(k)))
		if err != nil {
			return nil, fmt.Errorf("the CRD of %s: %w", k.Kind, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// All returns the CRDs of every kind, in the order of api.Kinds.
func All() ([]map[string]any, error) {
	files, err := Files()
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, b := range files {
		var c map[string]any
		if err := yaml.Unmarshal(b, &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Install creates or updates hvkube's CRDs on the API server cfg reaches,
// waits until each is established, and lists each kind once (the first
// list of a new CRD may answer 429 while it is set up).
func Install(ctx context.Context, cfg *rest.Config) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	all, err := All()
	if err != nil {
		return err
	}
	crds := dyn.Resource(crdResource)
	for _, c := range all {
		u := &unstructured.Unstructured{Object: c}
		cur, err := crds.Get(ctx, u.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = crds.Create(ctx, u, metav1.CreateOptions{})
		case err == nil:
			u.SetResourceVersion(cur.GetResourceVersion())
			_, err = crds.Update(ctx, u, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("install CRD %s: %w", u.GetName(), err)
		}
	}
	for _, k := range api.Kinds {
		name := k.Plural + "." + Group
		for {
			u, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if established(u) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("CRD %s not established: %w", name, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
		gvr := schema.GroupVersionResource{Group: Group, Version: Version, Resource: k.Plural}
		for {
			_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			if err == nil {
				break
			}
			if !apierrors.IsTooManyRequests(err) && !apierrors.IsNotFound(err) || ctx.Err() != nil {
				return fmt.Errorf("list %s: %w", k.Plural, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func established(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

package kube

import (
	"encoding/json"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hvkube/hvkube/internal/api"
)

// toKube is o as a custom resource of this store's namespace: apiVersion
// hvkube.io/v1, owner references with the apiVersion Kubernetes requires.
func (s *Store) toKube(o api.Object) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["apiVersion"] = api.KubeVersion
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		m["metadata"] = meta
	}
	meta["namespace"] = s.ns
	if refs, ok := meta["ownerReferences"].([]any); ok {
		for _, r := range refs {
			if rm, ok := r.(map[string]any); ok {
				rm["apiVersion"] = api.KubeVersion
			}
		}
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// fromKube is a custom resource as hvkube's object. What Kubernetes adds
// to metadata (namespace, managedFields…) has no field there and is left.
// apimachinery's converter fills the object from the map, at half the
// CPU of a JSON round trip (BenchmarkFromKube); what it refuses is
// decoded through JSON, whose error names the field.
func fromKube(u *unstructured.Unstructured) (api.Object, error) {
	o, err := api.New(u.GetKind())
	if err != nil {
		return nil, err
	}
	if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, o) != nil {
		if o, err = fromKubeJSON(u); err != nil {
			return nil, err
		}
	}
	o.GetTypeMeta().APIVersion = api.Version
	return o, nil
}

// fromKubeJSON is fromKube through JSON.
func fromKubeJSON(u *unstructured.Unstructured) (api.Object, error) {
	o, err := api.New(u.GetKind())
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, o); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return o, nil
}

// isZero reports whether a status holds nothing.
func isZero(st any) bool {
	return reflect.ValueOf(st).Elem().IsZero()
}

func typesUID(s string) types.UID { return types.UID(s) }

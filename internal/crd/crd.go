// Package crd generates hvkube's CustomResourceDefinitions from the Go types
// of package api: one per kind, in group hvkube.io, version v1, namespaced,
// with the status subresource (and scale for pools) and the printer columns
// of `hvkube get`. deploy/crds holds what it generates; a test keeps the two
// the same.
package crd

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/hvkube/hvkube/internal/api"
)

// Group is the API group of hvkube's kinds on Kubernetes.
const Group = "hvkube.io"

// Version is the one version served.
const Version = "v1"

// Category lets `kubectl get hvkube` list every kind.
const Category = "hvkube"

// Column is a printer column: what `kubectl get` shows, matching `hvkube
// get` where a JSONPath can say it.
type Column struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	JSONPath string `json:"jsonPath"`
	Priority int    `json:"priority,omitempty"` // 1: -o wide only
}

// columns are the printer columns of each kind. hvkube get derives some
// (a sandbox's STATUS says Claimed, Deleting…); here the stored field
// nearest to it stands in.
var columns = map[string][]Column{
	api.KindTemplate: {
		{"Phase", "string", ".status.phase", 0},
		{"Resolution", "string", ".spec.display.resolution", 0},
		{"CPU", "integer", ".spec.resources.cpu", 0},
		{"Memory", "integer", ".spec.resources.memoryMB", 0},
		{"Image", "string", ".spec.qemu.image", 1},
	},
	api.KindSandbox: {
		{"Status", "string", ".status.phase", 0},
		{"Pool", "string", `.metadata.ownerReferences[?(@.kind=="SandboxPool")].name`, 0},
		{"Agent", "string", ".status.currentAgent", 0},
		{"Node", "string", ".status.node", 0},
		{"Template", "string", ".spec.templateRef", 1},
		{"PID", "integer", ".status.pid", 1},
	},
	api.KindSandboxPool: {
		{"Ready", "integer", ".status.ready", 0},
		{"Desired", "integer", ".status.desired", 0},
		{"Warm", "integer", ".status.warm", 0},
		{"Busy", "integer", ".status.busy", 0},
		{"Tier", "string", ".spec.warmTier", 1},
		{"Template", "string", ".spec.template.spec.templateRef", 1},
	},
	api.KindAgent: {
		{"Status", "string", ".status.phase", 0},
		{"Sandbox", "string", ".status.sandbox", 0},
		{"Type", "string", ".spec.type", 1},
		{"Attempts", "integer", ".status.attempts", 1},
		{"Node", "string", ".status.node", 1},
		{"Reason", "string", ".status.reason", 1},
	},
	api.KindDisplayService: {
		{"Type", "string", ".spec.type", 0},
		{"Gateway", "string", ".spec.gateway.path", 1},
	},
	api.KindNode: {
		{"Backend", "string", ".status.backend", 0},
		{"Used MiB", "integer", ".status.memory.usedMB", 0},
		{"Free MiB", "integer", ".status.memory.freeMB", 0},
		{"Heartbeat", "date", ".status.lastHeartbeat", 0},
	},
}

// shortNames that clash with Kubernetes' own (ds is DaemonSet's, no is
// Node's) are left out: kubectl would not know which is meant.
var clashing = map[string]bool{"ds": true, "no": true}

// All returns the CRDs of every kind, in the order of api.Kinds.
func All() ([]map[string]any, error) {
	var out []map[string]any
	for _, k := range api.Kinds {
		c, err := For(k)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// For returns the CRD of one kind as a generic object, ready to marshal.
func For(k api.KindInfo) (map[string]any, error) {
	obj, err := api.New(k.Kind)
	if err != nil {
		return nil, err
	}
	t := reflect.TypeOf(obj).Elem()
	props := map[string]any{
		"apiVersion": map[string]any{"type": "string"},
		"kind":       map[string]any{"type": "string"},
		"metadata":   map[string]any{"type": "object"},
	}
	for _, part := range []string{"spec", "status"} {
		f, ok := fieldByJSON(t, part)
		if !ok {
			continue
		}
		g := &gen{seen: map[reflect.Type]bool{}}
		props[part] = g.schema(f.Type)
	}
	var short []string
	for _, s := range k.Short {
		if !clashing[s] {
			short = append(short, s)
		}
	}
	cols := []any{}
	for _, c := range columns[k.Kind] {
		cols = append(cols, c)
	}
	cols = append(cols, Column{"Age", "date", ".metadata.creationTimestamp", 0})
	sub := map[string]any{"status": map[string]any{}}
	if k.Kind == api.KindSandboxPool {
		sub["scale"] = map[string]any{"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
	}
	names := map[string]any{"kind": k.Kind, "listKind": k.Kind + "List", "plural": k.Plural, "singular": k.Singular, "categories": []string{Category}}
	if len(short) > 0 {
		names["shortNames"] = short
	}
	return map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": k.Plural + "." + Group},
		"spec": map[string]any{
			"group": Group,
			"names": names,
			"scope": "Namespaced",
			"versions": []any{map[string]any{
				"name":    Version,
				"served":  true,
				"storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type":        "object",
					"description": fmt.Sprintf("%s is hvkube's %s; the REST API and the CLI take the same document with apiVersion %s.", k.Kind, k.Singular, api.Version),
					"properties":  props,
				}},
				"subresources":             sub,
				"additionalPrinterColumns": cols,
			}},
		},
	}, nil
}

// gen makes the structural schema of a Go type, as encoding/json reads it.
type gen struct {
	seen map[reflect.Type]bool // the structs being made, against recursion
}

var (
	timeType        = reflect.TypeOf(time.Time{})
	durationType    = reflect.TypeOf(time.Duration(0))
	rawType         = reflect.TypeOf(json.RawMessage(nil))
	intOrStringType = reflect.TypeOf(api.IntOrString{})
	unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
)

// free is a value of any shape: the API server keeps it as sent.
func free() map[string]any { return map[string]any{"x-kubernetes-preserve-unknown-fields": true} }

func (g *gen) schema(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == durationType:
		return map[string]any{"type": "integer", "format": "int64"}
	case t == intOrStringType:
		return map[string]any{"x-kubernetes-int-or-string": true}
	case t == rawType || t.Kind() == reflect.Interface:
		return free()
	case reflect.PointerTo(t).Implements(unmarshalerType):
		return free() // a value of its own shape (one string or a list)
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return map[string]any{"type": "integer"}
	case reflect.Int64, reflect.Uint, reflect.Uint64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"}
		}
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Struct:
		if g.seen[t] {
			return free() // a type that holds itself: kept as sent
		}
		g.seen[t] = true
		defer delete(g.seen, t)
		props := map[string]any{}
		g.fields(t, props)
		s := map[string]any{"type": "object"}
		if len(props) > 0 {
			s["properties"] = props
		}
		return s
	}
	return free()
}

// fields adds t's JSON fields to props, embedded structs inlined.
func (g *gen) fields(t reflect.Type, props map[string]any) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, skip := jsonName(f)
		if skip {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				g.fields(ft, props)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.schema(f.Type)
	}
}

// jsonName is the field's name in JSON ("" when the tag names none) and
// whether encoding/json skips it.
func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	if tag == "-" {
		return "", true
	}
	name, _, _ := strings.Cut(tag, ",")
	return name, false
}

func fieldByJSON(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		if n, skip := jsonName(t.Field(i)); !skip && n == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

// FileName is where deploy/crds keeps the CRD of a kind.
func FileName(k api.KindInfo) string { return Group + "_" + k.Plural + ".yaml" }

// YAML returns one CRD as a YAML document.
func YAML(c map[string]any) ([]byte, error) {
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Generated by `hvkube crds` from the Go types; do not edit.\n"), b...), nil
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

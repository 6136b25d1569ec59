package kube_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
	"github.com/hvkube/hvkube/internal/store"
)

// TestNodeScopeOnKubernetes: a node agent's store lists and watches only
// the sandboxes and agents placed on its node (status.node, a selectable
// field of the CRDs): one placed there later comes into its watch, one
// placed elsewhere leaves it, and the rest of the fleet's changes never
// reach it. Reads by name are not narrowed.
func TestNodeScopeOnKubernetes(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all, err := kube.Open(ctx, kube.Options{Config: env.Config, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	mine, err := kube.Open(ctx, kube.Options{Config: env.Config, Namespace: ns, Host: "node-a", NodeScope: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()

	place := func(name, node string) {
		t.Helper()
		o, err := all.Get(ctx, api.KindSandbox, name)
		if err != nil {
			t.Fatal(err)
		}
		sb := o.(*api.Sandbox)
		sb.Status.Node = node
		if _, err := all.UpdateStatus(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	for name, node := range map[string]string{"on-a": "node-a", "on-b": "node-b", "nowhere": ""} {
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = name
		api.Default(sb)
		if _, err := all.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if node != "" {
			place(name, node)
		}
	}
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name = "job"
	a.Spec.Type, a.Spec.SandboxName = "mcp-agent", "on-b"
	api.Default(a)
	if _, err := all.Create(ctx, a); err != nil {
		t.Fatal(err)
	}

	names := func(items []api.Object) []string {
		var out []string
		for _, o := range items {
			out = append(out, o.GetMeta().Name)
		}
		slices.Sort(out)
		return out
	}
	items, w, err := mine.ListAndWatch(ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(items); !slices.Equal(got, []string{"on-a"}) {
		t.Errorf("node-a lists sandboxes %v, want only on-a", got)
	}
	if agents, _, err := mine.List(ctx, api.KindAgent, api.Selector{}); err != nil || len(agents) != 0 {
		t.Errorf("node-a lists agents %v (%v), want none: none is bound to it", names(agents), err)
	}
	if _, err := mine.Get(ctx, api.KindSandbox, "on-b"); err != nil {
		t.Errorf("a read by name of another node's sandbox: %v", err)
	}

	// Changes elsewhere never reach node-a's watch; a sandbox placed on
	// it comes in, one moved away goes.
	place("on-b", "node-c")
	place("nowhere", "node-a")
	place("on-a", "node-b")
	want := []string{store.Added + " nowhere", store.Deleted + " on-a"}
	var got []string
	for len(got) < len(want) {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("the watch ended: %v (saw %v)", w.Err(), got)
			}
			got = append(got, ev.Type+" "+ev.Object.GetMeta().Name)
		case <-ctx.Done():
			t.Fatalf("saw %v, want %v", got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("node-a's watch saw %v, want %v", got, want)
	}
	select {
	case ev := <-w.Events():
		t.Errorf("node-a's watch saw more: %s %s", ev.Type, ev.Object.GetMeta().Name)
	case <-time.After(500 * time.Millisecond):
	}
}

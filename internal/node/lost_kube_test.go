package node

import (
	"context"
	"testing"

	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
	"github.com/hvkube/hvkube/internal/store"
)

// TestNodeLostOnKubernetes runs the lost-node tests of this package
// unchanged on the Kubernetes store (a real kube-apiserver, a namespace
// per test): a node cut off from the API server fences, is marked lost,
// its work runs elsewhere, and it rejoins.
func TestNodeLostOnKubernetes(t *testing.T) {
	env := kubetest.Start(t)
	testStore = func(t *testing.T) store.API {
		s, err := kube.Open(context.Background(), kube.Options{Config: env.Config, Namespace: env.Namespace(t), Component: "hvkube-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	defer func() { testStore = nil }()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"NodeLostAndBack", TestNodeLostAndBack},
		{"NodeFencesAndRejoins", TestNodeFencesAndRejoins},
	} {
		t.Run(tc.name, tc.fn)
	}
}

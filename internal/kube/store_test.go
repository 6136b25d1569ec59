package kube_test

import (
	"context"
	"os"
	"testing"

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

// Package kubetest starts a real kube-apiserver, on a real etcd, on
// loopback for a test binary: once, the first time a test asks, with
// hvkube's CRDs installed; each test gets a namespace of its own. The
// binaries come from hack/kube/build.sh (HVKUBE_KUBE_ASSETS names their
// directory). Without them a test skips, unless HVKUBE_REQUIRE_KUBE=1 (as
// make test sets it): then it fails.
package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hvkube/hvkube/internal/kube/local"
)

// Env is the test binary's API server.
type Env struct {
	*local.Server
}

var (
	once   sync.Once
	env    *Env
	envErr error
)

// Main runs the tests of a package, then stops the API server if one
// started: call it from TestMain.
func Main(m *testing.M) int {
	code := m.Run()
	if env != nil {
		env.Stop()
	}
	return code
}

// Start returns the test binary's API server, starting it the first time.
func Start(t testing.TB) *Env {
	t.Helper()
	dir := os.Getenv("HVKUBE_KUBE_ASSETS")
	if dir == "" {
		if os.Getenv("HVKUBE_REQUIRE_KUBE") == "1" {
			t.Fatal("HVKUBE_KUBE_ASSETS is not set: build kube-apiserver and etcd with hack/kube/build.sh and set it to the directory it prints")
		}
		t.Skip("no kube-apiserver: set HVKUBE_KUBE_ASSETS=$(hack/kube/build.sh) to run the Kubernetes tests")
	}
	once.Do(func() {
		var s *local.Server
		if s, envErr = local.Launch(dir); envErr == nil {
			env = &Env{s}
		}
	})
	if envErr != nil {
		t.Fatalf("start kube-apiserver: %v", envErr)
	}
	return env
}

// Namespace creates a namespace for one test and returns its name.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := "t-" + hex.EncodeToString(b)
	if err := e.CreateNamespace(context.Background(), name); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// Kubeconfig writes a kubeconfig that reaches the API server as an
// administrator, in namespace ns, and returns its path.
func (e *Env) Kubeconfig(t testing.TB, ns string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := e.WriteKubeconfig(path, ns); err != nil {
		t.Fatal(err)
	}
	return path
}

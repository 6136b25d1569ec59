package layers

import (
	"go/build"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/hvkube/hvkube/"

// root is the module's directory, from this file's.
func root(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot find the test's own file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// deps returns every package of the module that pkg depends on, directly
// or not, through non-test imports.
func deps(t *testing.T, dir, pkg string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	var walk func(p string)
	walk = func(p string) {
		bp, err := build.ImportDir(filepath.Join(dir, strings.TrimPrefix(p, module)), 0)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		for _, imp := range bp.Imports {
			if strings.HasPrefix(imp, module) && !seen[imp] {
				seen[imp] = true
				walk(imp)
			}
		}
	}
	walk(module + pkg)
	return seen
}

// TestLayers: the packages that another implementation fills or that run
// apart from the rest do not depend on what they must not.
func TestLayers(t *testing.T) {
	dir := root(t)
	// The walk sees through packages: the server reaches the store.
	if !deps(t, dir, "internal/server")[module+"internal/store"] {
		t.Fatal("internal/server does not seem to depend on internal/store: the walk is broken")
	}
	tests := []struct {
		pkg    string
		forbid []string // package path prefixes, module-relative
		why    string
	}{
		{"internal/backend", []string{"internal/drivers", "internal/display", "internal/guest"}, "the contract knows no driver, nor the layers that speak it"},
		{"internal/display", []string{"internal/drivers"}, "the action layer speaks the contract"},
		{"internal/guest", []string{"internal/drivers"}, "the guest OS layer speaks the contract"},
		{"internal/server", []string{"internal/drivers", "internal/node", "internal/controller"}, "the API server reaches VMs through the node's operations, and runs no controller itself"},
		{"internal/node", []string{"internal/drivers", "internal/controller", "internal/server"}, "the node runs on any backend and needs only the runtime"},
		{"internal/gateway", []string{"internal/drivers", "internal/controller"}, "the display gateway needs only the runtime"},
		{"internal/controller", []string{"internal/drivers", "internal/backend", "internal/node"}, "object controllers own no VM"},
		{"internal/reconcile", []string{"internal/drivers", "internal/backend", "internal/controller", "internal/node"}, "the runtime knows no controller"},
		{"internal/agentstate", []string{"internal/store", "internal/reconcile", "internal/controller"}, "the state machine writes nothing"},
		{"internal/store", []string{"internal/drivers", "internal/backend", "internal/reconcile", "internal/controller", "internal/kube"}, "the store knows only objects, and no implementation but its own"},
		{"internal/kube", []string{"internal/drivers", "internal/backend", "internal/reconcile", "internal/controller", "internal/node", "internal/server"}, "the Kubernetes store knows only objects"},
		{"internal/controller", []string{"internal/kube"}, "controllers run on any store"},
		{"internal/node", []string{"internal/kube"}, "the node runs on any store"},
		{"internal/server", []string{"internal/kube"}, "the API server runs on any store"},
		{"internal/cli", []string{"internal/drivers", "internal/vmdebug", "internal/node", "internal/server"}, "the CLI is a client of the API: QEMU's sockets are the debug tools' (cmd/hvkube)"},
		{"internal/backend/direct", []string{"internal/drivers", "internal/display", "internal/guest", "internal/vmdebug"}, "the contract knows no driver, nor the tools that use it"},
		{"internal/vmdebug", []string{"internal/drivers"}, "the debug tools reach a VM through the direct contract; cmd/hvkube gives them the QEMU driver's"},
	}
	for _, tc := range tests {
		t.Run(tc.pkg, func(t *testing.T) {
			var bad []string
			for d := range deps(t, dir, tc.pkg) {
				rel := strings.TrimPrefix(d, module)
				for _, f := range tc.forbid {
					if rel == f || strings.HasPrefix(rel, f+"/") {
						bad = append(bad, rel)
					}
				}
			}
			sort.Strings(bad)
			if len(bad) > 0 {
				t.Errorf("%s depends on %s: it must not (%s)", tc.pkg, strings.Join(bad, ", "), tc.why)
			}
		})
	}
}

package node

import (
	"context"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
	"github.com/hvkube/hvkube/internal/store"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// TestControlLoopOnKubernetes runs control-loop tests of this package
// unchanged on the Kubernetes store (a real kube-apiserver, a namespace
// per test): pools fill, agents complete, releases reset, sandboxes are
// replaced, a node restarts mid-run.
func TestControlLoopOnKubernetes(t *testing.T) {
	onKubernetes(t, map[string]func(*testing.T){
		"SandboxLifecycle":                 TestSandboxLifecycle,
		"WorkflowAgentRunsToCompletion":    TestWorkflowAgentRunsToCompletion,
		"WorkflowAgentFailsAndRetries":     TestWorkflowAgentFailsAndRetries,
		"ReleasePolicies":                  TestReleasePolicies,
		"ReleasePolicyDestroy":             TestReleasePolicyDestroy,
		"PoolReplacesUnhealthyIdleSandbox": TestPoolReplacesUnhealthyIdleSandbox,
		"DeleteRunningAgent":               TestDeleteRunningAgent,
		"NodeRestartMidRun":                TestNodeRestartMidRun,
	})
}

// onKubernetes runs tests of this package unchanged on the Kubernetes
// store, each in a namespace of its own, in the order of their names.
func onKubernetes(t *testing.T, tests map[string]func(*testing.T)) {
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
	for _, name := range slices.Sorted(maps.Keys(tests)) {
		t.Run(name, tests[name])
	}
}

package bench

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
	"github.com/hvkube/hvkube/internal/store"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// TestClaimStoreCalls counts what claims cost the store (SQLite): each
// claim, from the agent's creation through its run to the release of its
// sandbox, reads nothing (every controller and node reads its watch, and
// its own writes), and writes its objects a bounded number of times.
func TestClaimStoreCalls(t *testing.T) { testClaimStoreCalls(t, nil, "sqlite") }

// TestClaimStoreCallsOnKubernetes is TestClaimStoreCalls on a real
// kube-apiserver.
func TestClaimStoreCallsOnKubernetes(t *testing.T) {
	env := kubetest.Start(t)
	testClaimStoreCalls(t, kubeStore(env, env.Namespace(t)), "kubernetes")
}

// Object writes per claim: the agent's creation; the claim of its
// sandbox, which makes it Running and is the whole binding (the
// scheduler); the attempt's start, one write of the agent conditioned on
// the version the claim recorded (the node, which resumes the sandbox and
// writes nothing of it); the outcome (the node), which says the sandbox
// was reset before it: the next claim of the sandbox is its release's
// write too (the scheduler takes a sandbox released so first).
const (
	agentWritesPerClaim   = 3
	sandboxWritesPerClaim = 1
)

func testClaimStoreCalls(t *testing.T, open StoreFunc, name string) {
	const claims = 50
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The nodes write a release no claim took only after a minute: the
	// count is of what the claims cost, whatever this machine's pace.
	_, res, err := runClaims(ctx, ClaimsOptions{Nodes: 2, PerNode: 5, Claims: claims, Parallel: 1,
		HealthInterval: time.Hour, NodeResync: 10 * time.Minute, Store: open, StoreName: name, Log: &out,
		releaseWriteDelay: time.Minute})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.completed != claims || res.doubleBinds != 0 {
		t.Fatalf("%d of %d agents completed, %d double binds: %v", res.completed, claims, res.doubleBinds, res.failures)
	}
	t.Logf("store calls: %s", perClaim(res.calls, claims))
	for k, n := range res.calls {
		// The nodes' heartbeats (Node objects) go on beside the claims;
		// one that lost to another write reads its Node again.
		op, kind, _ := strings.Cut(k, " ")
		if (op == "Get" || op == "List") && kind != api.KindNode {
			t.Errorf("%d claims made %d calls of %s, want none: the claim path reads its watches", claims, n, k)
		}
	}
	writes := func(kind string) int64 {
		return res.calls["Create "+kind] + res.calls["Update "+kind] + res.calls["UpdateStatus "+kind] + res.calls["PatchStatus "+kind] + res.calls["Delete "+kind]
	}
	// A little slack for what the claims' timing may add (a health
	// check's change, a conflict retried), never a write per claim more.
	slack := int64(claims / 10)
	for _, w := range []struct {
		kind string
		want int64
	}{{"Agent", agentWritesPerClaim * claims}, {"Sandbox", sandboxWritesPerClaim * claims},
		// A pool's counts change with every claim and are written at
		// most once a second (they were written 1.7 times per claim):
		// far fewer than one per claim however slow the machine.
		{"SandboxPool", claims/2 - slack}} {
		if got := writes(w.kind); got > w.want+slack {
			t.Errorf("%d claims wrote %s objects %d times, want at most %d", claims, w.kind, got, w.want+slack)
		}
	}
}

// kubeStore opens a Kubernetes store in namespace ns of env, not rate
// limited (one client stands in for a cluster's).
func kubeStore(env *kubetest.Env, ns string) StoreFunc {
	return func(ctx context.Context, _ string, log *slog.Logger) (store.API, func() error, error) {
		cfg := rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = -1, 0
		st, err := kube.Open(ctx, kube.Options{Config: cfg, Namespace: ns, Component: "hvkube-test", Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return st, st.Close, nil
	}
}

// guaranteedClaims is how many claims TestClaims and
// TestClaimsOnKubernetes make: 10,000, or 1,000 under the race detector.
func guaranteedClaims() int {
	if raceOn {
		return 1000
	}
	return 10000
}

// TestClaims runs guaranteedClaims claims on four fake-backend nodes of 25
// warm sandboxes each, on SQLite: every sandbox is claimed a hundred
// times, released and reset in between. No sandbox may be bound to two
// agents at once, every agent completes, each in one attempt.
func TestClaims(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 claims: not in -short")
	}
	testClaims(t, nil, "sqlite")
}

// TestClaimsOnKubernetes is TestClaims on a real kube-apiserver.
func TestClaimsOnKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 claims: not in -short")
	}
	env := kubetest.Start(t)
	testClaims(t, kubeStore(env, env.Namespace(t)), "kubernetes")
}

func testClaims(t *testing.T, open StoreFunc, name string) {
	claims := guaranteedClaims()
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	start := time.Now()
	rep, res, err := runClaims(ctx, ClaimsOptions{Nodes: 4, PerNode: 25, Claims: claims, Parallel: 40,
		HealthInterval: time.Hour, NodeResync: 10 * time.Minute, Store: open, StoreName: name, Log: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var text strings.Builder
	rep.Print(&text)
	t.Logf("in %s:\n%s", time.Since(start).Round(time.Second), text.String())
	if res.doubleBinds != 0 || res.twoClaims != 0 {
		t.Errorf("%d double binds, %d agents claimed on two sandboxes at once, want none", res.doubleBinds, res.twoClaims)
	}
	if res.completed != claims || res.failed != 0 {
		t.Errorf("%d of %d agents completed, %d failed: %v", res.completed, claims, res.failed, res.failures)
	}
	// The agents as stored at the end: each Completed in one attempt
	// (checkStore), no agent completed twice.
	if len(res.problems) > 0 {
		t.Errorf("problems:\n%s", strings.Join(res.problems, "\n"))
	}
}

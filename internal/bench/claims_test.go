package bench

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
	"github.com/hvkube/hvkube/internal/store"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// TestClaimsOnKubernetes runs 1,000 claims on four fake-backend nodes of
// 25 warm sandboxes each, on a real kube-apiserver: every sandbox is
// claimed about ten times, released and reset in between. No sandbox may
// be bound to two agents at once, every agent completes, each in one
// attempt.
func TestClaimsOnKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 claims: not in -short")
	}
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	open := func(ctx context.Context, _ string, log *slog.Logger) (store.API, func() error, error) {
		cfg := rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = -1, 0
		st, err := kube.Open(ctx, kube.Options{Config: cfg, Namespace: ns, Component: "hvkube-test", Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return st, st.Close, nil
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	rep, res, err := runClaims(ctx, ClaimsOptions{Nodes: 4, PerNode: 25, Claims: 1000, Parallel: 40,
		HealthInterval: time.Hour, NodeResync: 10 * time.Minute, Store: open, StoreName: "kubernetes", Log: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var text strings.Builder
	rep.Print(&text)
	t.Logf("in %s:\n%s", time.Since(start).Round(time.Second), text.String())
	if res.doubleBinds != 0 || res.twoClaims != 0 {
		t.Errorf("%d double binds, %d agents claimed on two sandboxes at once, want none", res.doubleBinds, res.twoClaims)
	}
	if res.completed != 1000 || res.failed != 0 {
		t.Errorf("%d of 1000 agents completed, %d failed: %v", res.completed, res.failed, res.failures)
	}
	// The agents as stored at the end: each Completed in one attempt
	// (checkStore), no agent completed twice.
	if len(res.problems) > 0 {
		t.Errorf("problems:\n%s", strings.Join(res.problems, "\n"))
	}
}

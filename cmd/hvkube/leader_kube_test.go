//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// TestLeaderElectionOnKubernetes runs two replicas of hvkube serve on a
// real kube-apiserver, with a node in this process on the fake backend
// (the control plane is under test, not the VMs). Agents are submitted
// before and after the replica that leads is killed (SIGKILL, no
// goodbye): the other takes the Lease within the lease time plus a retry,
// runs the controllers, and every agent completes, once.
func TestLeaderElectionOnKubernetes(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	kc := env.Kubeconfig(t, ns)
	const lease = 3 * time.Second
	args := []string{"--backend", "none", "--store", "kubernetes", "--kubeconfig", kc, "--leader-lease-duration", lease.String()}
	replicas := []*proc{startServe(t, t.TempDir(), nil, args...), startServe(t, t.TempDir(), nil, args...)}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := kube.Open(ctx, kube.Options{Config: env.Config, Namespace: ns, Component: "hvkube-test-node"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	nd := node.New(node.Options{Store: st, Backend: fake.New(fake.Options{}), Name: "fake-node", DataDir: t.TempDir(), WaitForPlacement: true})
	if err := nd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer nd.Stop()
	mgr := reconcile.NewManager(st, nil, 0)
	nd.Register(mgr)
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer mgr.Stop()

	core, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	holder := func() string {
		l, err := core.CoordinationV1().Leases(ns).Get(ctx, controllersLease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	leaderOf := func() (int, string) {
		for i, p := range replicas {
			if strings.Contains(p.log(), "msg=leading") {
				return i, holder()
			}
		}
		return -1, ""
	}
	waitUntil(t, "a replica leads", 30*time.Second, func() bool { i, _ := leaderOf(); return i >= 0 })
	lead, firstHolder := leaderOf()
	other := replicas[1-lead]
	c, err := client.New(other.url(), "")
	if err != nil {
		t.Fatal(err)
	}

	objs := `apiVersion: hvkube.io/v1
kind: Template
metadata: {name: linux-desktop}
spec:
  qemu: {image: linux-desktop}
---
apiVersion: hvkube.io/v1
kind: SandboxPool
metadata: {name: warm}
spec:
  replicas: 3
  releasePolicy: reset
  template:
    metadata:
      labels: {pool: warm}
    spec:
      templateRef: linux-desktop
`
	submit := func(from, to int) {
		var b strings.Builder
		b.WriteString(objs)
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, `---
apiVersion: hvkube.io/v1
kind: Agent
metadata: {name: job-%d}
spec:
  sandboxSelector:
    matchLabels: {pool: warm}
  type: workflow
  task:
    steps:
    - {action: exec, command: [/bin/true, job-%d]}
`, i, i)
		}
		f := filepath.Join(t.TempDir(), "objects.yaml")
		os.WriteFile(f, []byte(b.String()), 0o600)
		mustHV(t, other, "apply", "-f", f)
	}
	completed := func() int {
		items, err := c.List(ctx, api.KindAgent, "")
		if err != nil {
			return 0
		}
		n := 0
		for _, it := range items {
			if it.(*api.Agent).Status.Phase == api.AgentCompleted {
				n++
			}
		}
		return n
	}

	submit(0, 10)
	waitUntil(t, "some agents complete under the first leader", 60*time.Second, func() bool { return completed() >= 3 })
	killed := time.Now()
	replicas[lead].cmd.Process.Kill()
	<-replicas[lead].done
	submit(10, 20)
	waitUntil(t, "the other replica takes the Lease", 4*lease+10*time.Second, func() bool {
		h := holder()
		return h != "" && h != firstHolder && strings.Contains(other.log(), "msg=leading")
	})
	t.Logf("the other replica led %s after the leader was killed (lease %s)", time.Since(killed).Round(100*time.Millisecond), lease)
	waitUntil(t, "all 20 agents complete", 2*time.Minute, func() bool { return completed() == 20 })

	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("job-%d", i)
		o, err := c.Get(ctx, api.KindAgent, name)
		if err != nil {
			t.Fatalf("agent %s lost: %v", name, err)
		}
		if a := o.(*api.Agent); a.Status.Attempts != 1 {
			t.Errorf("agent %s ran %d attempts, want 1", name, a.Status.Attempts)
		}
		evs, err := c.Events(ctx, api.KindAgent, name)
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		for _, ev := range evs {
			if ev.Reason == "Completed" {
				runs += max(ev.Count, 1)
			}
		}
		if runs != 1 {
			t.Errorf("agent %s completed %d times", name, runs)
		}
	}
}

// waitUntil polls cond until it holds or timeout passes.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package kube_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
)

// TestLeaderHandoverOnKubernetes: of two replicas campaigning for one
// Lease, one leads; when it ends, the other takes over once the Lease
// expires (it is not released on the way out), and Lead says why each
// stopped. Run under -race: the callbacks run on goroutines of their own.
func TestLeaderHandoverOnKubernetes(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	open := func() *kube.Store {
		s, err := kube.Open(context.Background(), kube.Options{Config: env.Config, Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	opts := func(id string) kube.LeaderOptions {
		return kube.LeaderOptions{Lease: "controllers", Identity: id,
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond}
	}
	type leader struct {
		id   string
		stop context.CancelFunc
	}
	leading := make(chan leader, 2)
	ended := make(chan error, 2)
	campaign := func(id string) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() {
			ended <- open().Lead(ctx, opts(id), func(lctx context.Context) {
				leading <- leader{id, cancel}
				<-lctx.Done()
			})
		}()
	}
	campaign("a")
	first := <-leading
	campaign("b")
	select {
	case l := <-leading:
		t.Fatalf("%s leads beside %s", l.id, first.id)
	case <-time.After(3 * time.Second):
	}
	start := time.Now()
	first.stop()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the leader that was stopped: Lead returned %v, want context.Canceled", err)
	}
	select {
	case next := <-leading:
		if next.id == first.id {
			t.Fatalf("%s leads again", next.id)
		}
		t.Logf("%s took over %s after %s stopped", next.id, time.Since(start).Round(time.Millisecond), first.id)
	case <-time.After(30 * time.Second):
		t.Fatal("no replica took over within 30 s")
	}
}

package reconcile

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// TestManagerObserve: the Manager's observer hears of each reconcile, by
// controller, with its error.
func TestManagerObserve(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := NewManager(st, nil, time.Hour)
	var mu sync.Mutex
	seen := map[string][2]int{}
	m.Observe(func(controller string, err error) {
		mu.Lock()
		defer mu.Unlock()
		c := seen[controller]
		c[0]++
		if err != nil {
			c[1]++
		}
		seen[controller] = c
	})
	m.Register(Controller{Name: "failing", For: api.KindSandbox, Reconciler: ReconcilerFunc(func(ctx context.Context, name string) (Result, error) {
		return Result{}, errors.New("boom")
	})})
	m.Register(Controller{Name: "fine", For: api.KindSandbox, Reconciler: ReconcilerFunc(func(ctx context.Context, name string) (Result, error) {
		return Result{}, nil
	})})
	if _, err := st.Create(ctx, &api.Sandbox{TypeMeta: api.TypeMeta{Kind: api.KindSandbox}, Metadata: api.ObjectMeta{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		f, ok := seen["failing"], seen["fine"]
		mu.Unlock()
		if f[0] >= 2 && f[1] == f[0] && ok[0] >= 1 && ok[1] == 0 {
			return // the failing one was retried, every run an error
		}
		if time.Now().After(deadline) {
			t.Fatalf("observed failing %v, fine %v", f, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

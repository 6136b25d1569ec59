package kube_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// TestCreateKeepsLaterStatusOnKubernetes: a create with a status is two
// requests on Kubernetes (the API server drops status on create). A controller that
// writes the new object's status between them (placement giving a pool's
// new sandbox its node, once) must not be undone by the creator's
// initial status.
func TestCreateKeepsLaterStatusOnKubernetes(t *testing.T) {
	st := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, w, err := st.ListAndWatch(ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	placed := map[string]bool{}
	go func() {
		for ev := range w.Events() {
			sb, ok := ev.Object.(*api.Sandbox)
			if !ok || sb.Status.Node != "" {
				continue
			}
			mu.Lock()
			once := !placed[sb.Metadata.Name]
			placed[sb.Metadata.Name] = true
			mu.Unlock()
			if !once {
				continue // placement places once; what undoes it is the bug
			}
			for {
				cur, err := st.Get(ctx, api.KindSandbox, sb.Metadata.Name)
				if err != nil {
					break
				}
				c := cur.(*api.Sandbox)
				c.Status.Node = "n1"
				if _, err := st.UpdateStatus(ctx, c); err == nil || ctx.Err() != nil {
					break
				}
			}
		}
	}()
	const n = 60
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
			sb.Metadata.Name = fmt.Sprintf("sb-%d", i)
			sb.Status.Phase = api.SandboxPending
			if _, err := st.Create(ctx, sb); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		items, _, err := st.List(ctx, api.KindSandbox, api.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		var lost []string
		for _, it := range items {
			sb := it.(*api.Sandbox)
			if sb.Status.Node != "n1" || sb.Status.Phase != api.SandboxPending {
				lost = append(lost, fmt.Sprintf("%s(node %q, phase %q)", sb.Metadata.Name, sb.Status.Node, sb.Status.Phase))
			}
		}
		mu.Lock()
		all := len(placed) == n
		mu.Unlock()
		if len(lost) == 0 && len(items) == n && all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sandboxes lost the node written after their creation, or their phase: %v", len(lost), len(items), lost)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package storefault

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

func sandbox(name string) *api.Sandbox {
	return &api.Sandbox{TypeMeta: api.TypeMeta{Kind: api.KindSandbox}, Metadata: api.ObjectMeta{Name: name}}
}

func open(t *testing.T) (*store.Store, *Store) {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, New(st)
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	st, fs := open(t)
	if _, err := st.Create(ctx, sandbox("a")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	var hooked []Call
	fs.Inject(Fault{Op: Get, Name: "a", Times: 2, Err: boom})
	fs.Inject(Fault{Op: Get, Kind: api.KindSandbox, Before: func(c Call) { hooked = append(hooked, c) }})
	for i, want := range []error{boom, boom, nil} {
		if _, err := fs.Get(ctx, api.KindSandbox, "a"); !errors.Is(err, want) {
			t.Fatalf("get %d: got %v, want %v", i, err, want)
		}
	}
	if len(hooked) != 1 || hooked[0] != (Call{Op: Get, Kind: api.KindSandbox, Name: "a"}) {
		t.Fatalf("Before saw %v, want the third get", hooked)
	}
	if got := fs.Calls(Get); got != 3 {
		t.Fatalf("Calls(Get) = %d, want 3", got)
	}

	fs.Clear()
	fs.Inject(Fault{Op: List, Delay: time.Hour})
	dctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, _, err := fs.List(dctx, api.KindSandbox, api.Selector{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a delayed list past its deadline: got %v", err)
	}
	fs.Clear()
	if items, _, err := fs.List(ctx, api.KindSandbox, api.Selector{}); err != nil || len(items) != 1 {
		t.Fatalf("list after Clear: %d items, %v", len(items), err)
	}
}

// TestCutWatches: a cut watch ends cleanly and another kind's runs on.
func TestCutWatches(t *testing.T) {
	ctx := context.Background()
	_, fs := open(t)
	_, sw, err := fs.ListAndWatch(ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	aw, err := fs.WatchFrom(ctx, api.KindAgent, api.Selector{}, sw.From())
	if err != nil {
		t.Fatal(err)
	}
	if n := fs.CutWatches(api.KindSandbox); n != 1 {
		t.Fatalf("cut %d watches, want 1", n)
	}
	select {
	case _, ok := <-sw.Events():
		if ok {
			t.Fatal("an event on a cut watch with no change")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cut watch did not end")
	}
	if sw.Err() != nil {
		t.Fatalf("a cut watch ends cleanly, got %v", sw.Err())
	}
	if aw.Err() != nil {
		t.Fatalf("the agents' watch ended: %v", aw.Err())
	}
	if n := fs.CutWatches(""); n != 1 {
		t.Fatalf("cut %d watches, want the agents' one", n)
	}
}

package reconcile

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// getCount is a store that counts its reads of one object.
type getCount struct {
	store.Interface
	mu   sync.Mutex
	gets int
}

func (g *getCount) Get(ctx context.Context, kind, name string) (api.Object, error) {
	g.mu.Lock()
	g.gets++
	g.mu.Unlock()
	return g.Interface.Get(ctx, kind, name)
}

// TestExpectingAndGetLatest: what a writer wrote through Expecting is its
// view at once, before its watch brings it back, and costs no read; what
// it deleted is asked of the store; what no one wrote the watch shows.
func TestExpectingAndGetLatest(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cache := newCache(api.KindSandbox)
	counted := &getCount{Interface: st}
	w := Expecting{Interface: counted, Caches: func(kind string) *Cache {
		if kind == api.KindSandbox {
			return cache
		}
		return nil
	}}
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "box"
	api.Default(sb)
	created, err := w.Create(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	latest := func() *api.Sandbox {
		t.Helper()
		o, err := GetLatest(ctx, cache, counted, api.KindSandbox, "box")
		if err != nil {
			t.Fatal(err)
		}
		return o.(*api.Sandbox)
	}
	// The watch has brought nothing yet: the creation is the view.
	if got := latest(); got.Metadata.ResourceVersion != created.GetMeta().ResourceVersion {
		t.Errorf("view after the creation: rv %s, want %s", got.Metadata.ResourceVersion, created.GetMeta().ResourceVersion)
	}
	cache.apply(store.Added, created)

	// A status write: the view at once, before the watch brings it.
	next := api.DeepCopy(created.(*api.Sandbox))
	next.Status.Phase = api.SandboxPaused
	written, err := w.UpdateStatus(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	got := latest()
	if got.Status.Phase != api.SandboxPaused || got.Metadata.ResourceVersion != written.GetMeta().ResourceVersion {
		t.Errorf("view after the status write: %s at rv %s, want Paused at %s", got.Status.Phase, got.Metadata.ResourceVersion, written.GetMeta().ResourceVersion)
	}
	// What GetLatest returns is the caller's to change; PeekLatest's is
	// the cache's.
	got.Status.Phase = api.SandboxError
	if again := latest(); again.Status.Phase != api.SandboxPaused {
		t.Errorf("a change to GetLatest's copy reached the view: %s", again.Status.Phase)
	}
	if _, shared, err := PeekLatest(ctx, cache, counted, api.KindSandbox, "box"); err != nil || !shared {
		t.Errorf("PeekLatest of a cached sandbox: shared %v, %v", shared, err)
	}
	cache.apply(store.Modified, written)
	if cache.Pending("box") {
		t.Error("the watch brought the write, yet it is still pending")
	}

	// Someone else's write, not yet in the watch: the view is behind, and
	// a write conditioned on it conflicts.
	other := api.DeepCopy(written.(*api.Sandbox))
	other.Status.Phase = api.SandboxRunning
	if _, err := st.UpdateStatus(ctx, other); err != nil {
		t.Fatal(err)
	}
	stale := latest()
	if stale.Status.Phase != api.SandboxPaused {
		t.Errorf("view of someone else's unseen write: %s, want the watch's Paused", stale.Status.Phase)
	}
	stale.Status.Reason = "Mine"
	if _, err := w.UpdateStatus(ctx, stale); !errors.Is(err, api.ErrConflict) {
		t.Errorf("a write from a stale view: %v, want a conflict", err)
	}
	if n := counted.gets; n != 0 {
		t.Errorf("the store was read %d times, want 0", n)
	}

	// A deletion in flight is asked of the store.
	if _, _, err := w.Delete(ctx, api.KindSandbox, "box", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := GetLatest(ctx, cache, counted, api.KindSandbox, "box"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("view after the deletion: %v, want not found", err)
	}
	if n := counted.gets; n != 1 {
		t.Errorf("the store was read %d times after the deletion, want 1", n)
	}
}

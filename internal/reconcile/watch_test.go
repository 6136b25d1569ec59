package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/store/storefault"
	"github.com/hvkube/hvkube/internal/testlog"
	"github.com/hvkube/hvkube/internal/testwait"
)

// watchRig is a Manager over a real store wrapped in storefault, with a
// sandbox controller and a pool controller that watches sandboxes (by
// their "pool" label), each recording the keys it reconciled and whether
// the object was there.
type watchRig struct {
	t  *testing.T
	st *store.Store
	fs *storefault.Store
	m  *Manager

	mu   sync.Mutex // guards seen
	seen map[string][]string
}

func newWatchRig(t *testing.T, log *slog.Logger) *watchRig {
	t.Helper()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &watchRig{t: t, st: st, fs: storefault.New(st), seen: map[string][]string{}}
	r.m = NewManager(r.fs, log, time.Hour)
	r.m.retry = 10 * time.Millisecond
	record := func(controller, kind string) Reconciler {
		return ReconcilerFunc(func(ctx context.Context, name string) (Result, error) {
			_, err := r.st.Get(ctx, kind, name)
			state := "present"
			if errors.Is(err, api.ErrNotFound) {
				state = "gone"
			} else if err != nil {
				return Result{}, err
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.seen[controller] = append(r.seen[controller], name+" "+state)
			return Result{}, nil
		})
	}
	r.m.Register(Controller{Name: "sandboxes", For: api.KindSandbox, Reconciler: record("sandboxes", api.KindSandbox)})
	r.m.Register(Controller{Name: "pools", For: api.KindSandboxPool, Reconciler: record("pools", api.KindSandboxPool),
		Watches: []Watch{{Kind: api.KindSandbox, Map: func(o api.Object) []string {
			if p := o.GetMeta().Labels["pool"]; p != "" {
				return []string{p}
			}
			return nil
		}}}})
	return r
}

func (r *watchRig) create(o api.Object) {
	r.t.Helper()
	if _, err := r.st.Create(context.Background(), o); err != nil {
		r.t.Fatal(err)
	}
}

func (r *watchRig) delete(kind, name string) {
	r.t.Helper()
	if _, _, err := r.st.Delete(context.Background(), kind, name, store.DeleteOptions{}); err != nil {
		r.t.Error(err)
	}
}

func (r *watchRig) start() {
	r.t.Helper()
	if err := r.m.Start(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(r.m.Stop)
}

// waitSeen waits until controller has reconciled every one of want
// ("name present" or "name gone") since the last forget.
func (r *watchRig) waitSeen(controller string, want ...string) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		seen := slices.Clone(r.seen[controller])
		r.mu.Unlock()
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(seen, w) })
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s never reconciled %q; it reconciled %q", controller, missing, seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *watchRig) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = map[string][]string{}
}

func labelled(name, pool string) *api.Sandbox {
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{Kind: api.KindSandbox}, Metadata: api.ObjectMeta{Name: name}}
	if pool != "" {
		sb.Metadata.Labels = map[string]string{"pool": pool}
	}
	return sb
}

// TestManagerRelistDeliversDeletions: the watch of sandboxes breaks, and
// while it is down two sandboxes are deleted and one created; the store
// cannot resume the watch (410), so the Manager lists again. The deleted
// sandboxes are reconciled (gone), so is the pool that one of them
// belonged to, and the cache holds exactly what the store holds.
func TestManagerRelistDeliversDeletions(t *testing.T) {
	r := newWatchRig(t, nil)
	cache := r.m.Cache(api.KindSandbox)
	r.create(&api.SandboxPool{TypeMeta: api.TypeMeta{Kind: api.KindSandboxPool}, Metadata: api.ObjectMeta{Name: "p1"}})
	for _, sb := range []*api.Sandbox{labelled("a", ""), labelled("b", "p1"), labelled("c", "")} {
		r.create(sb)
	}
	r.start()
	r.waitSeen("sandboxes", "a present", "b present", "c present")
	r.waitSeen("pools", "p1 present")
	r.forget()

	r.fs.Inject(storefault.Fault{Op: storefault.WatchFrom, Kind: api.KindSandbox, Times: 1,
		Before: func(storefault.Call) {
			r.delete(api.KindSandbox, "b")
			r.delete(api.KindSandbox, "c")
			r.create(labelled("d", ""))
		},
		Err: fmt.Errorf("the changes were compacted: %w", api.ErrGone)})
	if n := r.fs.CutWatches(api.KindSandbox); n != 1 {
		t.Fatalf("cut %d watches of sandboxes, want 1", n)
	}
	r.waitSeen("sandboxes", "b gone", "c gone", "d present")
	r.waitSeen("pools", "p1 present")
	if got := r.fs.Calls(storefault.ListAndWatch); got != 3 {
		t.Errorf("ListAndWatch called %d times, want one per kind and one relist", got)
	}
	var names []string
	for _, o := range cache.List(api.Selector{}) {
		names = append(names, o.GetMeta().Name)
	}
	if want := []string{"a", "d"}; !slices.Equal(names, want) {
		t.Errorf("cache holds %v, want %v", names, want)
	}
	// The relist's objects are delivered before the watch that follows
	// it is marked up.
	testwait.For(5*time.Second, func() bool { return r.m.Ready(context.Background()) == nil })
	if err := r.m.Ready(context.Background()); err != nil {
		t.Errorf("Ready after the relist: %v", err)
	}
}

// TestManagerResumesWatch: a watch cut short resumes after the last change
// it delivered; what changed meanwhile arrives without a relist.
func TestManagerResumesWatch(t *testing.T) {
	r := newWatchRig(t, nil)
	cache := r.m.Cache(api.KindSandbox)
	r.create(labelled("a", ""))
	r.start()
	r.waitSeen("sandboxes", "a present")
	r.forget()

	r.fs.Inject(storefault.Fault{Op: storefault.WatchFrom, Kind: api.KindSandbox, Times: 1,
		Before: func(storefault.Call) {
			r.delete(api.KindSandbox, "a")
			r.create(labelled("b", ""))
		}})
	r.fs.CutWatches(api.KindSandbox)
	r.waitSeen("sandboxes", "a gone", "b present")
	if got := r.fs.Calls(storefault.ListAndWatch); got != 2 {
		t.Errorf("ListAndWatch called %d times, want once per kind: a resume lists nothing", got)
	}
	if _, ok := cache.Get("a"); ok {
		t.Error("the cache still holds a deleted sandbox")
	}
}

// TestManagerReadyFollowsWatches: while the store refuses a broken watch
// both a resume and a list, Ready says which watch is down and why; once
// the store answers again, Ready is nil.
func TestManagerReadyFollowsWatches(t *testing.T) {
	r := newWatchRig(t, nil)
	r.start()
	ctx := context.Background()
	if err := r.m.Ready(ctx); err != nil {
		t.Fatalf("Ready after Start: %v", err)
	}
	locked := errors.New("database is locked")
	r.fs.Inject(storefault.Fault{Op: storefault.WatchFrom, Kind: api.KindSandboxPool, Err: fmt.Errorf("too old: %w", api.ErrGone)})
	r.fs.Inject(storefault.Fault{Op: storefault.ListAndWatch, Kind: api.KindSandboxPool, Err: locked})
	r.fs.CutWatches(api.KindSandboxPool)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := r.m.Ready(ctx)
		if errors.Is(err, locked) {
			if !strings.Contains(err.Error(), "watch of "+api.KindSandboxPool) {
				t.Fatalf("Ready: %v; want it to name the SandboxPool watch", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ready = %v with the SandboxPool watch down on %v", err, locked)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.fs.Clear()
	for r.m.Ready(ctx) != nil {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("Ready after the store answers again: %v", r.m.Ready(ctx))
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.m.Stop()
	if r.m.Ready(ctx) == nil {
		t.Error("Ready after Stop")
	}
}

// TestReconcileRetriedAfterStoreErrors: a reconcile that fails on a store
// error is retried until the store answers.
func TestReconcileRetriedAfterStoreErrors(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fs := storefault.New(st)
	fs.Inject(storefault.Fault{Op: storefault.UpdateStatus, Kind: api.KindSandbox, Name: "a", Times: 2, Err: errors.New("disk I/O error")})
	m := NewManager(fs, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Hour)
	m.Register(Controller{Name: "status", For: api.KindSandbox, Reconciler: ReconcilerFunc(func(ctx context.Context, name string) (Result, error) {
		o, err := fs.Get(ctx, api.KindSandbox, name)
		if err != nil {
			return Result{}, err
		}
		sb := o.(*api.Sandbox)
		if sb.Status.Message == "seen" {
			return Result{}, nil
		}
		sb.Status.Message = "seen"
		_, err = fs.UpdateStatus(ctx, sb)
		return Result{}, err
	})})
	if _, err := st.Create(ctx, labelled("a", "")); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, err := st.Get(ctx, api.KindSandbox, "a")
		if err != nil {
			t.Fatal(err)
		}
		if o.(*api.Sandbox).Status.Message == "seen" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the status was never written")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := fs.Calls(storefault.UpdateStatus); got != 3 {
		t.Errorf("UpdateStatus called %d times, want two failures and a success", got)
	}
}

// TestResyncLogsListErrors: a resync whose list fails says so.
func TestResyncLogsListErrors(t *testing.T) {
	var out testlog.Buffer
	r := newWatchRig(t, slog.New(slog.NewTextHandler(&out, nil)))
	r.fs.Inject(storefault.Fault{Op: storefault.List, Kind: api.KindSandbox, Err: errors.New("disk I/O error")})
	r.m.EnqueueAll(context.Background(), api.KindSandbox, NewQueue("q", r.m.log))
	if got := out.String(); !strings.Contains(got, "disk I/O error") || !strings.Contains(got, "kind=Sandbox") {
		t.Fatalf("log %q does not report the failed resync", got)
	}
}

// TestResyncReadsTheCache: once the Manager's watches run, a resync takes
// the names from the cache: the store is not listed (a list that would
// fail is never made) and every object is enqueued.
func TestResyncReadsTheCache(t *testing.T) {
	var out testlog.Buffer
	r := newWatchRig(t, slog.New(slog.NewTextHandler(&out, nil)))
	r.create(labelled("a", ""))
	r.create(labelled("b", "p1"))
	r.start()
	r.fs.Inject(storefault.Fault{Op: storefault.List, Kind: api.KindSandbox, Err: errors.New("disk I/O error")})
	q := NewQueue("q", r.m.log)
	defer q.ShutDown()
	r.m.EnqueueAll(context.Background(), api.KindSandbox, q)
	if got := q.Len(); got != 2 {
		t.Errorf("%d names enqueued, want 2", got)
	}
	if got := r.fs.Calls(storefault.List); got != 0 {
		t.Errorf("the resync listed the store %d times, want 0", got)
	}
	if strings.Contains(out.String(), "disk I/O error") {
		t.Errorf("the resync listed the store: %s", out.String())
	}
}

package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// batchSizes records the size of every batch the committer takes, for
// the test.
func batchSizes(t *testing.T) func() []int {
	var mu sync.Mutex
	var sizes []int
	testHookWriteBatch = func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	}
	t.Cleanup(func() { testHookWriteBatch = nil })
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sizes)
	}
}

// holdCommitter takes the write lock and queues one write, returning once
// the committer has taken it and waits for the lock: the writes queued
// from then on make up the committer's next batch. release lets it go
// and returns the held write's error.
func holdCommitter(t *testing.T, s *Store, sizes func() []int) (release func() error) {
	t.Helper()
	before := len(sizes())
	s.writeMu.Lock()
	held := make(chan error, 1)
	go func() {
		_, err := s.Create(context.Background(), pool("held", 1))
		held <- err
	}()
	for len(sizes()) == before {
		runtime.Gosched()
	}
	return func() error {
		s.writeMu.Unlock()
		return <-held
	}
}

// waitQueued returns once n writes wait in the committer's queue.
func waitQueued(s *Store, n int) {
	for len(s.writes) < n {
		runtime.Gosched()
	}
}

func agent(name string) *api.Agent {
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name = name
	a.Spec.Type = "workflow"
	return a
}

func withReady(o api.Object, ready int) *api.SandboxPool {
	p := api.DeepCopy(o).(*api.SandboxPool)
	p.Status.Ready = ready
	return p
}

// TestGroupCommitBatch queues writes of every outcome from many
// goroutines into one batch: each caller gets its own answer, the failed
// writes leave nothing behind (no object, no revision, no event, no watch
// event), the others commit together with consecutive resourceVersions in
// the order the watch delivers them, and a reopened store has every write
// that was acknowledged.
func TestGroupCommitBatch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()

	var stored []api.Object
	for i := range 8 {
		stored = append(stored, mustCreate(t, s, pool(fmt.Sprintf("p%d", i), 1)))
	}
	running := agent("started")
	running.Status.Phase = api.AgentRunning
	started := mustCreate(t, s, running)
	badSpec := api.DeepCopy(started).(*api.Agent)
	badSpec.Spec.SandboxName = "elsewhere"
	stale := withReady(stored[1], 7)
	stale.Metadata.ResourceVersion = "1"
	missing := pool("missing", 1)
	respec := api.DeepCopy(stored[3]).(*api.SandboxPool)
	respec.Spec.Replicas = 5
	staleLast := withReady(stored[7], 8)
	staleLast.Metadata.ResourceVersion = "1"

	type result struct {
		obj api.Object
		err error
	}
	cases := []struct {
		name string
		do   func(ctx context.Context) (api.Object, error)
		// want is the error's category; nil for a write that lands.
		want error
		// field, when set, is the field the error names.
		field string
		// gone is true for a write that deletes its object.
		gone bool
	}{
		{name: "status", do: func(ctx context.Context) (api.Object, error) { return s.UpdateStatus(ctx, withReady(stored[0], 3)) }},
		{name: "stale status", want: api.ErrConflict, do: func(ctx context.Context) (api.Object, error) { return s.UpdateStatus(ctx, stale) }},
		{name: "status of a missing object", want: api.ErrNotFound, do: func(ctx context.Context) (api.Object, error) { return s.UpdateStatus(ctx, missing) }},
		{name: "create", do: func(ctx context.Context) (api.Object, error) { return s.Create(ctx, pool("new", 2)) }},
		{name: "create a taken name", want: api.ErrAlreadyExists, do: func(ctx context.Context) (api.Object, error) { return s.Create(ctx, pool("p2", 9)) }},
		{name: "spec", do: func(ctx context.Context) (api.Object, error) {
			o, _, err := s.Update(ctx, respec)
			return o, err
		}},
		{name: "spec of a started agent", want: api.ErrConflict, field: "spec.sandboxName", do: func(ctx context.Context) (api.Object, error) {
			o, _, err := s.Update(ctx, badSpec)
			return o, err
		}},
		{name: "delete", gone: true, do: func(ctx context.Context) (api.Object, error) {
			o, _, err := s.Delete(ctx, api.KindSandboxPool, "p4", DeleteOptions{})
			return o, err
		}},
		{name: "delete with a stale version", want: api.ErrConflict, do: func(ctx context.Context) (api.Object, error) {
			o, _, err := s.Delete(ctx, api.KindSandboxPool, "p5", DeleteOptions{ResourceVersion: "1"})
			return o, err
		}},
		{name: "delete a missing object", want: api.ErrNotFound, do: func(ctx context.Context) (api.Object, error) {
			o, _, err := s.Delete(ctx, api.KindSandboxPool, "missing", DeleteOptions{})
			return o, err
		}},
		{name: "a group whose second write conflicts", want: api.ErrConflict, do: func(ctx context.Context) (api.Object, error) {
			// The first write lands before the second fails: only
			// rolling back to the write's savepoint takes it away.
			out, errs, err := s.UpdateStatusGroups(ctx, [][]api.Object{{withReady(stored[6], 4), staleLast}})
			if err != nil {
				return nil, err
			}
			if errs[0] != nil {
				return nil, errs[0]
			}
			return out[0][0], nil
		}},
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, w, err := s.ListAndWatch(wctx, api.KindSandboxPool, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	sizes := batchSizes(t)
	release := holdCommitter(t, s, sizes)
	results := make([]result, len(cases))
	var wg sync.WaitGroup
	for i, tc := range cases {
		wg.Go(func() {
			o, err := tc.do(ctx)
			results[i] = result{o, err}
		})
	}
	waitQueued(s, len(cases))
	if err := release(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := sizes(); got[len(got)-1] != len(cases) {
		t.Fatalf("batches %v: the %d queued writes were not committed together", got, len(cases))
	}

	held := mustGet(t, s, api.KindSandboxPool, "held")
	heldRV, _ := strconv.ParseInt(held.GetMeta().ResourceVersion, 10, 64)
	var landed []api.Object
	for i, tc := range cases {
		r := results[i]
		if tc.want == nil {
			if r.err != nil {
				t.Errorf("%s: %v", tc.name, r.err)
				continue
			}
			landed = append(landed, r.obj)
			continue
		}
		if !errors.Is(r.err, tc.want) || (tc.field != "" && api.FieldOf(r.err) != tc.field) {
			t.Errorf("%s: got %v, want %v on %q", tc.name, r.err, tc.want, tc.field)
		}
		if r.obj != nil {
			t.Errorf("%s: failed but returned %v", tc.name, r.obj)
		}
	}
	slices.SortFunc(landed, func(a, b api.Object) int { return rvOf(t, a) - rvOf(t, b) })
	for i, o := range landed {
		if want := int(heldRV) + 1 + i; rvOf(t, o) != want {
			t.Errorf("%s at resourceVersion %d, want %d: the failed writes left a gap", o.GetMeta().Name, rvOf(t, o), want)
		}
	}
	if rv, _ := s.Revision(ctx); rv != heldRV+int64(len(landed)) {
		t.Errorf("revision %d, want %d", rv, heldRV+int64(len(landed)))
	}

	// The watch has the held write, then the landed pool writes in
	// resourceVersion order, and nothing of the failed ones.
	if ev := nextEvent(t, w); ev.Object.GetMeta().Name != "held" {
		t.Fatalf("first event %s %s, want held", ev.Type, ev.Object.GetMeta().Name)
	}
	for _, o := range landed {
		if o.GetTypeMeta().Kind != api.KindSandboxPool {
			continue
		}
		ev := nextEvent(t, w)
		if ev.Object.GetMeta().Name != o.GetMeta().Name || ev.Object.GetMeta().ResourceVersion != o.GetMeta().ResourceVersion {
			t.Errorf("event %s %s@%s, want %s@%s", ev.Type, ev.Object.GetMeta().Name, ev.Object.GetMeta().ResourceVersion, o.GetMeta().Name, o.GetMeta().ResourceVersion)
		}
	}
	select {
	case ev := <-w.Events():
		t.Errorf("an extra event: %s %s", ev.Type, ev.Object.GetMeta().Name)
	default:
	}
	evs, err := s.ListEvents(ctx, EventFilter{Name: "p2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 {
		t.Errorf("p2 has %d events, want 1: the failed create left one", len(evs))
	}

	// Every acknowledged write is in the reopened store.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(ctx, dir, Options{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"held": held.GetMeta().ResourceVersion}
	for _, i := range []int{1, 5, 6, 7} { // written only by failed writes
		want[stored[i].GetMeta().Name] = stored[i].GetMeta().ResourceVersion
	}
	for i, tc := range cases {
		if tc.want == nil && !tc.gone {
			want[results[i].obj.GetMeta().Name] = results[i].obj.GetMeta().ResourceVersion
		}
	}
	for name, rv := range want {
		if got := mustGet(t, s, api.KindSandboxPool, name); got.GetMeta().ResourceVersion != rv {
			t.Errorf("reopened: %s at %s, want %s", name, got.GetMeta().ResourceVersion, rv)
		}
	}
	if _, err := s.Get(ctx, api.KindSandboxPool, "p4"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("reopened: deleted p4: %v", err)
	}
	if got := mustGet(t, s, api.KindAgent, "started"); got.(*api.Agent).Spec.SandboxName != "" {
		t.Errorf("reopened: the rejected spec change landed")
	}
}

// TestGroupCommitManyWriters has many goroutines race optimistic
// increments on a few objects, mixed with status writes that conflict,
// with no holding back: every increment lands exactly once, and the
// watch delivers each object's versions in order, each once.
func TestGroupCommitManyWriters(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	const objects, writers, increments = 4, 16, 10
	for i := range objects {
		mustCreate(t, s, pool(fmt.Sprintf("hot%d", i), 0))
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, w, err := s.ListAndWatch(wctx, api.KindSandboxPool, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range writers {
		name := fmt.Sprintf("hot%d", g%objects)
		wg.Go(func() {
			for done := 0; done < increments; {
				cur, err := s.Get(ctx, api.KindSandboxPool, name)
				if err != nil {
					t.Error(err)
					return
				}
				p := cur.(*api.SandboxPool)
				p.Status.Replicas++
				_, err = s.UpdateStatus(ctx, p)
				switch {
				case errors.Is(err, api.ErrConflict):
				case err != nil:
					t.Error(err)
					return
				default:
					done++
				}
			}
		})
	}
	wg.Wait()
	total := objects * (writers / objects) * increments
	rvs := map[string]int{}
	last := 0
	for range total {
		ev := nextEvent(t, w)
		p := ev.Object.(*api.SandboxPool)
		rv := rvOf(t, p)
		if rv <= last {
			t.Fatalf("%s at %d after %d: out of order", p.Metadata.Name, rv, last)
		}
		last = rv
		if p.Status.Replicas != rvs[p.Metadata.Name]+1 {
			t.Fatalf("%s: replicas %d after %d", p.Metadata.Name, p.Status.Replicas, rvs[p.Metadata.Name])
		}
		rvs[p.Metadata.Name] = p.Status.Replicas
	}
	for name, n := range rvs {
		if n != writers/objects*increments {
			t.Errorf("%s: %d increments, want %d", name, n, writers/objects*increments)
		}
	}
}

// TestGroupCommitAbandonedWrite: a write whose caller gives up while it
// is queued returns the context's error and never lands, and the store
// writes on.
func TestGroupCommitAbandonedWrite(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sizes := batchSizes(t)
	release := holdCommitter(t, s, sizes)
	cctx, cancel := context.WithCancel(ctx)
	created := make(chan error, 1)
	go func() {
		_, err := s.Create(cctx, pool("abandoned", 1))
		created <- err
	}()
	waitQueued(s, 1)
	cancel()
	if err := <-created; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, pool("after", 1))
	if _, err := s.Get(ctx, api.KindSandboxPool, "abandoned"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("the abandoned write: %v", err)
	}
}

// TestGroupCommitPanickingWrite: a write that panics on the committer
// panics in its caller's goroutine and is rolled back, and the write
// beside it in the batch lands.
func TestGroupCommitPanickingWrite(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sizes := batchSizes(t)
	release := holdCommitter(t, s, sizes)
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		s.write(ctx, func(tx *Tx) error {
			if _, err := tx.Create(pool("half", 1)); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	waitQueued(s, 1)
	created := make(chan error, 1)
	go func() {
		_, err := s.Create(ctx, pool("beside", 1))
		created <- err
	}()
	waitQueued(s, 2)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if v := <-panicked; v == nil || !strings.Contains(fmt.Sprint(v), "boom") {
		t.Fatalf("the caller got %v, want the panic", v)
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, api.KindSandboxPool, "half"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("the panicking write: %v", err)
	}
}

// TestWriteAfterClose: Close commits what was queued, and a later write
// is refused.
func TestWriteAfterClose(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sizes := batchSizes(t)
	release := holdCommitter(t, s, sizes)
	queued := make(chan error, 1)
	go func() {
		_, err := s.Create(ctx, pool("queued", 1))
		queued <- err
	}()
	waitQueued(s, 1)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for !s.isClosed() {
		runtime.Gosched()
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := <-queued; err != nil {
		t.Fatalf("a write queued before Close: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, pool("late", 1)); !errors.Is(err, errStoreClosed) {
		t.Fatalf("a write after Close: %v", err)
	}
}

func mustCreate(t *testing.T, s *Store, o api.Object) api.Object {
	t.Helper()
	out, err := s.Create(context.Background(), o)
	if err != nil {
		t.Fatalf("create %s: %v", o.GetMeta().Name, err)
	}
	return out
}

func mustGet(t *testing.T, s *Store, kind, name string) api.Object {
	t.Helper()
	o, err := s.Get(context.Background(), kind, name)
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return o
}

func rvOf(t *testing.T, o api.Object) int {
	t.Helper()
	n, err := strconv.Atoi(o.GetMeta().ResourceVersion)
	if err != nil {
		t.Fatalf("%s: resourceVersion %q", o.GetMeta().Name, o.GetMeta().ResourceVersion)
	}
	return n
}

// nextEvent is the watch's next event, within a bound that only a hung
// store reaches.
func nextEvent(t *testing.T, w Watcher) WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event")
	}
	return WatchEvent{}
}

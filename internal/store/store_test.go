package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func pool(name string, replicas int) *api.SandboxPool {
	p := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}}
	p.Metadata.Name = name
	p.Metadata.Labels = map[string]string{"team": "qa"}
	p.Spec.Replicas = replicas
	api.Default(p)
	return p
}

func TestCreateGetUpdateDelete(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	created, err := s.Create(ctx, pool("web", 2))
	if err != nil {
		t.Fatal(err)
	}
	m := created.GetMeta()
	if m.UID == "" || m.ResourceVersion == "" || m.Generation != 1 || m.CreationTimestamp.IsZero() {
		t.Fatalf("server fields not set: %+v", m)
	}
	if _, err := s.Create(ctx, pool("web", 2)); !errors.Is(err, api.ErrAlreadyExists) {
		t.Fatalf("second create: got %v, want ErrAlreadyExists", err)
	}
	got, err := s.Get(ctx, api.KindSandboxPool, "web")
	if err != nil {
		t.Fatal(err)
	}
	if got.GetMeta().UID != m.UID {
		t.Fatalf("uid changed")
	}

	// Same spec: unchanged, no write.
	_, changed, err := s.Update(ctx, pool("web", 2))
	if err != nil || changed {
		t.Fatalf("no-op update: changed=%v err=%v", changed, err)
	}
	// Label change: new rv, same generation.
	p := pool("web", 2)
	p.Metadata.Labels["team"] = "ops"
	up, changed, err := s.Update(ctx, p)
	if err != nil || !changed {
		t.Fatalf("label update: changed=%v err=%v", changed, err)
	}
	if up.GetMeta().Generation != 1 || up.GetMeta().ResourceVersion == m.ResourceVersion {
		t.Fatalf("label update: generation %d rv %s", up.GetMeta().Generation, up.GetMeta().ResourceVersion)
	}
	// Spec change: generation 2.
	up, _, err = s.Update(ctx, pool("web", 3))
	if err != nil || up.GetMeta().Generation != 2 {
		t.Fatalf("spec update: %v generation %d", err, up.GetMeta().Generation)
	}
	// Stale resourceVersion: conflict.
	stale := pool("web", 4)
	stale.Metadata.ResourceVersion = m.ResourceVersion
	if _, _, err := s.Update(ctx, stale); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("stale update: got %v, want ErrConflict", err)
	}
	// Status updates keep the spec and the generation.
	st := api.DeepCopy(up.(*api.SandboxPool))
	st.Status.Ready = 3
	st.Spec.Replicas = 99
	out, err := s.UpdateStatus(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if o := out.(*api.SandboxPool); o.Status.Ready != 3 || o.Spec.Replicas != 3 || o.Metadata.Generation != 2 {
		t.Fatalf("status update: %+v", o)
	}

	if _, deleted, err := s.Delete(ctx, api.KindSandboxPool, "web", DeleteOptions{}); err != nil || !deleted {
		t.Fatalf("delete: %v %v", deleted, err)
	}
	if _, err := s.Get(ctx, api.KindSandboxPool, "web"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	evs, err := s.ListEvents(ctx, EventFilter{Kind: api.KindSandboxPool, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range evs {
		reasons = append(reasons, e.Reason)
	}
	if fmt.Sprint(reasons) != "[Created Deleted]" {
		t.Fatalf("events: %v", reasons)
	}
}

func TestFinalizersHoldDeletion(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	p := pool("held", 1)
	p.Metadata.Finalizers = []string{"hvkube/vm"}
	if _, err := s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	obj, deleted, err := s.Delete(ctx, api.KindSandboxPool, "held", DeleteOptions{})
	if err != nil || deleted || obj.GetMeta().DeletionTimestamp == nil {
		t.Fatalf("delete with finalizer: deleted=%v err=%v", deleted, err)
	}
	cur, _ := s.Get(ctx, api.KindSandboxPool, "held")
	cur.GetMeta().Finalizers = nil
	if _, _, err := s.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, api.KindSandboxPool, "held"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("object survived its last finalizer: %v", err)
	}
}

func TestApplyKeepsControllerMetadata(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	p := pool("kept", 1)
	p.Metadata.Finalizers = []string{"hvkube.io/vm"}
	p.Metadata.OwnerReferences = []api.OwnerReference{{Kind: "SandboxPool", Name: "owner"}}
	if _, err := s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	out, res, err := Apply(ctx, s, pool("kept", 1)) // a user's manifest names neither
	if err != nil || res != Unchanged {
		t.Fatalf("apply: %v %v", res, err)
	}
	if m := out.GetMeta(); len(m.Finalizers) != 1 || len(m.OwnerReferences) != 1 {
		t.Fatalf("apply dropped controller metadata: %+v", m)
	}
}

// TestConcurrentUpdatesOneWinnerPerVersion has 50 goroutines race to update
// one object with optimistic concurrency: every resourceVersion they read is
// won by exactly one writer, and no update is lost.
func TestConcurrentUpdatesOneWinnerPerVersion(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	if _, err := s.Create(ctx, pool("hot", 0)); err != nil {
		t.Fatal(err)
	}
	const workers = 50
	var mu sync.Mutex
	winners := map[string]int{} // rv read -> winners
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cur, err := s.Get(ctx, api.KindSandboxPool, "hot")
				if err != nil {
					t.Error(err)
					return
				}
				p := cur.(*api.SandboxPool)
				read := p.Metadata.ResourceVersion
				p.Spec.Replicas++
				_, _, err = s.Update(ctx, p)
				if errors.Is(err, api.ErrConflict) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				winners[read]++
				mu.Unlock()
				return
			}
		}()
	}
	wg.Wait()
	for rv, n := range winners {
		if n != 1 {
			t.Errorf("resourceVersion %s had %d winners", rv, n)
		}
	}
	if len(winners) != workers {
		t.Errorf("got %d winning versions, want %d", len(winners), workers)
	}
	cur, _ := s.Get(ctx, api.KindSandboxPool, "hot")
	if got := cur.(*api.SandboxPool).Spec.Replicas; got != workers {
		t.Errorf("replicas = %d, want %d (lost updates)", got, workers)
	}
}

func TestListSelectorAndTxRollback(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	for i, team := range []string{"qa", "ops", "qa"} {
		p := pool(fmt.Sprintf("p%d", i), 1)
		p.Metadata.Labels["team"] = team
		if _, err := s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	sel, _ := api.ParseSelector("team=qa")
	items, _, err := s.List(ctx, api.KindSandboxPool, sel)
	if err != nil || len(items) != 2 {
		t.Fatalf("list team=qa: %d items, %v", len(items), err)
	}
	pre := pool("prefixed", 1)
	pre.Metadata.Labels["app.hvkube.io/role"] = "desk"
	if _, err := s.Create(ctx, pre); err != nil {
		t.Fatal(err)
	}
	for sel, want := range map[string]int{"app.hvkube.io/role=desk": 1, "app.hvkube.io/role=desk,team=qa": 1, "team=qa,team!=qa": 0, "team in (ops)": 1, "team": 4} {
		s2, err := api.ParseSelector(sel)
		if err != nil {
			t.Fatal(err)
		}
		items, _, err := s.List(ctx, api.KindSandboxPool, s2)
		if err != nil || len(items) != want {
			t.Errorf("list %q: %d items, want %d (%v)", sel, len(items), want, err)
		}
	}
	boom := errors.New("boom")
	err = s.Tx(ctx, func(tx *Tx) error {
		if _, err := tx.Create(pool("rolled-back", 1)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("tx error: %v", err)
	}
	if _, err := s.Get(ctx, api.KindSandboxPool, "rolled-back"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("rolled-back create is visible: %v", err)
	}
}

func TestListAndWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := openTest(t)
	if _, err := s.Create(ctx, pool("before", 1)); err != nil {
		t.Fatal(err)
	}
	items, w, err := s.ListAndWatch(ctx, api.KindSandboxPool, api.Selector{})
	if err != nil || len(items) != 1 {
		t.Fatalf("list: %d %v", len(items), err)
	}
	_, evw, err := s.ListAndWatch(ctx, api.KindEvent, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	s.Create(ctx, pool("after", 1))
	s.Update(ctx, pool("after", 2))
	s.Delete(ctx, api.KindSandboxPool, "after", DeleteOptions{})
	var got []string
	for len(got) < 3 {
		select {
		case ev := <-w.Events():
			got = append(got, ev.Type+" "+ev.Object.GetMeta().Name)
		case <-time.After(5 * time.Second):
			t.Fatalf("timed out; got %v", got)
		}
	}
	if fmt.Sprint(got) != "[ADDED after MODIFIED after DELETED after]" {
		t.Fatalf("watch: %v", got)
	}
	select {
	case ev := <-evw.Events():
		if ev.Object.(*api.Event).Reason != "Created" {
			t.Fatalf("event watch: %+v", ev.Object)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event on the event watch")
	}
	cancel()
	for range w.Events() {
	}
	if w.Err() != nil {
		t.Fatalf("clean stop: %v", w.Err())
	}
}

// TestWatchResumesAcrossRestart: a watch from a resourceVersion replays the
// logged changes after it, also after the store is closed and opened again
// (a server restart), with selector transitions; a compacted or future
// revision is api.ErrGone.
func TestWatchResumesAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir, Options{MaxChanges: 1000})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Create(ctx, pool("web", 1))
	if err != nil {
		t.Fatal(err)
	}
	from := p.GetMeta().ResourceVersion
	q := api.DeepCopy(p).(*api.SandboxPool)
	q.Spec.Replicas = 2
	q.Metadata.ResourceVersion = ""
	s.Update(ctx, q)
	r := api.DeepCopy(q)
	r.GetMeta().Labels = map[string]string{"team": "ops"}
	s.Update(ctx, r)
	s.Create(ctx, pool("db", 1))
	s.Delete(ctx, api.KindSandboxPool, "db", DeleteOptions{})
	s.Close()

	s, err = Open(ctx, dir, Options{MaxChanges: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sel, _ := api.ParseSelector("team=qa")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.WatchFrom(wctx, api.KindSandboxPool, sel, from)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 4 {
		select {
		case ev := <-w.Events():
			got = append(got, fmt.Sprintf("%s %s %d", ev.Type, ev.Object.GetMeta().Name, ev.Object.(*api.SandboxPool).Spec.Replicas))
		case <-time.After(2 * time.Second):
			got = append(got, "timeout")
		}
	}
	want := "[MODIFIED web 2 DELETED web 2 ADDED db 1 DELETED db 1]"
	if fmt.Sprint(got) != want {
		t.Fatalf("replayed %v, want %s", got, want)
	}
	// Live changes follow the replay.
	s.Create(ctx, pool("api", 1))
	select {
	case ev := <-w.Events():
		if ev.Type != Added || ev.Object.GetMeta().Name != "api" {
			t.Fatalf("live: %s %s", ev.Type, ev.Object.GetMeta().Name)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no live event after the replay")
	}
	if _, err := s.WatchFrom(ctx, api.KindSandboxPool, api.Selector{}, "1099511627776"); !errors.Is(err, api.ErrGone) {
		t.Fatalf("future revision: %v", err)
	}
}

func TestWatchFromCompactedRevision(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, t.TempDir(), Options{MaxChanges: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, _ := s.Create(ctx, pool("p-0", 1))
	for i := 1; i < 1100; i++ {
		if _, err := s.Create(ctx, pool(fmt.Sprintf("p-%d", i), 1)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.WatchFrom(ctx, api.KindSandboxPool, api.Selector{}, first.GetMeta().ResourceVersion)
	if !errors.Is(err, api.ErrGone) || !strings.Contains(err.Error(), "compacted") {
		t.Fatalf("watch from a compacted revision: %v", err)
	}
	var n, rv, compacted int64
	s.r.QueryRow(`SELECT COUNT(*) FROM changes`).Scan(&n)
	if n > 1000 {
		t.Fatalf("%d changes kept with MaxChanges 10", n)
	}
	// What is kept is every change after the compacted revision, which
	// a watch still resumes from.
	s.r.QueryRow(`SELECT rv, compacted_rv FROM revision`).Scan(&rv, &compacted)
	if n != rv-compacted {
		t.Fatalf("%d changes kept after revision %d, at revision %d", n, compacted, rv)
	}
	w, err := s.WatchFrom(ctx, api.KindSandboxPool, api.Selector{}, formatRV(compacted))
	if err != nil {
		t.Fatalf("watch from the compacted revision: %v", err)
	}
	if got := len(w.Events()); int64(got) != n {
		t.Fatalf("the watch replayed %d changes, want %d", got, n)
	}
}

// TestUpdateStatusGroups: each group lands whole or not at all; a group
// that conflicts is left out and the others land; watchers hear only of
// what landed.
func TestUpdateStatusGroups(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	a, _ := s.Create(ctx, pool("a", 1))
	b, _ := s.Create(ctx, pool("b", 1))
	c, _ := s.Create(ctx, pool("c", 1))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, w, err := s.ListAndWatch(wctx, api.KindSandboxPool, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	set := func(o api.Object, ready int) api.Object {
		p := api.DeepCopy(o).(*api.SandboxPool)
		p.Status.Ready = ready
		return p
	}
	stale := set(c, 9)
	stale.GetMeta().ResourceVersion = "1"
	out, errs, err := s.UpdateStatusGroups(ctx, [][]api.Object{
		{set(a, 1), set(b, 1)},
		{set(b, 2), stale}, // b was written by the first group: its rv is stale too
		{set(c, 3)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || !errors.Is(errs[1], api.ErrConflict) || errs[2] != nil || out[1] != nil {
		t.Fatalf("errs %v, out %v", errs, out)
	}
	for name, want := range map[string]int{"a": 1, "b": 1, "c": 3} {
		o, _ := s.Get(ctx, api.KindSandboxPool, name)
		if got := o.(*api.SandboxPool).Status.Ready; got != want {
			t.Errorf("%s: ready %d, want %d", name, got, want)
		}
	}
	for _, want := range []string{"a", "b", "c"} {
		select {
		case ev := <-w.Events():
			if ev.Object.GetMeta().Name != want || ev.Object.(*api.SandboxPool).Status.Ready == 2 {
				t.Fatalf("watch: %s %s ready %d", ev.Type, ev.Object.GetMeta().Name, ev.Object.(*api.SandboxPool).Status.Ready)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("no event for %s", want)
		}
	}
}

// TestWriterReadsWhatCommitted: the writer's reads come from the objects
// as last committed (Store.latest): a write rolled back (a whole
// transaction, or one write of a batch) leaves nothing there, a
// transaction sees its own writes, a deletion is gone, and a watcher that
// changes the object it was sent changes nothing that is written after.
func TestWriterReadsWhatCommitted(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	_, w, err := s.ListAndWatch(ctx, api.KindSandboxPool, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Create(ctx, pool("p", 1))
	if err != nil {
		t.Fatal(err)
	}

	// A transaction that fails after its write: the next write starts
	// from what committed.
	boom := errors.New("boom")
	if err := s.Tx(ctx, func(tx *Tx) error {
		if _, err := tx.UpdateStatus(withReady(p, 7)); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("tx: %v", err)
	}
	// A write that fails (a stale version) beside one that commits, in
	// one transaction's savepoints.
	stale := withReady(p, 9)
	stale.Metadata.ResourceVersion = "1"
	if err := s.Tx(ctx, func(tx *Tx) error {
		if fnErr, err := tx.savepoint(func(tx *Tx) error {
			_, err := tx.UpdateStatus(withReady(p, 8))
			if err != nil {
				return err
			}
			return boom
		}); err != nil || !errors.Is(fnErr, boom) {
			return fmt.Errorf("savepoint: %v, %v", fnErr, err)
		}
		// The transaction sees its own writes.
		if _, err := tx.UpdateStatus(withReady(p, 2)); err != nil {
			return err
		}
		cur, err := tx.Get(api.KindSandboxPool, "p")
		if err != nil {
			return err
		}
		if got := cur.(*api.SandboxPool).Status.Ready; got != 2 {
			return fmt.Errorf("the transaction reads ready %d after writing 2", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A watcher scribbles on the object it was sent last.
	var sent *api.SandboxPool
	for sent == nil || sent.Status.Ready != 2 {
		select {
		case ev := <-w.Events():
			sent = ev.Object.(*api.SandboxPool)
		case <-time.After(5 * time.Second):
			t.Fatal("no watch event of the write of ready 2")
		}
	}
	sent.Status.Ready, sent.Spec.Replicas = 99, 99
	sent.Metadata.Labels["scribbled"] = "yes"
	got, err := s.PatchStatus(ctx, api.KindSandboxPool, "p", "", []byte(`{"observedGeneration":3}`))
	if err != nil {
		t.Fatal(err)
	}
	g := got.(*api.SandboxPool)
	if g.Status.Ready != 2 || g.Spec.Replicas != 1 || g.Metadata.Labels["scribbled"] != "" || g.Status.ObservedGeneration != 3 {
		t.Fatalf("after the patch: ready %d, replicas %d, labels %v, observed %d; want 2, 1, no scribble, 3", g.Status.Ready, g.Spec.Replicas, g.Metadata.Labels, g.Status.ObservedGeneration)
	}
	// The stale version is refused against what committed.
	if _, err := s.UpdateStatus(ctx, stale); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("a write at version 1: %v, want a conflict", err)
	}
	// Deleted, then created again: nothing of the old one.
	if _, _, err := s.Delete(ctx, api.KindSandboxPool, "p", DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateStatus(ctx, withReady(g, 5)); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a status write of a deleted pool: %v, want not found", err)
	}
	if _, err := s.Create(ctx, pool("p", 4)); err != nil {
		t.Fatal(err)
	}
	o, err := s.Get(ctx, api.KindSandboxPool, "p")
	if err != nil {
		t.Fatal(err)
	}
	if o.(*api.SandboxPool).Status.Ready != 0 || o.(*api.SandboxPool).Spec.Replicas != 4 {
		t.Fatalf("created again: %+v", o.(*api.SandboxPool).Status)
	}
}

// Package storetest is the conformance suite of store.Interface: what the
// controllers, the node and the API server rely on from any store, run
// against each implementation (as drivers/conformance is for backends).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// Open returns an empty store for one test; the suite does not close it.
type Open func(t *testing.T) store.Interface

// watchWait bounds how long the suite waits for a watch event.
const watchWait = 30 * time.Second

// Run runs the suite against the stores open makes.
func Run(t *testing.T, open Open) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s store.Interface)
	}{
		{"CreateGet", testCreateGet},
		{"UpdateSpec", testUpdateSpec},
		{"UpdateStatus", testUpdateStatus},
		{"PatchStatus", testPatchStatus},
		{"DeleteWithFinalizers", testDeleteWithFinalizers},
		{"ListSelector", testListSelector},
		{"ListAndWatch", testListAndWatch},
		{"WatchFrom", testWatchFrom},
		{"WatchSelector", testWatchSelector},
		{"RecordEvent", testRecordEvent},
		{"CreatedEvent", testCreatedEvent},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func pool(name string, replicas int, labels map[string]string) *api.SandboxPool {
	p := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}}
	p.Metadata.Name = name
	p.Metadata.Labels = labels
	p.Spec.Replicas = replicas
	api.Default(p)
	return p
}

func sandbox(name string) *api.Sandbox {
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = name
	sb.Spec.TemplateRef = "desk"
	api.Default(sb)
	return sb
}

func mustCreate(t *testing.T, s store.Interface, o api.Object) api.Object {
	t.Helper()
	out, err := s.Create(context.Background(), o)
	if err != nil {
		t.Fatalf("create %s %s: %v", o.GetTypeMeta().Kind, o.GetMeta().Name, err)
	}
	return out
}

func mustGet(t *testing.T, s store.Interface, kind, name string) api.Object {
	t.Helper()
	o, err := s.Get(context.Background(), kind, name)
	if err != nil {
		t.Fatalf("get %s %s: %v", kind, name, err)
	}
	return o
}

func testCreateGet(t *testing.T, s store.Interface) {
	ctx := context.Background()
	created := mustCreate(t, s, pool("web", 2, nil))
	m := created.GetMeta()
	if m.UID == "" || m.ResourceVersion == "" || m.Generation != 1 || m.CreationTimestamp.IsZero() {
		t.Fatalf("create did not set uid, resourceVersion, generation 1 and creationTimestamp: %+v", m)
	}
	if _, err := s.Create(ctx, pool("web", 3, nil)); !errors.Is(err, api.ErrAlreadyExists) {
		t.Fatalf("second create of web: %v, want ErrAlreadyExists", err)
	}
	got := mustGet(t, s, api.KindSandboxPool, "web").(*api.SandboxPool)
	if got.Metadata.UID != m.UID || got.Spec.Replicas != 2 {
		t.Fatalf("get returned uid %s replicas %d, want %s and 2 (the refused create changed it?)", got.Metadata.UID, got.Spec.Replicas, m.UID)
	}
	if _, err := s.Get(ctx, api.KindSandboxPool, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("get of a missing object: %v, want ErrNotFound", err)
	}
	// The same name in another kind is another object.
	mustCreate(t, s, sandbox("web"))
}

func testUpdateSpec(t *testing.T, s store.Interface) {
	ctx := context.Background()
	created := mustCreate(t, s, pool("web", 2, nil)).(*api.SandboxPool)

	same := api.DeepCopy(created)
	if _, changed, err := s.Update(ctx, same); err != nil || changed {
		t.Fatalf("update with nothing changed: changed=%v err=%v, want no write", changed, err)
	}
	next := api.DeepCopy(created)
	next.Spec.Replicas = 5
	out, changed, err := s.Update(ctx, next)
	if err != nil || !changed {
		t.Fatalf("update replicas: changed=%v err=%v", changed, err)
	}
	om := out.GetMeta()
	if om.Generation != 2 || om.ResourceVersion == created.Metadata.ResourceVersion {
		t.Fatalf("a spec change gave generation %d, resourceVersion %q (was %q): want generation 2 and a new resourceVersion", om.Generation, om.ResourceVersion, created.Metadata.ResourceVersion)
	}
	// Written from a stale read: refused, nothing changed.
	stale := api.DeepCopy(created)
	stale.Spec.Replicas = 9
	if _, _, err := s.Update(ctx, stale); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("update from a stale resourceVersion: %v, want ErrConflict", err)
	}
	if got := mustGet(t, s, api.KindSandboxPool, "web").(*api.SandboxPool); got.Spec.Replicas != 5 {
		t.Fatalf("replicas %d after a refused update, want 5", got.Spec.Replicas)
	}
	missing := pool("nope", 1, nil)
	if _, _, err := s.Update(ctx, missing); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("update of a missing object: %v, want ErrNotFound", err)
	}
}

func testUpdateStatus(t *testing.T, s store.Interface) {
	ctx := context.Background()
	created := mustCreate(t, s, sandbox("sb")).(*api.Sandbox)
	cur := api.DeepCopy(created)
	cur.Status.Phase = api.SandboxPaused
	cur.Spec.TemplateRef = "other" // a status write leaves the spec alone
	out, err := s.UpdateStatus(ctx, cur)
	if err != nil {
		t.Fatal(err)
	}
	if out.GetMeta().Generation != created.Metadata.Generation {
		t.Fatalf("a status write changed the generation: %d, was %d", out.GetMeta().Generation, created.Metadata.Generation)
	}
	got := mustGet(t, s, api.KindSandbox, "sb").(*api.Sandbox)
	if got.Status.Phase != api.SandboxPaused || got.Spec.TemplateRef != "desk" {
		t.Fatalf("after a status write: phase %q templateRef %q, want Paused and desk", got.Status.Phase, got.Spec.TemplateRef)
	}
	stale := api.DeepCopy(created)
	stale.Status.Phase = api.SandboxRunning
	if _, err := s.UpdateStatus(ctx, stale); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("status write from a stale resourceVersion: %v, want ErrConflict", err)
	}
}

// testPatchStatus: a merge patch of the status changes the fields it
// names (null clears one), keeps the others and the spec, and is refused
// from a stale resourceVersion or for a missing object, changing nothing.
func testPatchStatus(t *testing.T, s store.Interface) {
	ctx := context.Background()
	created := mustCreate(t, s, sandbox("sb")).(*api.Sandbox)
	cur := api.DeepCopy(created)
	cur.Status.Phase, cur.Status.Node, cur.Status.Message = api.SandboxPaused, "n1", "warm"
	before, err := s.UpdateStatus(ctx, cur)
	if err != nil {
		t.Fatal(err)
	}
	rv := before.GetMeta().ResourceVersion
	out, err := s.PatchStatus(ctx, api.KindSandbox, "sb", rv, []byte(`{"currentAgent":"job","message":null,"claim":{"uid":"u1","resourceVersion":"7","attempt":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*api.Sandbox)
	if st := got.Status; st.CurrentAgent != "job" || st.Phase != api.SandboxPaused || st.Node != "n1" || st.Message != "" || st.Claim == nil || st.Claim.UID != "u1" || st.Claim.Attempt != 1 {
		t.Fatalf("patched status %+v, want the agent and claim set, the message cleared, phase and node kept", st)
	}
	if got.Metadata.ResourceVersion == rv || got.Metadata.Generation != created.Metadata.Generation || got.Spec.TemplateRef != "desk" {
		t.Fatalf("after a status patch: version %s (was %s), generation %d, templateRef %q", got.Metadata.ResourceVersion, rv, got.Metadata.Generation, got.Spec.TemplateRef)
	}
	if read := mustGet(t, s, api.KindSandbox, "sb").(*api.Sandbox); read.Status.CurrentAgent != "job" || read.Metadata.ResourceVersion != got.Metadata.ResourceVersion {
		t.Fatalf("read after the patch: %+v at %s", read.Status, read.Metadata.ResourceVersion)
	}
	if _, err := s.PatchStatus(ctx, api.KindSandbox, "sb", rv, []byte(`{"currentAgent":"other"}`)); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("status patch from a stale resourceVersion: %v, want ErrConflict", err)
	}
	if _, err := s.PatchStatus(ctx, api.KindSandbox, "nope", "", []byte(`{"phase":"Paused"}`)); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("status patch of a missing object: %v, want ErrNotFound", err)
	}
	if read := mustGet(t, s, api.KindSandbox, "sb").(*api.Sandbox); read.Status.CurrentAgent != "job" {
		t.Fatalf("a refused patch changed the status: %+v", read.Status)
	}
}

func testDeleteWithFinalizers(t *testing.T, s store.Interface) {
	ctx := context.Background()
	p := pool("web", 1, nil)
	p.Metadata.Finalizers = []string{"hvkube.io/test"}
	mustCreate(t, s, p)
	_, deleted, err := s.Delete(ctx, api.KindSandboxPool, "web", store.DeleteOptions{})
	if err != nil || deleted {
		t.Fatalf("delete of an object with a finalizer: deleted=%v err=%v, want marked only", deleted, err)
	}
	marked := mustGet(t, s, api.KindSandboxPool, "web").(*api.SandboxPool)
	if marked.Metadata.DeletionTimestamp == nil {
		t.Fatal("an object being deleted has no deletionTimestamp")
	}
	// Its last finalizer gone, it goes.
	marked.Metadata.Finalizers = nil
	if _, _, err := s.Update(ctx, marked); err != nil {
		t.Fatalf("remove the finalizer: %v", err)
	}
	if _, err := s.Get(ctx, api.KindSandboxPool, "web"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("get after the last finalizer went: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Delete(ctx, api.KindSandboxPool, "web", store.DeleteOptions{}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("delete of a missing object: %v, want ErrNotFound", err)
	}
	// A delete that names a resourceVersion is refused when it is stale.
	old := mustCreate(t, s, pool("db", 1, nil)).(*api.SandboxPool)
	next := api.DeepCopy(old)
	next.Spec.Replicas = 2
	if _, _, err := s.Update(ctx, next); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Delete(ctx, api.KindSandboxPool, "db", store.DeleteOptions{ResourceVersion: old.Metadata.ResourceVersion}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("delete with a stale resourceVersion: %v, want ErrConflict", err)
	}
	if _, deleted, err := s.Delete(ctx, api.KindSandboxPool, "db", store.DeleteOptions{}); err != nil || !deleted {
		t.Fatalf("delete: deleted=%v err=%v", deleted, err)
	}
}

func testListSelector(t *testing.T, s store.Interface) {
	ctx := context.Background()
	mustCreate(t, s, pool("a", 1, map[string]string{"team": "qa"}))
	mustCreate(t, s, pool("b", 1, map[string]string{"team": "dev"}))
	mustCreate(t, s, pool("c", 1, nil))
	mustCreate(t, s, sandbox("a"))
	all, _, err := s.List(ctx, api.KindSandboxPool, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(all); got != "[a b c]" {
		t.Fatalf("list of pools: %s, want [a b c]", got)
	}
	sel, err := api.ParseSelector("team=qa")
	if err != nil {
		t.Fatal(err)
	}
	qa, _, err := s.List(ctx, api.KindSandboxPool, sel)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(qa); got != "[a]" {
		t.Fatalf("list team=qa: %s, want [a]", got)
	}
}

func names(objs []api.Object) string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.GetMeta().Name
	}
	return fmt.Sprint(out)
}

// next reads w's next event, failing after watchWait.
func next(t *testing.T, w store.Watcher) store.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatalf("the watch ended: %v", w.Err())
		}
		return ev
	case <-time.After(watchWait):
		t.Fatalf("no watch event within %s", watchWait)
	}
	return store.WatchEvent{}
}

func expect(t *testing.T, w store.Watcher, typ, name string) api.Object {
	t.Helper()
	ev := next(t, w)
	if ev.Type != typ || ev.Object.GetMeta().Name != name {
		t.Fatalf("watch event %s %s, want %s %s", ev.Type, ev.Object.GetMeta().Name, typ, name)
	}
	return ev.Object
}

func testListAndWatch(t *testing.T, s store.Interface) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mustCreate(t, s, pool("before", 1, nil))
	items, w, err := s.ListAndWatch(ctx, api.KindSandboxPool, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(items); got != "[before]" {
		t.Fatalf("list: %s, want [before]", got)
	}
	// Every change after the list, in order, none twice.
	created := mustCreate(t, s, pool("after", 1, nil)).(*api.SandboxPool)
	expect(t, w, store.Added, "after")
	upd := api.DeepCopy(created)
	upd.Spec.Replicas = 3
	if _, _, err := s.Update(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if o := expect(t, w, store.Modified, "after"); o.(*api.SandboxPool).Spec.Replicas != 3 {
		t.Fatalf("a modified event carries replicas %d, want 3", o.(*api.SandboxPool).Spec.Replicas)
	}
	if _, _, err := s.Delete(ctx, api.KindSandboxPool, "before", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, w, store.Deleted, "before")
	// Another kind's changes are not this watch's.
	mustCreate(t, s, sandbox("x"))
	mustCreate(t, s, pool("last", 1, nil))
	expect(t, w, store.Added, "last")
	// The watch ends with its context.
	cancel()
	deadline := time.After(watchWait)
	for {
		select {
		case _, ok := <-w.Events():
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("the watch did not end within %s of its context", watchWait)
		}
	}
}

func testWatchFrom(t *testing.T, s store.Interface) {
	ctx := context.Background()
	mustCreate(t, s, pool("a", 1, nil))
	_, rv, err := s.List(ctx, api.KindSandboxPool, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, pool("b", 1, nil))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.WatchFrom(wctx, api.KindSandboxPool, api.Selector{}, rv)
	if err != nil {
		t.Fatal(err)
	}
	// What changed after the list's revision, then what comes.
	expect(t, w, store.Added, "b")
	mustCreate(t, s, pool("c", 1, nil))
	expect(t, w, store.Added, "c")
}

func testWatchSelector(t *testing.T, s store.Interface) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sel, err := api.ParseSelector("team=qa")
	if err != nil {
		t.Fatal(err)
	}
	_, w, err := s.ListAndWatch(ctx, api.KindSandboxPool, sel)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, pool("dev", 1, map[string]string{"team": "dev"}))
	p := mustCreate(t, s, pool("qa", 1, map[string]string{"team": "qa"})).(*api.SandboxPool)
	expect(t, w, store.Added, "qa")
	// Leaving the selector is a deletion for this watch; coming back in
	// an addition.
	out := api.DeepCopy(p)
	out.Metadata.Labels = map[string]string{"team": "dev"}
	moved, _, err := s.Update(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, w, store.Deleted, "qa")
	back := api.DeepCopy(moved.(*api.SandboxPool))
	back.Metadata.Labels = map[string]string{"team": "qa"}
	if _, _, err := s.Update(ctx, back); err != nil {
		t.Fatal(err)
	}
	expect(t, w, store.Added, "qa")
}

func testRecordEvent(t *testing.T, s store.Interface) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, w, err := s.ListAndWatch(ctx, api.KindEvent, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustCreate(t, s, pool("web", 1, nil))
	if err := s.RecordEvent(ctx, p, api.EventNormal, "ScaledUp", "created 1 sandbox(es): 1 of 1"); err != nil {
		t.Fatal(err)
	}
	// A store may record events of its own (SQLite's audit log records
	// each create): the recorded one comes among them.
	for {
		ev := next(t, w)
		e, ok := ev.Object.(*api.Event)
		if !ok {
			t.Fatalf("an events watch delivered a %T", ev.Object)
		}
		if e.Reason != "ScaledUp" {
			continue
		}
		if e.Type != api.EventNormal || e.InvolvedObject.Name != "web" || e.InvolvedObject.Kind != api.KindSandboxPool || e.Message != "created 1 sandbox(es): 1 of 1" {
			t.Fatalf("event %+v, want Normal ScaledUp of SandboxPool web with its message", e)
		}
		return
	}
}

// testCreatedEvent: a sandbox's creation is recorded (reason Created), a
// pool's member's is not (store.RecordsCreated).
func testCreatedEvent(t *testing.T, s store.Interface) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, w, err := s.ListAndWatch(ctx, api.KindEvent, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustCreate(t, s, pool("web", 1, nil))
	member := sandbox("web-abcde")
	member.Metadata.OwnerReferences = []api.OwnerReference{{Kind: api.KindSandboxPool, Name: "web", UID: p.GetMeta().UID}}
	m := mustCreate(t, s, member)
	mustCreate(t, s, sandbox("own"))
	if err := s.RecordEvent(ctx, m, api.EventNormal, "Marked", "after its creation"); err != nil {
		t.Fatal(err)
	}
	var ownCreated, marked bool
	for !ownCreated || !marked {
		e, ok := next(t, w).Object.(*api.Event)
		if !ok || e.InvolvedObject.Kind != api.KindSandbox {
			continue
		}
		switch {
		case e.InvolvedObject.Name == "own" && e.Reason == "Created":
			ownCreated = true
		case e.InvolvedObject.Name == "web-abcde" && e.Reason == "Marked":
			marked = true
		case e.InvolvedObject.Name == "web-abcde":
			t.Errorf("the pool's member recorded %s: %s", e.Reason, e.Message)
		}
	}
}

// Package storefault wraps a store.Interface and injects faults into the
// calls a test chooses: an error instead of the call, a delay before it, a
// hook that changes the store behind the caller's back, and watches cut
// short as a dropped connection cuts them. Tests of what uses a store (the
// controllers, the Manager's watches) drive their failure paths with it
// over a real store.
package storefault

import (
	"context"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// Op names a method of store.Interface.
type Op string

// The methods of store.Interface.
const (
	Get          Op = "Get"
	List         Op = "List"
	Create       Op = "Create"
	Update       Op = "Update"
	UpdateStatus Op = "UpdateStatus"
	PatchStatus  Op = "PatchStatus"
	Delete       Op = "Delete"
	ListAndWatch Op = "ListAndWatch"
	WatchFrom    Op = "WatchFrom"
	RecordEvent  Op = "RecordEvent"
)

// Call is one call to the store, as a Fault sees it.
type Call struct {
	Op   Op
	Kind string
	Name string // the object's, for the calls on one object; "" otherwise
}

// Fault is what happens to the calls it matches, in this order: Delay,
// Before, then Err instead of the call, or the call itself.
type Fault struct {
	Op   Op     // the method; required
	Kind string // "" matches every kind
	Name string // "" matches every name
	// Times is how many matching calls the fault takes; 0 is all of them.
	Times int
	// Delay holds the call this long first, or until its ctx ends (the
	// call then returns the ctx's error).
	Delay time.Duration
	// Before, when set, runs before the call, after Delay.
	Before func(Call)
	// Err, when set, is returned instead of calling the store.
	Err error
}

func (f *Fault) matches(c Call) bool {
	return f.Op == c.Op && (f.Kind == "" || f.Kind == c.Kind) && (f.Name == "" || f.Name == c.Name)
}

// Store is a store.Interface that passes every call to the one it wraps,
// except for the faults injected into it. It is safe for concurrent use.
type Store struct {
	inner store.Interface

	mu      sync.Mutex // guards the following fields
	faults  []*Fault
	calls   map[Op]int
	watches map[*watch]struct{}
}

// watch is a watch handed out, which CutWatches can end.
type watch struct {
	kind   string
	cancel context.CancelFunc
}

var _ store.Interface = (*Store)(nil)

// New wraps inner, with no fault yet.
func New(inner store.Interface) *Store {
	return &Store{inner: inner, calls: map[Op]int{}, watches: map[*watch]struct{}{}}
}

// Inject adds f. A call meets the first fault, in the order injected, that
// matches it and has calls left to take.
func (s *Store) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// Clear removes every fault; calls under way keep theirs.
func (s *Store) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// Calls is how many calls of op the store has had, faulted or not.
func (s *Store) Calls(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// CutWatches ends the watches of kind ("" for every kind) that this store
// handed out and that still run, as a dropped connection would: each
// Watcher's channel closes with a nil Err, and its reader watches again.
// It returns how many it cut. A change committed right after may still
// reach a cut watch; to change the store unseen, do it in a Before of the
// WatchFrom that resumes it.
func (s *Store) CutWatches(kind string) int {
	s.mu.Lock()
	var cut []*watch
	for w := range s.watches {
		if kind == "" || w.kind == kind {
			cut = append(cut, w)
			delete(s.watches, w)
		}
	}
	s.mu.Unlock()
	for _, w := range cut {
		w.cancel()
	}
	return len(cut)
}

// enter counts c and applies the fault it meets, if any.
func (s *Store) enter(ctx context.Context, c Call) error {
	s.mu.Lock()
	s.calls[c.Op]++
	var f *Fault
	for i, g := range s.faults {
		if !g.matches(c) {
			continue
		}
		f = g
		if g.Times > 0 {
			if g.Times--; g.Times == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		break
	}
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if f.Before != nil {
		f.Before(c)
	}
	return f.Err
}

// watchCtx returns the context a watch of kind runs under: ctx, or
// CutWatches. done forgets it when the watch could not start.
func (s *Store) watchCtx(ctx context.Context, kind string) (wctx context.Context, done func(started bool)) {
	wctx, cancel := context.WithCancel(ctx)
	w := &watch{kind: kind, cancel: cancel}
	s.mu.Lock()
	s.watches[w] = struct{}{}
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		delete(s.watches, w)
		s.mu.Unlock()
	}
	return wctx, func(started bool) {
		if !started {
			forget()
			cancel()
			return
		}
		context.AfterFunc(wctx, forget)
	}
}

// Get passes to the wrapped store unless a fault says otherwise.
func (s *Store) Get(ctx context.Context, kind, name string) (api.Object, error) {
	if err := s.enter(ctx, Call{Op: Get, Kind: kind, Name: name}); err != nil {
		return nil, err
	}
	return s.inner.Get(ctx, kind, name)
}

// List passes to the wrapped store unless a fault says otherwise.
func (s *Store) List(ctx context.Context, kind string, sel api.Selector) ([]api.Object, string, error) {
	if err := s.enter(ctx, Call{Op: List, Kind: kind}); err != nil {
		return nil, "", err
	}
	return s.inner.List(ctx, kind, sel)
}

// Create passes to the wrapped store unless a fault says otherwise.
func (s *Store) Create(ctx context.Context, o api.Object) (api.Object, error) {
	if err := s.enter(ctx, callOn(Create, o)); err != nil {
		return nil, err
	}
	return s.inner.Create(ctx, o)
}

// Update passes to the wrapped store unless a fault says otherwise.
func (s *Store) Update(ctx context.Context, o api.Object) (api.Object, bool, error) {
	if err := s.enter(ctx, callOn(Update, o)); err != nil {
		return nil, false, err
	}
	return s.inner.Update(ctx, o)
}

// UpdateStatus passes to the wrapped store unless a fault says otherwise.
func (s *Store) UpdateStatus(ctx context.Context, o api.Object) (api.Object, error) {
	if err := s.enter(ctx, callOn(UpdateStatus, o)); err != nil {
		return nil, err
	}
	return s.inner.UpdateStatus(ctx, o)
}

// PatchStatus passes to the wrapped store unless a fault says otherwise.
func (s *Store) PatchStatus(ctx context.Context, kind, name, rv string, patch []byte) (api.Object, error) {
	if err := s.enter(ctx, Call{Op: PatchStatus, Kind: kind, Name: name}); err != nil {
		return nil, err
	}
	return s.inner.PatchStatus(ctx, kind, name, rv, patch)
}

// Delete passes to the wrapped store unless a fault says otherwise.
func (s *Store) Delete(ctx context.Context, kind, name string, opts store.DeleteOptions) (api.Object, bool, error) {
	if err := s.enter(ctx, Call{Op: Delete, Kind: kind, Name: name}); err != nil {
		return nil, false, err
	}
	return s.inner.Delete(ctx, kind, name, opts)
}

// ListAndWatch passes to the wrapped store unless a fault says otherwise;
// CutWatches can end the watch.
func (s *Store) ListAndWatch(ctx context.Context, kind string, sel api.Selector) ([]api.Object, store.Watcher, error) {
	if err := s.enter(ctx, Call{Op: ListAndWatch, Kind: kind}); err != nil {
		return nil, nil, err
	}
	wctx, done := s.watchCtx(ctx, kind)
	items, w, err := s.inner.ListAndWatch(wctx, kind, sel)
	done(err == nil)
	return items, w, err
}

// WatchFrom passes to the wrapped store unless a fault says otherwise;
// CutWatches can end the watch.
func (s *Store) WatchFrom(ctx context.Context, kind string, sel api.Selector, rv string) (store.Watcher, error) {
	if err := s.enter(ctx, Call{Op: WatchFrom, Kind: kind}); err != nil {
		return nil, err
	}
	wctx, done := s.watchCtx(ctx, kind)
	w, err := s.inner.WatchFrom(wctx, kind, sel, rv)
	done(err == nil)
	return w, err
}

// RecordEvent passes to the wrapped store unless a fault says otherwise.
func (s *Store) RecordEvent(ctx context.Context, o api.Object, eventType, reason, message string) error {
	if err := s.enter(ctx, callOn(RecordEvent, o)); err != nil {
		return err
	}
	return s.inner.RecordEvent(ctx, o, eventType, reason, message)
}

func callOn(op Op, o api.Object) Call {
	return Call{Op: op, Kind: o.GetTypeMeta().Kind, Name: o.GetMeta().Name}
}

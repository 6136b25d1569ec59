package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// nodeViews lets many simulated nodes in one process share one watch of
// the store per kind. Each node gets a view (store.Interface) in which the
// sandboxes and agents are only those placed on it (status.node), as a
// field selector on status.node shows a kubelet only its own pods: a
// node's controllers then hear of their own objects and not of every
// change in the cluster. Reads of one object (Get) and every write go to
// the store itself, as each node's own would.
type nodeViews struct {
	st store.Interface

	mu    sync.Mutex // guards the following fields and every viewWatcher's sends
	kinds map[string]*sharedKind
}

// sharedKind is the one watch of a kind: the objects it has brought, the
// resourceVersion of the last change, and the views' watchers.
type sharedKind struct {
	objs map[string]api.Object
	rv   string
	subs map[*viewWatcher]struct{}
}

// viewBuffer is how many changes a view's watcher holds for its reader;
// past it the watcher ends (the node's Manager lists the view again).
const viewBuffer = 4096

// errViewGone ends a view's watcher whose reader fell behind, or after the
// shared watch had to list again: the reader lists the view again.
var errViewGone = fmt.Errorf("the shared watch moved on: list again: %w", api.ErrGone)

// newNodeViews lists and watches kinds of st until ctx ends.
func newNodeViews(ctx context.Context, st store.Interface, kinds ...string) (*nodeViews, error) {
	v := &nodeViews{st: st, kinds: map[string]*sharedKind{}}
	for _, kind := range kinds {
		items, w, err := st.ListAndWatch(ctx, kind, api.Selector{})
		if err != nil {
			return nil, err
		}
		k := &sharedKind{objs: map[string]api.Object{}, rv: w.From(), subs: map[*viewWatcher]struct{}{}}
		for _, it := range items {
			k.objs[it.GetMeta().Name] = it
		}
		v.kinds[kind] = k
		go v.follow(ctx, kind, w)
	}
	return v, nil
}

// follow applies the changes of one kind's watch and hands them to the
// views. When the watch ends it resumes from the last change, or lists
// again and ends the views' watchers, whose readers then list again.
func (v *nodeViews) follow(ctx context.Context, kind string, w store.Watcher) {
	for {
		for ev := range w.Events() {
			v.apply(kind, ev)
		}
		if ctx.Err() != nil {
			v.endAll(kind, nil)
			return
		}
		v.mu.Lock()
		last := v.kinds[kind].rv
		v.mu.Unlock()
		next, err := v.st.WatchFrom(ctx, kind, api.Selector{}, last)
		for err != nil {
			if ctx.Err() != nil {
				v.endAll(kind, nil)
				return
			}
			var items []api.Object
			items, next, err = v.st.ListAndWatch(ctx, kind, api.Selector{})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			} else {
				v.mu.Lock()
				k := v.kinds[kind]
				k.objs = map[string]api.Object{}
				for _, it := range items {
					k.objs[it.GetMeta().Name] = it
				}
				k.rv = next.From()
				v.mu.Unlock()
				v.endAll(kind, errViewGone)
			}
		}
		w = next
	}
}

func (v *nodeViews) endAll(kind string, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := v.kinds[kind]
	for sub := range k.subs {
		delete(k.subs, sub)
		sub.stop(err)
	}
}

// apply records one change and passes it to each view that shows the
// object now or showed it before, as the change it is for that view: an
// object that comes onto a node is ADDED there, one that leaves it
// DELETED. Sends never block: a view that cannot take the change ends.
func (v *nodeViews) apply(kind string, ev store.WatchEvent) {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := v.kinds[kind]
	name := ev.Object.GetMeta().Name
	prev := k.objs[name]
	if ev.Type == store.Deleted {
		delete(k.objs, name)
	} else {
		k.objs[name] = ev.Object
	}
	k.rv = ev.Object.GetMeta().ResourceVersion
	for sub := range k.subs {
		was := prev != nil && v.showsLocked(sub.node, prev) && sub.sel.Matches(prev.GetMeta().Labels)
		now := v.showsLocked(sub.node, ev.Object) && sub.sel.Matches(ev.Object.GetMeta().Labels)
		typ := ""
		switch {
		case ev.Type == store.Deleted && (was || now):
			typ = store.Deleted
		case ev.Type == store.Deleted:
		case now && was:
			typ = store.Modified
		case now:
			typ = store.Added
		case was:
			typ = store.Deleted
		}
		if typ == "" {
			continue
		}
		select {
		case sub.ch <- store.WatchEvent{Type: typ, Object: api.DeepCopy(ev.Object)}:
		default:
			delete(k.subs, sub)
			sub.stop(errViewGone)
		}
	}
}

// view is what node name sees.
func (v *nodeViews) view(name string) *nodeView { return &nodeView{nodeViews: v, node: name} }

// nodeView is one node's store: lists and watches of the shared kinds
// from the shared watch, showing only the node's own sandboxes and
// agents; everything else from the store.
type nodeView struct {
	*nodeViews
	node string
}

var _ store.Interface = (*nodeView)(nil)

// showsLocked reports whether o is in node's view: a sandbox placed on
// it, an agent bound to it, or bound to one of its sandboxes without
// naming the node; anything else of the shared kinds.
func (v *nodeViews) showsLocked(node string, o api.Object) bool {
	switch x := o.(type) {
	case *api.Sandbox:
		return x.Status.Node == node
	case *api.Agent:
		if x.Status.Node != "" || x.Status.Sandbox == "" {
			return x.Status.Node == node
		}
		sandboxes := v.kinds[api.KindSandbox]
		if sandboxes == nil {
			return true // no way to tell: every node looks
		}
		sb, ok := sandboxes.objs[x.Status.Sandbox]
		return ok && sb.(*api.Sandbox).Status.Node == node
	}
	return true
}

func (n *nodeView) Get(ctx context.Context, kind, name string) (api.Object, error) {
	return n.st.Get(ctx, kind, name)
}

func (n *nodeView) List(ctx context.Context, kind string, sel api.Selector) ([]api.Object, string, error) {
	k, ok := n.kinds[kind] // fixed once newNodeViews returns
	if !ok {
		return n.st.List(ctx, kind, sel)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.listLocked(k, sel), k.rv, nil
}

func (n *nodeView) listLocked(k *sharedKind, sel api.Selector) []api.Object {
	var out []api.Object
	for _, o := range k.objs {
		if n.showsLocked(n.node, o) && sel.Matches(o.GetMeta().Labels) {
			out = append(out, api.DeepCopy(o))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetMeta().Name < out[j].GetMeta().Name })
	return out
}

func (n *nodeView) Create(ctx context.Context, o api.Object) (api.Object, error) {
	return n.st.Create(ctx, o)
}

func (n *nodeView) Update(ctx context.Context, o api.Object) (api.Object, bool, error) {
	return n.st.Update(ctx, o)
}

func (n *nodeView) UpdateStatus(ctx context.Context, o api.Object) (api.Object, error) {
	return n.st.UpdateStatus(ctx, o)
}

func (n *nodeView) PatchStatus(ctx context.Context, kind, name, rv string, patch []byte) (api.Object, error) {
	return n.st.PatchStatus(ctx, kind, name, rv, patch)
}

func (n *nodeView) Delete(ctx context.Context, kind, name string, opts store.DeleteOptions) (api.Object, bool, error) {
	return n.st.Delete(ctx, kind, name, opts)
}

func (n *nodeView) RecordEvent(ctx context.Context, o api.Object, eventType, reason, message string) error {
	return n.st.RecordEvent(ctx, o, eventType, reason, message)
}

func (n *nodeView) ListAndWatch(ctx context.Context, kind string, sel api.Selector) ([]api.Object, store.Watcher, error) {
	k, ok := n.kinds[kind] // fixed once newNodeViews returns
	if !ok {
		return n.st.ListAndWatch(ctx, kind, sel)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.listLocked(k, sel), n.subscribeLocked(ctx, k, sel), nil
}

// WatchFrom resumes only from the shared watch's last change: the views
// keep no history, so any other resourceVersion is gone (list again).
func (n *nodeView) WatchFrom(ctx context.Context, kind string, sel api.Selector, rv string) (store.Watcher, error) {
	k, ok := n.kinds[kind] // fixed once newNodeViews returns
	if !ok {
		return n.st.WatchFrom(ctx, kind, sel, rv)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if rv != k.rv {
		return nil, fmt.Errorf("watch %s from %s: %w", kind, rv, errViewGone)
	}
	return n.subscribeLocked(ctx, k, sel), nil
}

func (n *nodeView) subscribeLocked(ctx context.Context, k *sharedKind, sel api.Selector) *viewWatcher {
	w := &viewWatcher{node: n.node, sel: sel, from: k.rv, ch: make(chan store.WatchEvent, viewBuffer), done: make(chan struct{})}
	k.subs[w] = struct{}{}
	go func() {
		select {
		case <-ctx.Done():
			n.mu.Lock()
			if _, ok := k.subs[w]; ok {
				delete(k.subs, w)
				w.stop(nil)
			}
			n.mu.Unlock()
		case <-w.done:
		}
	}()
	return w
}

// viewWatcher is a view's store.Watcher. Sends to it and its stop happen
// under nodeViews.mu, once it is taken out of the subscribers.
type viewWatcher struct {
	node string
	sel  api.Selector
	from string
	ch   chan store.WatchEvent

	once sync.Once
	err  error
	done chan struct{}
}

func (w *viewWatcher) Events() <-chan store.WatchEvent { return w.ch }
func (w *viewWatcher) From() string                    { return w.from }

func (w *viewWatcher) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

func (w *viewWatcher) stop(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.done)
		close(w.ch)
	})
}

package kube

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	corev1 "k8s.io/api/core/v1"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// watchBuffer is how many converted events a watcher holds for a slow
// reader; past it the watcher waits, and the API server's own buffer
// takes the rest (or ends the watch, which then ends with an error).
const watchBuffer = 256

// watcher is the Kubernetes store's store.Watcher. It follows one watch
// of the API server, watches again from the last resourceVersion it saw
// (an event's or a bookmark's) when the server ends the watch (as it does
// every few minutes), and ends with api.ErrGone when the server can no
// longer resume from there: the caller lists again.
type watcher struct {
	ch   chan store.WatchEvent
	from string

	mu   sync.Mutex
	err  error
	done chan struct{}
}

func (w *watcher) Events() <-chan store.WatchEvent { return w.ch }
func (w *watcher) From() string                    { return w.from }

func (w *watcher) Err() error {
	select {
	case <-w.done:
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.err
	default:
		return nil
	}
}

// startFunc opens a watch of the API server from a resourceVersion.
type startFunc func(ctx context.Context, rv string) (watch.Interface, error)

// convertFunc turns a watched object into hvkube's.
type convertFunc func(runtime.Object) (api.Object, error)

// ListAndWatch returns the current objects of kind matching sel and a
// Watcher of every later change, from the list's resourceVersion. For
// api.KindEvent the list is empty and the watch brings new events.
func (s *Store) ListAndWatch(ctx context.Context, kind string, sel api.Selector) ([]api.Object, store.Watcher, error) {
	if kind == api.KindEvent {
		l, err := s.core.CoreV1().Events(s.ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return nil, nil, mapErr(err)
		}
		w, err := s.WatchFrom(ctx, kind, sel, l.ResourceVersion)
		return nil, w, err
	}
	items, rv, err := s.List(ctx, kind, sel)
	if err != nil {
		return nil, nil, err
	}
	w, err := s.WatchFrom(ctx, kind, sel, rv)
	if err != nil {
		return nil, nil, err
	}
	return items, w, nil
}

// WatchFrom returns a Watcher of the changes of kind after resourceVersion
// rv. One the API server no longer holds (compacted) ends the watch with
// an error wrapping api.ErrGone.
func (s *Store) WatchFrom(ctx context.Context, kind string, sel api.Selector, rv string) (store.Watcher, error) {
	var start startFunc
	var conv convertFunc
	if kind == api.KindEvent {
		start = func(ctx context.Context, rv string) (watch.Interface, error) {
			return s.core.CoreV1().Events(s.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		}
		conv = func(o runtime.Object) (api.Object, error) {
			e, ok := o.(*corev1.Event)
			if !ok {
				return nil, fmt.Errorf("an events watch delivered a %T", o)
			}
			return fromKubeEvent(e), nil
		}
	} else {
		r, err := s.res(kind)
		if err != nil {
			return nil, err
		}
		start = func(ctx context.Context, rv string) (watch.Interface, error) {
			return r.Watch(ctx, metav1.ListOptions{LabelSelector: sel.String(), FieldSelector: s.fieldSelector(kind), ResourceVersion: rv, AllowWatchBookmarks: true})
		}
		conv = func(o runtime.Object) (api.Object, error) {
			u, ok := o.(*unstructured.Unstructured)
			if !ok {
				return nil, fmt.Errorf("a %s watch delivered a %T", kind, o)
			}
			return s.decode(u)
		}
	}
	wi, err := start(ctx, rv)
	if err != nil {
		return nil, mapErr(err)
	}
	w := &watcher{ch: make(chan store.WatchEvent, watchBuffer), from: rv, done: make(chan struct{})}
	go w.run(ctx, s, kind, wi, start, conv)
	return w, nil
}

func (w *watcher) finish(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
	close(w.done)
	close(w.ch)
}

func (w *watcher) run(ctx context.Context, s *Store, kind string, wi watch.Interface, start startFunc, conv convertFunc) {
	last := w.from
	defer func() { wi.Stop() }()
	for {
		select {
		case <-ctx.Done():
			w.finish(nil)
			return
		case ev, ok := <-wi.ResultChan():
			if !ok {
				// The server ended the watch (its timeout, a restart):
				// watch again from the last version seen.
				if ctx.Err() != nil {
					w.finish(nil)
					return
				}
				next, err := start(ctx, last)
				if err != nil {
					if ctx.Err() != nil {
						err = nil
					}
					w.finish(mapErr(err))
					return
				}
				wi = next
				continue
			}
			switch ev.Type {
			case watch.Bookmark:
				if a, err := meta.Accessor(ev.Object); err == nil {
					last = a.GetResourceVersion()
				}
				continue
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				w.finish(fmt.Errorf("watch %s from resourceVersion %s: %w", kind, last, mapErr(err)))
				return
			}
			o, err := conv(ev.Object)
			if err != nil {
				s.log.Warn("watch: skip an object", "kind", kind, "err", err)
				continue
			}
			last = o.GetMeta().ResourceVersion
			typ := store.Modified
			switch ev.Type {
			case watch.Added:
				typ = store.Added
			case watch.Deleted:
				typ = store.Deleted
			}
			select {
			case w.ch <- store.WatchEvent{Type: typ, Object: o}:
			case <-ctx.Done():
				w.finish(nil)
				return
			}
		}
	}
}

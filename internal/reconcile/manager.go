package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// Reconciler brings the object of one kind named by a key in line with
// its spec. It re-reads what it acts on every time: a key says only which
// object to look at.
type Reconciler interface {
	Reconcile(ctx context.Context, name string) (Result, error)
}

// ReconcilerFunc adapts a function to Reconciler.
type ReconcilerFunc func(ctx context.Context, name string) (Result, error)

// Reconcile calls f.
func (f ReconcilerFunc) Reconcile(ctx context.Context, name string) (Result, error) {
	return f(ctx, name)
}

// Controller is a reconciler with what drives it: the kind whose object
// names are its keys, the changes of other kinds that concern those keys,
// and how many keys it works on at once.
type Controller struct {
	Name       string
	For        string
	Reconciler Reconciler
	Workers    int
	// Watches map changes of other kinds (or of For) to keys.
	Watches []Watch
	// ResyncKeys gives what a resync adds for a controller whose keys are
	// not object names (For is empty).
	ResyncKeys func() []string
}

// Watch maps a changed object of Kind to the keys it concerns.
type Watch struct {
	Kind string
	Map  func(o api.Object) []string
}

// Manager runs registered controllers over one store: one watch per kind,
// fanned out to the controllers' queues, a periodic resync, and an orderly
// stop. It knows no backend: controllers that own VMs register with it
// like the others.
type Manager struct {
	st     store.Interface
	log    *slog.Logger
	resync time.Duration

	// retry is how long a watch that the store refused waits before it
	// tries again.
	retry time.Duration

	mu          sync.Mutex // guards the following fields
	observe     ObserveFunc
	controllers []*registered
	caches      map[string]*Cache
	started     bool
	ctx         context.Context // Start's, ended by Stop
	cancel      context.CancelFunc
	wg          sync.WaitGroup

	healthMu sync.Mutex // guards the following field
	down     map[string]watchDown
}

// watchDown is why a kind's watch is not running, and since when.
type watchDown struct {
	err   error
	since time.Time
}

// informer is the Manager's watch of one kind: the cache it keeps (the
// one asked for with Cache, or its own) and the handlers that hear of
// each changed object.
type informer struct {
	kind     string
	cache    *Cache
	handlers []func(api.Object)
}

func (in *informer) deliver(o api.Object) {
	for _, h := range in.handlers {
		h(o)
	}
}

type registered struct {
	Controller
	q *Queue
}

// NewManager returns a Manager over st. resync is how often every object
// is reconciled again (0: one minute).
func NewManager(st store.Interface, log *slog.Logger, resync time.Duration) *Manager {
	if log == nil {
		log = slog.Default()
	}
	if resync == 0 {
		resync = time.Minute
	}
	return &Manager{st: st, log: log, resync: resync, retry: time.Second, down: map[string]watchDown{}}
}

// Cache returns the cache of kind, which Start fills and keeps current. It
// must be asked for before Start.
func (m *Manager) Cache(kind string) *Cache {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.caches == nil {
		m.caches = map[string]*Cache{}
	}
	c, ok := m.caches[kind]
	if !ok {
		if m.started {
			panic("controller: Cache of a new kind after Start")
		}
		c = newCache(kind)
		m.caches[kind] = c
	}
	return c
}

// Register adds a controller; it must be called before Start. It returns
// the controller's queue, so that its owner can add keys itself (after an
// operation that the store does not see).
func (m *Manager) Register(c Controller) *Queue {
	if c.Workers == 0 {
		c.Workers = 1
	}
	r := &registered{Controller: c, q: NewQueue(c.Name, m.log)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		panic("controller: Register after Start")
	}
	m.controllers = append(m.controllers, r)
	return r.q
}

// ObserveFunc hears of each reconcile: the controller's name and the
// error it returned (nil when it succeeded). It must not block; metrics
// count with it.
type ObserveFunc func(controller string, err error)

// Observe sets what hears of every reconcile; it must be called before
// Start.
func (m *Manager) Observe(f ObserveFunc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observe = f
}

// Start lists and watches every kind the controllers need and runs their
// workers until Stop (or ctx ends). It returns once they run.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return errors.New("controller: started twice")
	}
	ctx, m.cancel = context.WithCancel(ctx)
	if m.observe != nil {
		for _, c := range m.controllers {
			name, f := c.Name, m.observe
			c.q.observe = func(err error) { f(name, err) }
		}
	}
	kinds := map[string][]func(api.Object){}
	for kind := range m.caches {
		kinds[kind] = nil
	}
	for _, c := range m.controllers {
		q := c.q
		if c.For != "" {
			kinds[c.For] = append(kinds[c.For], func(o api.Object) { q.Add(o.GetMeta().Name) })
		}
		for _, w := range c.Watches {
			mapf := w.Map
			kinds[w.Kind] = append(kinds[w.Kind], func(o api.Object) {
				for _, k := range mapf(o) {
					q.Add(k)
				}
			})
		}
	}
	for kind, handlers := range kinds {
		in := &informer{kind: kind, cache: m.caches[kind], handlers: handlers}
		if in.cache == nil {
			// Kept even when no controller reads it: a relist diffs
			// against it to find the deletions it missed, and a resync
			// ranges over it.
			in.cache = newCache(kind)
			if m.caches == nil {
				m.caches = map[string]*Cache{}
			}
			m.caches[kind] = in.cache
		}
		items, wt, err := m.st.ListAndWatch(ctx, kind, api.Selector{})
		if err != nil {
			m.cancel()
			return fmt.Errorf("watch %s: %w", kind, err)
		}
		in.cache.reset(items)
		for _, it := range items {
			in.deliver(it)
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.follow(ctx, in, wt)
		}()
	}
	for _, c := range m.controllers {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			c.q.Run(ctx, c.Workers, c.Reconciler.Reconcile)
		}()
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.resyncLoop(ctx)
	}()
	m.started = true
	m.ctx = ctx
	return nil
}

// Stop ends the controllers and waits until every worker has returned
// from the key it was working on. It is safe to call more than once.
func (m *Manager) Stop() {
	m.mu.Lock()
	cancel := m.cancel
	m.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	m.wg.Wait()
}

// Ready reports whether the controllers run on a current view: an error
// before Start, after Stop, and while the watch of a kind is down (it
// ended and the store has not yet let it resume or list again), naming
// the kinds, since when and why.
func (m *Manager) Ready(ctx context.Context) error {
	m.mu.Lock()
	started, mctx := m.started, m.ctx
	m.mu.Unlock()
	if !started {
		return errors.New("controllers not started")
	}
	if mctx.Err() != nil {
		return errors.New("controllers stopped")
	}
	m.healthMu.Lock()
	defer m.healthMu.Unlock()
	if len(m.down) == 0 {
		return nil
	}
	kinds := make([]string, 0, len(m.down))
	for k := range m.down {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	errs := make([]error, 0, len(kinds))
	for _, k := range kinds {
		d := m.down[k]
		errs = append(errs, fmt.Errorf("watch of %s down since %s: %w", k, d.since.UTC().Format(time.RFC3339), d.err))
	}
	return errors.Join(errs...)
}

func (m *Manager) setDown(kind string, err error) {
	m.healthMu.Lock()
	defer m.healthMu.Unlock()
	if err == nil {
		delete(m.down, kind)
		return
	}
	d, ok := m.down[kind]
	if !ok {
		d.since = time.Now()
	}
	d.err = err
	m.down[kind] = d
}

// follow feeds a watch to its informer. When the watch ends early it
// resumes after the last change it saw, or, when the store cannot resume
// from there, lists again: the cache is replaced by the list, and the
// objects it held that the list lacks (deleted in the gap) are delivered
// as deletions, in their last known state.
func (m *Manager) follow(ctx context.Context, in *informer, wt store.Watcher) {
	last := wt.From()
	for {
		for ev := range wt.Events() {
			in.cache.apply(ev.Type, ev.Object)
			in.deliver(ev.Object)
			last = ev.Object.GetMeta().ResourceVersion
		}
		if ctx.Err() != nil {
			return
		}
		cause := wt.Err()
		if cause == nil {
			cause = errors.New("the store ended the watch")
		}
		m.setDown(in.kind, cause)
		m.log.Warn("watch ended; resuming", "kind", in.kind, "after", last, "err", cause)
		// A watch that ended because the store can no longer resume from
		// where it was (Kubernetes' 410) lists again at once.
		gone := errors.Is(cause, api.ErrGone)
		for ctx.Err() == nil {
			var next store.Watcher
			err := api.ErrGone
			if !gone {
				next, err = m.st.WatchFrom(ctx, in.kind, api.Selector{}, last)
			}
			if errors.Is(err, api.ErrGone) {
				gone = true
				m.log.Info("cannot resume the watch; listing again", "kind", in.kind, "after", last, "err", err)
				var items []api.Object
				since := time.Now()
				items, next, err = m.st.ListAndWatch(ctx, in.kind, api.Selector{})
				if err == nil {
					deleted := in.cache.relist(items, since)
					for _, o := range deleted {
						in.deliver(o)
					}
					for _, it := range items {
						in.deliver(it)
					}
					m.log.Info("listed again", "kind", in.kind, "objects", len(items), "deleted", len(deleted))
				}
			}
			if err == nil {
				wt, last = next, next.From()
				m.setDown(in.kind, nil)
				break
			}
			if ctx.Err() != nil {
				return
			}
			m.setDown(in.kind, err)
			m.log.Warn("watch again", "kind", in.kind, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(m.retry):
			}
		}
	}
}

func (m *Manager) resyncLoop(ctx context.Context) {
	t := time.NewTicker(m.resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, c := range m.controllers {
				if c.For != "" {
					m.EnqueueAll(ctx, c.For, c.q)
				} else if c.ResyncKeys != nil {
					for _, k := range c.ResyncKeys() {
						c.q.Add(k)
					}
				}
			}
		}
	}
}

// EnqueueAll adds the name of every object of kind to q: from the kind's
// cache once a list has filled it (a resync costs the store nothing; its
// watch and the relists that follow a broken one keep the cache whole),
// else as the store lists them.
func (m *Manager) EnqueueAll(ctx context.Context, kind string, q *Queue) {
	m.mu.Lock()
	c := m.caches[kind]
	m.mu.Unlock()
	if c != nil && c.Synced() {
		var names []string
		c.Range(func(o api.Object) bool {
			names = append(names, o.GetMeta().Name)
			return true
		})
		for _, name := range names {
			q.Add(name)
		}
		return
	}
	items, _, err := m.st.List(ctx, kind, api.Selector{})
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("resync: list", "kind", kind, "err", err)
		}
		return
	}
	for _, it := range items {
		q.Add(it.GetMeta().Name)
	}
}

// SyncCaches fills every cache from the store now, replacing what it
// held, as a relist does: for tests that drive reconcilers by hand,
// without starting the Manager's watches.
func (m *Manager) SyncCaches(ctx context.Context) error {
	m.mu.Lock()
	caches := make(map[string]*Cache, len(m.caches))
	for k, c := range m.caches {
		caches[k] = c
	}
	m.mu.Unlock()
	for kind, c := range caches {
		items, _, err := m.st.List(ctx, kind, api.Selector{})
		if err != nil {
			return fmt.Errorf("list %s: %w", kind, err)
		}
		c.reset(items)
	}
	return nil
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// ResyncKey is what a resync adds for a controller whose keys are not
	// object names (For is empty).
	ResyncKey string
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

	mu          sync.Mutex // guards the following fields
	observe     ObserveFunc
	controllers []*registered
	caches      map[string]*Cache
	started     bool
	cancel      context.CancelFunc
	wg          sync.WaitGroup
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
	return &Manager{st: st, log: log, resync: resync}
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
		items, wt, err := m.st.ListAndWatch(ctx, kind, api.Selector{})
		if err != nil {
			m.cancel()
			return fmt.Errorf("watch %s: %w", kind, err)
		}
		cache := m.caches[kind]
		if cache != nil {
			cache.reset(items)
		}
		dispatch := func(typ string, o api.Object) {
			if cache != nil {
				cache.apply(typ, o)
			}
			for _, h := range handlers {
				h(o)
			}
		}
		for _, it := range items {
			dispatch(store.Added, it)
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.follow(ctx, kind, wt, cache, dispatch)
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

// Ready reports whether the controllers run.
func (m *Manager) Ready(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		return errors.New("controllers not started")
	}
	return nil
}

// follow feeds a watch to its handlers. When the watch ends early it
// resumes after the last change it saw, or lists again (refilling the
// cache) when the store cannot resume from there.
func (m *Manager) follow(ctx context.Context, kind string, wt *store.Watcher, cache *Cache, dispatch func(string, api.Object)) {
	last := wt.From()
	for {
		for ev := range wt.Events() {
			dispatch(ev.Type, ev.Object)
			last = store.ParseRV(ev.Object.GetMeta().ResourceVersion)
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("watch ended; resuming", "kind", kind, "after", last, "err", wt.Err())
		for ctx.Err() == nil {
			next, err := m.st.WatchFrom(ctx, kind, api.Selector{}, last)
			if errors.Is(err, api.ErrGone) {
				var items []api.Object
				items, next, err = m.st.ListAndWatch(ctx, kind, api.Selector{})
				if err == nil {
					if cache != nil {
						cache.reset(items)
					}
					for _, it := range items {
						dispatch(store.Added, it)
					}
				}
			}
			if err == nil {
				wt, last = next, next.From()
				break
			}
			m.log.Warn("watch again", "kind", kind, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
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
				} else if c.ResyncKey != "" {
					c.q.Add(c.ResyncKey)
				}
			}
		}
	}
}

// EnqueueAll adds the name of every object of kind to q.
func (m *Manager) EnqueueAll(ctx context.Context, kind string, q *Queue) {
	items, _, err := m.st.List(ctx, kind, api.Selector{})
	if err != nil {
		return
	}
	for _, it := range items {
		q.Add(it.GetMeta().Name)
	}
}

// RegisterAll registers the controllers that only read and write objects:
// the scheduler, agents, pools and display services. now is the clock
// (time.Now when nil); display, at most one, describes the server for the
// display services' endpoints.
func RegisterAll(m *Manager, st store.Interface, log *slog.Logger, now func() time.Time, display ...DisplayConfig) {
	if log == nil {
		log = slog.Default()
	}
	NewScheduler(m, st, log, now)
	NewAgents(m, st, log, now)
	NewPools(m, st, log, now)
	var dc DisplayConfig
	if len(display) > 0 {
		dc = display[0]
	}
	NewDisplayServices(m, st, log, now, dc)
}

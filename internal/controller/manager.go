package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/store"
)

// Finalizers hvkube puts on objects that own outside state.
const (
	FinalizerVM       = "hvkube.io/vm"
	FinalizerSnapshot = "hvkube.io/template-snapshot"
)

// Options configure a Manager.
type Options struct {
	Store   *store.Store
	Backend backend.Backend
	// DefaultTemplate is used by sandboxes that name no templateRef.
	DefaultTemplate string
	Logger          *slog.Logger
	// Resync is how often every object is looked at again (default 1m).
	Resync time.Duration
}

// Manager runs the template and sandbox controllers over one backend, and
// serves the imperative sandbox operations of the API (pause, screen,
// input, …) under the same per-sandbox lock as the sandbox controller.
type Manager struct {
	st  *store.Store
	be  backend.Backend
	log *slog.Logger
	opt Options

	templates *Queue
	sandboxes *Queue
	locks     keyedMutex

	mu      sync.Mutex // guards started
	started bool
}

// New returns a Manager; Start runs it.
func New(opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Resync == 0 {
		opts.Resync = time.Minute
	}
	return &Manager{
		st: opts.Store, be: opts.Backend, log: opts.Logger, opt: opts,
		templates: NewQueue("template", opts.Logger),
		sandboxes: NewQueue("sandbox", opts.Logger),
	}
}

// Start removes orphaned VMs, then runs the controllers until ctx ends. It
// returns once they run.
func (m *Manager) Start(ctx context.Context) error {
	if err := m.cleanOrphans(ctx); err != nil {
		return err
	}
	for _, w := range []struct {
		kind string
		add  func(api.Object)
	}{
		{api.KindTemplate, func(o api.Object) {
			m.templates.Add(o.GetMeta().Name)
			m.enqueueAll(ctx, api.KindSandbox, m.sandboxes) // sandboxes waiting on it
		}},
		{api.KindSandbox, func(o api.Object) { m.sandboxes.Add(o.GetMeta().Name) }},
	} {
		items, wt, err := m.st.ListAndWatch(ctx, w.kind, api.Selector{})
		if err != nil {
			return err
		}
		for _, it := range items {
			w.add(it)
		}
		go m.follow(ctx, w.kind, wt, w.add)
	}
	// Template builds block for a while; they get their own workers.
	go m.templates.Run(ctx, 2, m.reconcileTemplate)
	go m.sandboxes.Run(ctx, 4, m.reconcileSandbox)
	go m.resync(ctx)
	m.mu.Lock()
	m.started = true
	m.mu.Unlock()
	return nil
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

// follow feeds a watch into a queue, re-listing if the watch ends early.
func (m *Manager) follow(ctx context.Context, kind string, wt *store.Watcher, add func(api.Object)) {
	for {
		for ev := range wt.Events() {
			add(ev.Object)
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("watch ended; listing again", "kind", kind, "err", wt.Err())
		items, next, err := m.st.ListAndWatch(ctx, kind, api.Selector{})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(time.Second)
			continue
		}
		for _, it := range items {
			add(it)
		}
		wt = next
	}
}

func (m *Manager) resync(ctx context.Context) {
	t := time.NewTicker(m.opt.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.enqueueAll(ctx, api.KindTemplate, m.templates)
			m.enqueueAll(ctx, api.KindSandbox, m.sandboxes)
		}
	}
}

func (m *Manager) enqueueAll(ctx context.Context, kind string, q *Queue) {
	items, _, err := m.st.List(ctx, kind, api.Selector{})
	if err != nil {
		return
	}
	for _, it := range items {
		q.Add(it.GetMeta().Name)
	}
}

// cleanOrphans deletes VMs that no Sandbox object owns: left by a sandbox
// deleted while the server was down, or by an interrupted create.
func (m *Manager) cleanOrphans(ctx context.Context) error {
	vms, err := m.be.List(ctx)
	if err != nil {
		return fmt.Errorf("list VMs: %w", err)
	}
	for _, vm := range vms {
		o, err := m.st.Get(ctx, api.KindSandbox, vm.ID)
		if err == nil && (vm.UID == "" || o.GetMeta().UID == vm.UID) {
			continue
		}
		if err != nil && !errors.Is(err, api.ErrNotFound) {
			return err
		}
		m.log.Warn("deleting an orphaned VM", "sandbox", vm.ID, "state", vm.State)
		if err := m.be.Delete(ctx, vm.ID); err != nil {
			m.log.Error("delete orphaned VM", "sandbox", vm.ID, "err", err)
		}
	}
	return nil
}

// ---- shared helpers ----

// event records an event, logging instead of failing.
func (m *Manager) event(ctx context.Context, o api.Object, typ, reason, msg string) {
	if err := m.st.RecordEvent(ctx, o, typ, reason, msg); err != nil {
		m.log.Warn("record event", "object", o.GetMeta().Name, "err", err)
	}
}

// ensureFinalizer adds f to o, returning the stored object.
func (m *Manager) ensureFinalizer(ctx context.Context, o api.Object, f string) (api.Object, error) {
	return m.editMeta(ctx, o, func(meta *api.ObjectMeta) {
		if !slices.Contains(meta.Finalizers, f) {
			meta.Finalizers = append(meta.Finalizers, f)
		}
	})
}

// removeFinalizer removes f; the store deletes an object whose deletion was
// asked for once its last finalizer is gone.
func (m *Manager) removeFinalizer(ctx context.Context, o api.Object, f string) error {
	_, err := m.editMeta(ctx, o, func(meta *api.ObjectMeta) {
		meta.Finalizers = slices.DeleteFunc(meta.Finalizers, func(s string) bool { return s == f })
	})
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	return err
}

// editMeta applies edit to the stored object's metadata with optimistic
// concurrency, re-reading and retrying when someone else wrote first (a
// user's label change must not be overwritten).
func (m *Manager) editMeta(ctx context.Context, o api.Object, edit func(*api.ObjectMeta)) (api.Object, error) {
	kind, name := o.GetTypeMeta().Kind, o.GetMeta().Name
	for attempt := 0; ; attempt++ {
		c := api.DeepCopy(o)
		edit(c.GetMeta())
		out, _, err := m.st.Update(ctx, c)
		if !errors.Is(err, api.ErrConflict) || attempt >= 10 {
			return out, err
		}
		if o, err = m.st.Get(ctx, kind, name); err != nil {
			return nil, err
		}
	}
}

// snapshotID names the backend snapshot of a template generation: a new
// spec builds a new snapshot, and the old one stays for its clones.
func snapshotID(t *api.Template) string {
	gen := "-g" + strconv.FormatInt(t.Metadata.Generation, 10)
	name := t.Metadata.Name
	if len(name)+len(gen) > api.MaxNameLength {
		name = name[:api.MaxNameLength-len(gen)]
		for len(name) > 0 && name[len(name)-1] == '-' {
			name = name[:len(name)-1]
		}
	}
	return name + gen
}

// keyedMutex is one mutex per key.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// lock locks key and returns its unlock.
func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l, ok := k.locks[key]
	if !ok {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

package reconcile

import (
	"sort"
	"sync"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// Cache is the Manager's view of one kind, kept current by its watch: what
// a controller lists when it must look at many objects at once (the
// scheduler looks at every sandbox for every pending agent). It may lag the
// store by the time a change takes to arrive; writes go to the store,
// conditioned on the resourceVersion read here, so a stale view costs a
// conflict and a retry, never a wrong write. Objects in it are shared:
// never change one, DeepCopy it first.
type Cache struct {
	kind string

	mu      sync.RWMutex // guards the following fields
	objects map[string]api.Object
	// synced is the revision the cache's watch (or list) has brought it
	// to: every change up to it is applied, so an object the cache does
	// not hold whose resourceVersion is at or below synced was deleted by
	// then. It is the tombstone of every deletion up to it.
	synced int64
	// tombs are deletions the cache learned of ahead of its watch (a
	// caller that deleted an object forgets it), by name: a version of the
	// object at or below one is stale. They go once synced passes them.
	tombs map[string]int64
}

func newCache(kind string) *Cache {
	return &Cache{kind: kind, objects: map[string]api.Object{}, tombs: map[string]int64{}}
}

// Get returns the cached object named name.
func (c *Cache) Get(name string) (api.Object, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	o, ok := c.objects[name]
	return o, ok
}

// List returns the cached objects matching sel, by name.
func (c *Cache) List(sel api.Selector) []api.Object {
	c.mu.RLock()
	out := make([]api.Object, 0, len(c.objects))
	for _, o := range c.objects {
		if sel.Matches(o.GetMeta().Labels) {
			out = append(out, o)
		}
	}
	c.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].GetMeta().Name < out[j].GetMeta().Name })
	return out
}

// Range calls fn for each cached object, in no order, until fn returns
// false. fn must not call the cache.
func (c *Cache) Range(fn func(api.Object) bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, o := range c.objects {
		if !fn(o) {
			return
		}
	}
}

// Len is the number of cached objects.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.objects)
}

// Observe records o as written by the caller, unless the cache already
// holds a newer version or knows the object was deleted after o was
// written: a controller that wrote an object sees its own write before the
// watch brings it, and a write that lost the race with a deletion does not
// bring the object back.
func (c *Cache) Observe(o api.Object) {
	name, rv := o.GetMeta().Name, rvOf(o)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.staleLocked(name, rv) {
		return
	}
	c.objects[name] = o
}

// Forget drops name, deleted by the caller. The version the cache held
// becomes a tombstone: a late event of it (or an older one) does not
// bring the object back.
func (c *Cache) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.objects[name]; ok {
		if rv := rvOf(old); rv > c.synced && rv > c.tombs[name] {
			c.tombs[name] = rv
		}
		delete(c.objects, name)
	}
}

// staleLocked reports whether version rv of name is older than what the
// cache knows: a newer cached version, a deletion at or after rv, or
// (not cached, at or below synced) a deletion the watch brought.
func (c *Cache) staleLocked(name string, rv int64) bool {
	if old, ok := c.objects[name]; ok {
		return rvOf(old) > rv
	}
	if t, ok := c.tombs[name]; ok && rv <= t {
		return true
	}
	return rv <= c.synced
}

// apply records an event of the cache's watch, which brings every change
// in order: the cache is then current to its revision.
func (c *Cache) apply(typ string, o api.Object) {
	name, rv := o.GetMeta().Name, rvOf(o)
	c.mu.Lock()
	defer c.mu.Unlock()
	stale := false
	if old, ok := c.objects[name]; ok {
		stale = rvOf(old) > rv // the caller's own write, ahead of the watch
	} else if t, ok := c.tombs[name]; ok {
		stale = rv <= t
	}
	switch {
	case stale:
	case typ == store.Deleted:
		delete(c.objects, name)
	default:
		c.objects[name] = o
	}
	c.syncedLocked(rv)
}

// syncedLocked moves synced up to rv and drops the tombstones it covers.
func (c *Cache) syncedLocked(rv int64) {
	if rv <= c.synced {
		return
	}
	c.synced = rv
	for name, t := range c.tombs {
		if t <= rv {
			delete(c.tombs, name)
		}
	}
}

// relist replaces the cache with items, listed at revision rv, after its
// watch could not resume, and returns the objects that were deleted in
// the gap: those it held that the list lacks, in their last known state
// (client-go's DeletedFinalStateUnknown), by name. A cached version newer
// than the list (the caller's own write, after it) is kept, and a listed
// version the cache knows to be stale is not taken.
func (c *Cache) relist(items []api.Object, rv int64) (deleted []api.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := make(map[string]api.Object, len(items))
	for _, o := range items {
		name := o.GetMeta().Name
		if t, ok := c.tombs[name]; ok && rvOf(o) <= t {
			continue
		}
		if old, ok := c.objects[name]; ok && rvOf(old) > rvOf(o) {
			o = old
		}
		fresh[name] = o
	}
	for name, old := range c.objects {
		if _, ok := fresh[name]; ok {
			continue
		}
		if rvOf(old) > rv {
			fresh[name] = old // written after the list: the watch brings it
			continue
		}
		deleted = append(deleted, old)
	}
	c.objects = fresh
	c.syncedLocked(rv)
	sort.Slice(deleted, func(i, j int) bool { return deleted[i].GetMeta().Name < deleted[j].GetMeta().Name })
	return deleted
}

// reset replaces the cache with a fresh list, as a test fills it.
func (c *Cache) reset(items []api.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.objects = make(map[string]api.Object, len(items))
	var rv int64
	for _, o := range items {
		c.objects[o.GetMeta().Name] = o
		rv = max(rv, rvOf(o))
	}
	c.syncedLocked(rv)
}

func rvOf(o api.Object) int64 { return store.ParseRV(o.GetMeta().ResourceVersion) }

package controller

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

	mu      sync.RWMutex // guards objects
	objects map[string]api.Object
}

func newCache(kind string) *Cache {
	return &Cache{kind: kind, objects: map[string]api.Object{}}
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
// holds a newer version: a controller that wrote an object sees its own
// write before the watch brings it.
func (c *Cache) Observe(o api.Object) {
	c.apply(store.Modified, o)
}

// forget drops name, deleted by the caller.
func (c *Cache) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.objects, name)
}

// apply records a watch event.
func (c *Cache) apply(typ string, o api.Object) {
	name := o.GetMeta().Name
	rv := store.ParseRV(o.GetMeta().ResourceVersion)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.objects[name]; ok && store.ParseRV(old.GetMeta().ResourceVersion) > rv {
		return
	}
	if typ == store.Deleted {
		delete(c.objects, name)
		return
	}
	c.objects[name] = o
}

// reset replaces the cache with a fresh list.
func (c *Cache) reset(items []api.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.objects = make(map[string]api.Object, len(items))
	for _, o := range items {
		c.objects[o.GetMeta().Name] = o
	}
}

package reconcile

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// ExpectationTTL bounds how long a write the watch has not brought keeps
// its object in flight (Pending). The watch brings every write in order, so
// it is a guard (against a lost watch, a write that changed nothing) that
// bounds how long a controller can wait, not a delay anyone waits out;
// past it the controller acts on what it has, and the resourceVersion its
// write is conditioned on keeps that safe.
const ExpectationTTL = 5 * time.Second

// seenRing is how many recent (name, resourceVersion) pairs a cache
// remembers, so that an expectation recorded after the watch already
// brought its write is met at once.
const seenRing = 8192

// Cache is the Manager's view of one kind, kept current by its watch: what
// a controller lists when it must look at many objects at once (the
// scheduler looks at every sandbox for every pending agent). It holds only
// what the watch (or a list) brought, so it may lag the store by the time
// a change takes to arrive. Writes go to the store, conditioned on the
// resourceVersion read here, so a stale view costs a conflict and a retry,
// never a wrong write.
//
// Read-after-write is by expectations, as Kubernetes controllers do it: a
// controller that wrote or deleted an object says so (Expect,
// ExpectDeleted), and until the watch brings that write the object is
// Pending, for the controller to leave alone (the scheduler does not offer
// a sandbox it just claimed) or to wait for (a pool does not count its
// members while a creation is in flight). The cache never takes a
// controller's own write as its view, so it needs no order among
// resourceVersions: they stay opaque.
//
// Objects in it are shared: never change one, DeepCopy it first.
type Cache struct {
	kind string
	now  func() time.Time

	mu      sync.RWMutex // guards the following fields
	objects map[string]api.Object
	expect  map[string]expectation
	seen    map[seenKey]struct{} // the pairs in ring
	ring    []seenKey
	next    int // where ring's next pair goes
	indexes map[string]*cacheIndex
	listed  bool // a list filled it (Synced)
}

// Synced reports whether a list has filled the cache: before it, an empty
// cache says nothing of what exists.
func (c *Cache) Synced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.listed
}

// IndexFunc names the values under which an index finds an object (none:
// the index does not hold it).
type IndexFunc func(api.Object) []string

// cacheIndex is one of a cache's indexes: the names of the cached objects
// under each value, as client-go's Indexer keeps them.
type cacheIndex struct {
	fn IndexFunc
	by map[string]map[string]struct{}
}

func (x *cacheIndex) add(o api.Object) {
	name := o.GetMeta().Name
	for _, v := range x.fn(o) {
		set := x.by[v]
		if set == nil {
			set = map[string]struct{}{}
			x.by[v] = set
		}
		set[name] = struct{}{}
	}
}

func (x *cacheIndex) remove(o api.Object) {
	name := o.GetMeta().Name
	for _, v := range x.fn(o) {
		if set := x.by[v]; set != nil {
			delete(set, name)
			if len(set) == 0 {
				delete(x.by, v)
			}
		}
	}
}

// expectation is a write of one object the watch has not brought yet.
type expectation struct {
	obj  api.Object // as written; for a deletion, as last known
	rv   string     // the write's resourceVersion; "" for a deletion
	gone bool
	at   time.Time
}

type seenKey struct{ name, rv string }

func newCache(kind string) *Cache {
	return &Cache{kind: kind, now: time.Now, objects: map[string]api.Object{}, expect: map[string]expectation{},
		seen: map[seenKey]struct{}{}, ring: make([]seenKey, seenRing)}
}

// AddIndex adds an index named name that finds the cached objects by the
// values fn gives each (an object's pool, say), for RangeSettledIn and
// IndexLen. fn is called under the cache's lock: it must not call the
// cache, and it must give the same values for the same object every time.
// A second AddIndex of a name keeps the first.
func (c *Cache) AddIndex(name string, fn IndexFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.indexes == nil {
		c.indexes = map[string]*cacheIndex{}
	}
	if _, ok := c.indexes[name]; ok {
		return // the same index for every controller that asks
	}
	x := &cacheIndex{fn: fn, by: map[string]map[string]struct{}{}}
	for _, o := range c.objects {
		x.add(o)
	}
	c.indexes[name] = x
}

// reindexLocked rebuilds every index from the cached objects.
func (c *Cache) reindexLocked() {
	for _, x := range c.indexes {
		clear(x.by)
		for _, o := range c.objects {
			x.add(o)
		}
	}
}

// IndexLen is how many cached objects index name holds under value.
func (c *Cache) IndexLen(index, value string) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.mustIndexLocked(index).by[value])
}

// IndexValues returns the values under which index name holds objects,
// in no order.
func (c *Cache) IndexValues(index string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	x := c.mustIndexLocked(index)
	out := make([]string, 0, len(x.by))
	for v := range x.by {
		out = append(out, v)
	}
	return out
}

func (c *Cache) mustIndexLocked(index string) *cacheIndex {
	x, ok := c.indexes[index]
	if !ok {
		panic("reconcile: no index " + index + " of " + c.kind)
	}
	return x
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

// RangeIn is Range over the objects index name holds under value.
func (c *Cache) RangeIn(index, value string, fn func(api.Object) bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for name := range c.mustIndexLocked(index).by[value] {
		if !fn(c.objects[name]) {
			return
		}
	}
}

// RangeSettled is Range over the objects that are not Pending: those the
// caller has no write of in flight. It returns how many it left out, so
// that a caller that found nothing to do among the rest can look again
// soon (the watch event that settles one asks for it too).
func (c *Cache) RangeSettled(fn func(api.Object) bool) (pending int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	now := c.now()
	for name, o := range c.objects {
		if e, ok := c.expect[name]; ok && now.Sub(e.at) < ExpectationTTL {
			pending++
			continue
		}
		if !fn(o) {
			return pending
		}
	}
	return pending
}

// RangeSettledIn is RangeSettled over the objects index name holds under
// value.
func (c *Cache) RangeSettledIn(index, value string, fn func(api.Object) bool) (pending int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	now := c.now()
	for name := range c.mustIndexLocked(index).by[value] {
		if e, ok := c.expect[name]; ok && now.Sub(e.at) < ExpectationTTL {
			pending++
			continue
		}
		if !fn(c.objects[name]) {
			return pending
		}
	}
	return pending
}

// RangeLatest is Range with the caller's own writes the watch has not
// brought yet in place of the cached versions (and its creations among
// them, its deletions left out): for a controller that counts what it has
// already decided, as placement counts the sandboxes it put on a node.
// fn must not call the cache.
func (c *Cache) RangeLatest(fn func(api.Object) bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	now := c.now()
	live := func(e expectation) bool { return now.Sub(e.at) < ExpectationTTL }
	for name, o := range c.objects {
		if e, ok := c.expect[name]; ok && live(e) {
			if e.gone {
				continue
			}
			o = e.obj
		}
		if !fn(o) {
			return
		}
	}
	for name, e := range c.expect {
		if _, cached := c.objects[name]; cached || e.gone || !live(e) {
			continue
		}
		if !fn(e.obj) {
			return
		}
	}
}

// RangeLatestIn is RangeLatest over the objects index name holds under
// value, each as its latest version has it (a write in flight that moves
// an object into value, or out of it, counts). fn must not call the
// cache.
func (c *Cache) RangeLatestIn(index, value string, fn func(api.Object) bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	x := c.mustIndexLocked(index)
	now := c.now()
	live := func(e expectation) bool { return now.Sub(e.at) < ExpectationTTL }
	in := x.by[value]
	for name := range in {
		o := c.objects[name]
		if e, ok := c.expect[name]; ok && live(e) {
			if e.gone || !slices.Contains(x.fn(e.obj), value) {
				continue
			}
			o = e.obj
		}
		if !fn(o) {
			return
		}
	}
	// Writes in flight are few: those that bring an object into value.
	for name, e := range c.expect {
		if _, ok := in[name]; ok || e.gone || !live(e) || !slices.Contains(x.fn(e.obj), value) {
			continue
		}
		if !fn(e.obj) {
			return
		}
	}
}

// CountLatestIn is how many objects index name holds under each of
// values, each object as its latest version has it (as RangeLatestIn
// sees them), without going over them: a cached count, corrected by the
// caller's writes in flight.
func (c *Cache) CountLatestIn(index string, values []string) []int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	x := c.mustIndexLocked(index)
	out := make([]int, len(values))
	at := make(map[string]int, len(values))
	for i, v := range values {
		out[i] = len(x.by[v])
		at[v] = i
	}
	now := c.now()
	for name, e := range c.expect {
		if now.Sub(e.at) >= ExpectationTTL {
			continue
		}
		var was, is []string
		if o, ok := c.objects[name]; ok {
			was = x.fn(o)
		}
		if !e.gone {
			is = x.fn(e.obj)
		}
		for _, v := range was {
			if i, ok := at[v]; ok && !slices.Contains(is, v) {
				out[i]--
			}
		}
		for _, v := range is {
			if i, ok := at[v]; ok && !slices.Contains(was, v) {
				out[i]++
			}
		}
	}
	return out
}

// Len is the number of cached objects.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.objects)
}

// Expect records that the caller wrote o (created or updated it, as the
// store returned it): o's name is Pending until the watch brings this
// version, a deletion of the object, or a list taken after the write.
func (c *Cache) Expect(o api.Object) {
	m := o.GetMeta()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[seenKey{m.Name, m.ResourceVersion}]; ok {
		return // the watch was faster than the caller
	}
	c.expect[m.Name] = expectation{obj: o, rv: m.ResourceVersion, at: c.now()}
}

// ExpectDeleted records that the caller deleted o: its name is Pending
// until the watch brings the deletion, or a list lacks it.
func (c *Cache) ExpectDeleted(o api.Object) {
	name := o.GetMeta().Name
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.objects[name]; !ok {
		return
	}
	c.expect[name] = expectation{obj: o, gone: true, at: c.now()}
}

// Pending reports whether a write of name that the caller expects has not
// reached the cache yet: the cached object (or its absence) is older than
// the caller's own write.
func (c *Cache) Pending(name string) bool {
	c.mu.RLock()
	e, ok := c.expect[name]
	c.mu.RUnlock()
	return ok && c.now().Sub(e.at) < ExpectationTTL
}

// Awaiting reports whether any write still Pending is of an object for
// which match is true (as written, or as last known for a deletion): a
// pool asks whether a member it created or deleted is still in flight.
func (c *Cache) Awaiting(match func(api.Object) bool) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	now := c.now()
	for _, e := range c.expect {
		if now.Sub(e.at) < ExpectationTTL && match(e.obj) {
			return true
		}
	}
	return false
}

// apply records an event of the cache's watch, which brings every change
// in order, and meets the expectation it answers.
func (c *Cache) apply(typ string, o api.Object) {
	m := o.GetMeta()
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.objects[m.Name]; ok {
		for _, x := range c.indexes {
			x.remove(old)
		}
	}
	if typ == store.Deleted {
		delete(c.objects, m.Name)
		delete(c.expect, m.Name) // whatever was written, the object is gone
	} else {
		c.objects[m.Name] = o
		for _, x := range c.indexes {
			x.add(o)
		}
		if e, ok := c.expect[m.Name]; ok && !e.gone && e.rv == m.ResourceVersion {
			delete(c.expect, m.Name)
		}
	}
	c.rememberLocked(seenKey{m.Name, m.ResourceVersion})
	c.expireLocked()
}

func (c *Cache) rememberLocked(k seenKey) {
	if old := c.ring[c.next]; old != (seenKey{}) {
		delete(c.seen, old)
	}
	c.ring[c.next] = k
	c.seen[k] = struct{}{}
	c.next = (c.next + 1) % len(c.ring)
}

// expireLocked drops expectations past their TTL, so that a name once
// pending does not stay in the map for ever.
func (c *Cache) expireLocked() {
	if len(c.expect) == 0 {
		return
	}
	now := c.now()
	for name, e := range c.expect {
		if now.Sub(e.at) >= ExpectationTTL {
			delete(c.expect, name)
		}
	}
}

// relist replaces the cache with items, listed after since, when its watch
// could not resume, and returns the objects that were deleted in the gap:
// those it held that the list lacks, in their last known state
// (client-go's DeletedFinalStateUnknown), by name. The list holds every
// write made before it, so the expectations recorded before since are met.
func (c *Cache) relist(items []api.Object, since time.Time) (deleted []api.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := make(map[string]api.Object, len(items))
	for _, o := range items {
		fresh[o.GetMeta().Name] = o
	}
	for name, old := range c.objects {
		if _, ok := fresh[name]; !ok {
			deleted = append(deleted, old)
		}
	}
	c.objects = fresh
	c.listed = true
	c.reindexLocked()
	for name, e := range c.expect {
		if e.at.Before(since) {
			delete(c.expect, name)
		}
	}
	sort.Slice(deleted, func(i, j int) bool { return deleted[i].GetMeta().Name < deleted[j].GetMeta().Name })
	return deleted
}

// reset replaces the cache with a fresh list, as a test fills it; every
// expectation is met.
func (c *Cache) reset(items []api.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.objects = make(map[string]api.Object, len(items))
	for _, o := range items {
		c.objects[o.GetMeta().Name] = o
	}
	c.reindexLocked()
	clear(c.expect)
	c.listed = true
}

// Latest is getLatest for a caller outside the package: the object is
// shared, never to be changed.
func (c *Cache) Latest(name string) (api.Object, bool) { return c.getLatest(name) }

// getLatest returns the object named name as the caller last wrote it
// while the watch has not brought that write back, else as cached. A
// deletion in flight is not found here (the caller asks the store).
func (c *Cache) getLatest(name string) (api.Object, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e, ok := c.expect[name]; ok && c.now().Sub(e.at) < ExpectationTTL {
		if e.gone {
			return nil, false
		}
		return e.obj, true
	}
	o, ok := c.objects[name]
	return o, ok
}

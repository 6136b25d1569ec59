package reconcile

import (
	"slices"
	"strconv"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

func sandboxAt(name string, rv int64) *api.Sandbox {
	return &api.Sandbox{TypeMeta: api.TypeMeta{Kind: api.KindSandbox}, Metadata: api.ObjectMeta{Name: name, ResourceVersion: strconv.FormatInt(rv, 10)}}
}

func cachedNames(c *Cache) []string {
	var out []string
	for _, o := range c.List(api.Selector{}) {
		out = append(out, o.GetMeta().Name+"@"+o.GetMeta().ResourceVersion)
	}
	return out
}

// TestCacheTombstones: once the cache knows an object was deleted, an
// older version of it, from a late event or a controller's own earlier
// write, does not bring it back; a newer one (the name created again)
// does.
func TestCacheTombstones(t *testing.T) {
	tests := []struct {
		name string
		do   func(c *Cache)
		want []string
	}{{
		name: "a write observed after the watch brought the deletion",
		do: func(c *Cache) {
			c.apply(store.Deleted, sandboxAt("x", 7))
			c.Observe(sandboxAt("x", 6))
		},
		want: []string{"y@3"},
	}, {
		name: "a late event after the caller deleted and forgot",
		do: func(c *Cache) {
			c.Observe(sandboxAt("x", 9)) // the caller's write, ahead of the watch
			c.Forget("x")                // then its delete
			c.apply(store.Modified, sandboxAt("x", 8))
			c.apply(store.Modified, sandboxAt("x", 9))
		},
		want: []string{"y@3"},
	}, {
		name: "created again",
		do: func(c *Cache) {
			c.Observe(sandboxAt("x", 9))
			c.Forget("x")
			c.apply(store.Deleted, sandboxAt("x", 10))
			c.apply(store.Added, sandboxAt("x", 11))
			c.Observe(sandboxAt("x", 10))
		},
		want: []string{"x@11", "y@3"},
	}, {
		name: "an object the caller created",
		do: func(c *Cache) {
			c.Observe(sandboxAt("z", 12)) // created by the caller, after everything the watch brought
		},
		want: []string{"x@5", "y@3", "z@12"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(api.KindSandbox)
			c.reset([]api.Object{sandboxAt("x", 5), sandboxAt("y", 3)})
			tt.do(c)
			if got := cachedNames(c); !slices.Equal(got, tt.want) {
				t.Errorf("cache holds %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCacheRelist: a relist returns what the cache held that the list
// lacks, in its last known state, keeps a version written after the list,
// and takes the listed versions.
func TestCacheRelist(t *testing.T) {
	c := newCache(api.KindSandbox)
	c.reset([]api.Object{sandboxAt("gone", 4), sandboxAt("kept", 5), sandboxAt("changed", 6)})
	c.Observe(sandboxAt("mine", 21)) // created by the caller after the list below
	deleted := c.relist([]api.Object{sandboxAt("kept", 5), sandboxAt("changed", 15), sandboxAt("new", 16)}, 20)
	var names []string
	for _, o := range deleted {
		names = append(names, o.GetMeta().Name+"@"+o.GetMeta().ResourceVersion)
	}
	if want := []string{"gone@4"}; !slices.Equal(names, want) {
		t.Errorf("relist deleted %v, want %v", names, want)
	}
	if got, want := cachedNames(c), []string{"changed@15", "kept@5", "mine@21", "new@16"}; !slices.Equal(got, want) {
		t.Errorf("cache holds %v, want %v", got, want)
	}
	c.Observe(sandboxAt("gone", 4))
	if _, ok := c.Get("gone"); ok {
		t.Error("a version from before the list brought back an object the list lacks")
	}
}

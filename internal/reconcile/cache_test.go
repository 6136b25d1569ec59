package reconcile

import (
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

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

// TestCacheExpectations: a write the caller made keeps its object Pending
// until the watch brings that very version, a deletion, or a list taken
// after it; the cache itself holds only what the watch brought.
func TestCacheExpectations(t *testing.T) {
	t1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		do          func(c *Cache, now *time.Time)
		wantPending bool
		want        []string
	}{{
		name:        "a write the watch has not brought",
		do:          func(c *Cache, _ *time.Time) { c.Expect(sandboxAt("x", 9)) },
		wantPending: true,
		want:        []string{"x@5", "y@3"},
	}, {
		name: "an older version arrives first",
		do: func(c *Cache, _ *time.Time) {
			c.Expect(sandboxAt("x", 9))
			c.apply(store.Modified, sandboxAt("x", 8))
		},
		wantPending: true,
		want:        []string{"x@8", "y@3"},
	}, {
		name: "the watch brings the write",
		do: func(c *Cache, _ *time.Time) {
			c.Expect(sandboxAt("x", 9))
			c.apply(store.Modified, sandboxAt("x", 9))
		},
		want: []string{"x@9", "y@3"},
	}, {
		name: "the watch was faster than the caller",
		do: func(c *Cache, _ *time.Time) {
			c.apply(store.Modified, sandboxAt("x", 9))
			c.apply(store.Modified, sandboxAt("x", 10)) // and someone wrote after
			c.Expect(sandboxAt("x", 9))
		},
		want: []string{"x@10", "y@3"},
	}, {
		name: "a deletion in flight",
		do: func(c *Cache, _ *time.Time) {
			c.ExpectDeleted(sandboxAt("x", 5))
		},
		wantPending: true,
		want:        []string{"x@5", "y@3"},
	}, {
		name: "the deletion arrives",
		do: func(c *Cache, _ *time.Time) {
			c.ExpectDeleted(sandboxAt("x", 5))
			c.apply(store.Deleted, sandboxAt("x", 6))
		},
		want: []string{"y@3"},
	}, {
		name: "a write overtaken by someone's deletion",
		do: func(c *Cache, _ *time.Time) {
			c.Expect(sandboxAt("x", 9))
			c.apply(store.Deleted, sandboxAt("x", 10))
		},
		want: []string{"y@3"},
	}, {
		name: "a created object",
		do: func(c *Cache, _ *time.Time) {
			c.Expect(sandboxAt("x", 12))
			c.apply(store.Added, sandboxAt("z", 11))
		},
		wantPending: true,
		want:        []string{"x@5", "y@3", "z@11"},
	}, {
		name: "a watch that never brings it",
		do: func(c *Cache, now *time.Time) {
			c.Expect(sandboxAt("x", 9))
			*now = now.Add(ExpectationTTL)
		},
		want: []string{"x@5", "y@3"},
	}, {
		name: "a list taken after the write",
		do: func(c *Cache, now *time.Time) {
			c.Expect(sandboxAt("x", 9))
			*now = now.Add(time.Millisecond)
			c.relist([]api.Object{sandboxAt("x", 9), sandboxAt("y", 3)}, *now)
		},
		want: []string{"x@9", "y@3"},
	}, {
		name: "a list begun before the write",
		do: func(c *Cache, now *time.Time) {
			since := *now
			*now = now.Add(time.Millisecond)
			c.Expect(sandboxAt("x", 9))
			c.relist([]api.Object{sandboxAt("x", 5), sandboxAt("y", 3)}, since)
		},
		wantPending: true,
		want:        []string{"x@5", "y@3"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t1
			c := newCache(api.KindSandbox)
			c.now = func() time.Time { return now }
			c.reset([]api.Object{sandboxAt("x", 5), sandboxAt("y", 3)})
			tt.do(c, &now)
			if got := c.Pending("x"); got != tt.wantPending {
				t.Errorf("Pending(x) = %v, want %v", got, tt.wantPending)
			}
			if got := cachedNames(c); !slices.Equal(got, tt.want) {
				t.Errorf("cache holds %v, want %v", got, tt.want)
			}
			if c.Pending("y") {
				t.Error("y is pending; nothing wrote it")
			}
		})
	}
}

// TestCacheAwaiting: a pool asks whether any of its members is in flight,
// a creation the cache has not seen among them.
func TestCacheAwaiting(t *testing.T) {
	c := newCache(api.KindSandbox)
	owned := func(pool string) func(api.Object) bool {
		return func(o api.Object) bool { return api.OwnerOf(o, api.KindSandboxPool) == pool }
	}
	sb := sandboxAt("web-1", 4)
	sb.Metadata.OwnerReferences = []api.OwnerReference{{Kind: api.KindSandboxPool, Name: "web"}}
	c.Expect(sb)
	if !c.Awaiting(owned("web")) || c.Awaiting(owned("other")) {
		t.Fatalf("Awaiting(web)=%v Awaiting(other)=%v, want true and false", c.Awaiting(owned("web")), c.Awaiting(owned("other")))
	}
	c.apply(store.Added, sb)
	if c.Awaiting(owned("web")) {
		t.Error("still awaiting web after the watch brought its member")
	}
}

// TestCacheRelist: a relist returns what the cache held that the list
// lacks, in its last known state, and takes the listed versions.
func TestCacheRelist(t *testing.T) {
	c := newCache(api.KindSandbox)
	c.reset([]api.Object{sandboxAt("gone", 4), sandboxAt("kept", 5), sandboxAt("changed", 6)})
	deleted := c.relist([]api.Object{sandboxAt("kept", 5), sandboxAt("changed", 15), sandboxAt("new", 16)}, time.Now())
	var names []string
	for _, o := range deleted {
		names = append(names, o.GetMeta().Name+"@"+o.GetMeta().ResourceVersion)
	}
	if want := []string{"gone@4"}; !slices.Equal(names, want) {
		t.Errorf("relist deleted %v, want %v", names, want)
	}
	if got, want := cachedNames(c), []string{"changed@15", "kept@5", "new@16"}; !slices.Equal(got, want) {
		t.Errorf("cache holds %v, want %v", got, want)
	}
}

// TestCacheRangeLatest: the caller's own writes stand in for the cached
// versions, its creations are there and its deletions are not.
func TestCacheRangeLatest(t *testing.T) {
	c := newCache(api.KindSandbox)
	c.reset([]api.Object{sandboxAt("x", 5), sandboxAt("y", 3), sandboxAt("gone", 2)})
	c.Expect(sandboxAt("x", 9))
	c.Expect(sandboxAt("new", 10))
	c.ExpectDeleted(sandboxAt("gone", 2))
	var got []string
	c.RangeLatest(func(o api.Object) bool {
		got = append(got, o.GetMeta().Name+"@"+o.GetMeta().ResourceVersion)
		return true
	})
	slices.Sort(got)
	if want := []string{"new@10", "x@9", "y@3"}; !slices.Equal(got, want) {
		t.Errorf("RangeLatest saw %v, want %v", got, want)
	}
}

// TestCacheRangeLatestIn: RangeLatest by an index, each object as its
// latest version has it: a write in flight moves an object into a value
// or out of it, a creation in flight is in its value, a deletion is not;
// and CountLatestIn counts the same.
func TestCacheRangeLatestIn(t *testing.T) {
	at := func(name string, rv int64, pool string) *api.Sandbox {
		sb := sandboxAt(name, rv)
		sb.Metadata.Labels = map[string]string{"pool": pool}
		return sb
	}
	c := newCache(api.KindSandbox)
	c.reset([]api.Object{at("x", 1, "a"), at("y", 1, "a"), at("z", 1, "b"), at("gone", 1, "a"), at("left", 1, "a")})
	c.AddIndex("pool", func(o api.Object) []string { return []string{o.GetMeta().Labels["pool"]} })
	c.Expect(at("x", 9, "a"))    // rewritten, stays
	c.Expect(at("z", 9, "a"))    // moved in
	c.Expect(at("left", 9, "b")) // moved out
	c.Expect(at("new", 10, "a")) // created
	c.Expect(at("other", 10, "b"))
	c.ExpectDeleted(at("gone", 1, "a"))
	var got []string
	c.RangeLatestIn("pool", "a", func(o api.Object) bool {
		got = append(got, o.GetMeta().Name+"@"+o.GetMeta().ResourceVersion)
		return true
	})
	slices.Sort(got)
	if want := []string{"new@10", "x@9", "y@1", "z@9"}; !slices.Equal(got, want) {
		t.Errorf("RangeLatestIn saw %v, want %v", got, want)
	}
	if got, want := c.CountLatestIn("pool", []string{"a", "b", "c"}), []int{4, 2, 0}; !slices.Equal(got, want) {
		t.Errorf("CountLatestIn gave %v, want %v", got, want)
	}
}

// TestCacheIndex: an index follows every change the watch brings, a list
// and a reset, and RangeSettledIn leaves out what the caller's own writes
// keep Pending, as RangeSettled does.
func TestCacheIndex(t *testing.T) {
	inPool := func(name string, rv int64, pool string) *api.Sandbox {
		sb := sandboxAt(name, rv)
		if pool != "" {
			sb.Metadata.Labels = map[string]string{"pool": pool}
		}
		return sb
	}
	tests := []struct {
		name string
		do   func(c *Cache)
		want map[string][]string // value → names RangeSettledIn gives
		// pending is how many RangeSettledIn(pool, "a") leaves out.
		pending int
	}{{
		name: "filled before the index was added",
		do:   func(c *Cache) {},
		want: map[string][]string{"a": {"x", "y"}, "b": {"z"}},
	}, {
		name: "an object moves to another value",
		do:   func(c *Cache) { c.apply(store.Modified, inPool("y", 7, "b")) },
		want: map[string][]string{"a": {"x"}, "b": {"y", "z"}},
	}, {
		name: "an object leaves every value",
		do:   func(c *Cache) { c.apply(store.Modified, inPool("z", 7, "")) },
		want: map[string][]string{"a": {"x", "y"}},
	}, {
		name: "a deletion",
		do:   func(c *Cache) { c.apply(store.Deleted, inPool("x", 7, "a")) },
		want: map[string][]string{"a": {"y"}, "b": {"z"}},
	}, {
		name: "a creation",
		do:   func(c *Cache) { c.apply(store.Added, inPool("w", 7, "c")) },
		want: map[string][]string{"a": {"x", "y"}, "b": {"z"}, "c": {"w"}},
	}, {
		name:    "a write of the caller in flight",
		do:      func(c *Cache) { c.Expect(inPool("x", 9, "a")) },
		want:    map[string][]string{"a": {"y"}, "b": {"z"}},
		pending: 1,
	}, {
		name: "a list after the watch could not resume",
		do: func(c *Cache) {
			c.relist([]api.Object{inPool("x", 9, "b"), inPool("v", 9, "a")}, time.Now())
		},
		want: map[string][]string{"a": {"v"}, "b": {"x"}},
	}, {
		name: "a reset",
		do:   func(c *Cache) { c.reset([]api.Object{inPool("u", 1, "d")}) },
		want: map[string][]string{"d": {"u"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(api.KindSandbox)
			c.reset([]api.Object{inPool("x", 1, "a"), inPool("y", 1, "a"), inPool("z", 1, "b")})
			c.AddIndex("pool", func(o api.Object) []string {
				if p := o.GetMeta().Labels["pool"]; p != "" {
					return []string{p}
				}
				return nil
			})
			c.AddIndex("pool", func(api.Object) []string { return []string{"other"} }) // kept: the first
			tt.do(c)
			got := map[string][]string{}
			pending := 0
			for _, v := range c.IndexValues("pool") {
				n := c.RangeSettledIn("pool", v, func(o api.Object) bool {
					got[v] = append(got[v], o.GetMeta().Name)
					return true
				})
				if v == "a" {
					pending = n
				}
				if n == 0 && c.IndexLen("pool", v) != len(got[v]) {
					t.Errorf("IndexLen(%s) = %d, want %d", v, c.IndexLen("pool", v), len(got[v]))
				}
				slices.Sort(got[v])
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("index holds %v, want %v", got, tt.want)
			}
			if pending != tt.pending {
				t.Errorf("RangeSettledIn left out %d, want %d", pending, tt.pending)
			}
		})
	}
}

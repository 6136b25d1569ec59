package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// callCounter is a store that counts the calls made of it, by operation
// and kind ("Get Sandbox", "UpdateStatus Agent"), so that a benchmark can
// say what a claim costs the store whichever store it is.
type callCounter struct {
	store.API
	mu sync.Mutex
	n  map[string]int64
}

// newCallCounter counts the calls of st; with st's grouped status writes
// (the scheduler's, on SQLite) passed through and counted each.
func newCallCounter(st store.API) store.API {
	c := &callCounter{API: st, n: map[string]int64{}}
	if gu, ok := st.(groupUpdater); ok {
		return &groupCallCounter{callCounter: c, gu: gu}
	}
	return c
}

type groupUpdater interface {
	UpdateStatusGroups(ctx context.Context, groups [][]api.Object) ([][]api.Object, []error, error)
}

type groupCallCounter struct {
	*callCounter
	gu groupUpdater
}

func (c *groupCallCounter) UpdateStatusGroups(ctx context.Context, groups [][]api.Object) ([][]api.Object, []error, error) {
	for _, g := range groups {
		for _, o := range g {
			c.count("UpdateStatus", o.GetTypeMeta().Kind)
		}
	}
	return c.gu.UpdateStatusGroups(ctx, groups)
}

func (c *callCounter) count(op, kind string) {
	key := op + " " + kind
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[key]++
}

func (c *callCounter) Get(ctx context.Context, kind, name string) (api.Object, error) {
	c.count("Get", kind)
	return c.API.Get(ctx, kind, name)
}

func (c *callCounter) List(ctx context.Context, kind string, sel api.Selector) ([]api.Object, string, error) {
	c.count("List", kind)
	return c.API.List(ctx, kind, sel)
}

func (c *callCounter) Create(ctx context.Context, o api.Object) (api.Object, error) {
	c.count("Create", o.GetTypeMeta().Kind)
	return c.API.Create(ctx, o)
}

func (c *callCounter) Update(ctx context.Context, o api.Object) (api.Object, bool, error) {
	c.count("Update", o.GetTypeMeta().Kind)
	return c.API.Update(ctx, o)
}

func (c *callCounter) UpdateStatus(ctx context.Context, o api.Object) (api.Object, error) {
	c.count("UpdateStatus", o.GetTypeMeta().Kind)
	return c.API.UpdateStatus(ctx, o)
}

func (c *callCounter) PatchStatus(ctx context.Context, kind, name, rv string, patch []byte) (api.Object, error) {
	c.count("PatchStatus", kind)
	return c.API.PatchStatus(ctx, kind, name, rv, patch)
}

func (c *callCounter) Delete(ctx context.Context, kind, name string, opts store.DeleteOptions) (api.Object, bool, error) {
	c.count("Delete", kind)
	return c.API.Delete(ctx, kind, name, opts)
}

func (c *callCounter) RecordEvent(ctx context.Context, o api.Object, eventType, reason, message string) error {
	c.count("RecordEvent", o.GetTypeMeta().Kind)
	return c.API.RecordEvent(ctx, o, eventType, reason, message)
}

func (c *callCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int64{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func (c *callCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = map[string]int64{}
}

// perClaim says what calls cost per claim: reads (Get, List), object
// writes by kind, and events.
func perClaim(calls map[string]int64, claims int) string {
	var reads, writes, events int64
	byKind := map[string]int64{}
	for k, n := range calls {
		op, kind, _ := strings.Cut(k, " ")
		switch op {
		case "Get", "List":
			reads += n
		case "RecordEvent":
			events += n
		default:
			writes += n
			byKind[kind] += n
		}
	}
	per := func(n int64) string { return fmt.Sprintf("%.2f", float64(n)/float64(max(claims, 1))) }
	var kinds []string
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, k+" "+per(byKind[k]))
	}
	return fmt.Sprintf("%s reads, %s object writes (%s), %s events (queued, never waited for)", per(reads), per(writes), strings.Join(parts, ", "), per(events))
}

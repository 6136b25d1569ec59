package reconcile

import (
	"context"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// Expecting is a store whose writes are recorded in watch caches as they
// land: each object written is expected (Cache.Expect) in the cache Caches
// returns for its kind, each one deleted too (ExpectDeleted). A reader of
// those caches then takes its own writes as its view until the watch
// brings them (GetLatest), and needs no read of the store to see what it
// wrote: what others wrote the watch brings in order, and every write is
// conditioned on the resourceVersion read, so a view behind someone
// else's write costs a conflict and a retry, never a wrong write.
type Expecting struct {
	store.Interface
	// Caches returns the cache of a kind, or nil when none is kept.
	Caches func(kind string) *Cache
}

func (e Expecting) expect(o api.Object) {
	if o == nil {
		return
	}
	if c := e.Caches(o.GetTypeMeta().Kind); c != nil {
		c.Expect(o)
	}
}

// Create creates o and expects it.
func (e Expecting) Create(ctx context.Context, o api.Object) (api.Object, error) {
	out, err := e.Interface.Create(ctx, o)
	if err == nil {
		e.expect(out)
	}
	return out, err
}

// Update writes o and expects what was written.
func (e Expecting) Update(ctx context.Context, o api.Object) (api.Object, bool, error) {
	out, changed, err := e.Interface.Update(ctx, o)
	if err == nil && changed {
		e.expect(out)
	}
	return out, changed, err
}

// UpdateStatus writes o's status and expects what was written.
func (e Expecting) UpdateStatus(ctx context.Context, o api.Object) (api.Object, error) {
	out, err := e.Interface.UpdateStatus(ctx, o)
	if err == nil {
		e.expect(out)
	}
	return out, err
}

// PatchStatus patches kind/name's status and expects what was written.
func (e Expecting) PatchStatus(ctx context.Context, kind, name, rv string, patch []byte) (api.Object, error) {
	out, err := e.Interface.PatchStatus(ctx, kind, name, rv, patch)
	if err == nil {
		e.expect(out)
	}
	return out, err
}

// Delete deletes kind/name and expects its deletion, or the deletion
// timestamp written when finalizers hold it.
func (e Expecting) Delete(ctx context.Context, kind, name string, opts store.DeleteOptions) (api.Object, bool, error) {
	out, gone, err := e.Interface.Delete(ctx, kind, name, opts)
	if err == nil && out != nil {
		if c := e.Caches(kind); c != nil {
			if gone {
				c.ExpectDeleted(out)
			} else {
				c.Expect(out)
			}
		}
	}
	return out, gone, err
}

// GetLatest returns kind/name as the caller's newest knowledge of it
// has it: its own write that the watch has not brought back yet (see
// Expecting), else the watch's view, else (not cached, or a deletion in
// flight) the store. A write of someone else's that the watch has not
// brought is not in it: a write conditioned on what GetLatest returned
// then conflicts, and is made again on a fresh read.
func GetLatest(ctx context.Context, c *Cache, st store.Interface, kind, name string) (api.Object, error) {
	o, shared, err := PeekLatest(ctx, c, st, kind, name)
	if err == nil && shared {
		o = api.DeepCopy(o)
	}
	return o, err
}

// PeekLatest is GetLatest without the copy, for a caller that only
// looks: when shared, o is the cache's own object, never to be changed.
func PeekLatest(ctx context.Context, c *Cache, st store.Interface, kind, name string) (o api.Object, shared bool, err error) {
	if c != nil {
		if o, ok := c.getLatest(name); ok {
			return o, true, nil
		}
	}
	o, err = st.Get(ctx, kind, name)
	return o, false, err
}

package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// Event records an event, logging instead of failing: an audit entry that
// cannot be written must not stop a reconcile.
func Event(ctx context.Context, st store.Interface, log *slog.Logger, o api.Object, typ, reason, msg string) {
	if err := st.RecordEvent(ctx, o, typ, reason, msg); err != nil {
		log.Warn("record event", "kind", o.GetTypeMeta().Kind, "object", o.GetMeta().Name, "reason", reason, "err", err)
	}
}

// EnsureFinalizer adds f to o, returning the stored object.
func EnsureFinalizer(ctx context.Context, st store.Interface, o api.Object, f string) (api.Object, error) {
	if slices.Contains(o.GetMeta().Finalizers, f) {
		return o, nil
	}
	return EditMeta(ctx, st, o, func(meta *api.ObjectMeta) {
		if !slices.Contains(meta.Finalizers, f) {
			meta.Finalizers = append(meta.Finalizers, f)
		}
	})
}

// RemoveFinalizer removes f; the store deletes an object whose deletion was
// asked for once its last finalizer is gone. A missing object is fine.
func RemoveFinalizer(ctx context.Context, st store.Interface, o api.Object, f string) error {
	_, err := EditMeta(ctx, st, o, func(meta *api.ObjectMeta) {
		meta.Finalizers = slices.DeleteFunc(meta.Finalizers, func(s string) bool { return s == f })
	})
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	return err
}

// maxConflicts bounds the retries of a read-modify-write that others keep
// winning.
const maxConflicts = 20

// EditMeta applies edit to the stored object's metadata with optimistic
// concurrency, re-reading and retrying when someone else wrote first (a
// user's label change must not be overwritten).
func EditMeta(ctx context.Context, st store.Interface, o api.Object, edit func(*api.ObjectMeta)) (api.Object, error) {
	kind, name := o.GetTypeMeta().Kind, o.GetMeta().Name
	for attempt := 0; ; attempt++ {
		c := api.DeepCopy(o)
		edit(c.GetMeta())
		out, _, err := st.Update(ctx, c)
		if !errors.Is(err, api.ErrConflict) || attempt >= maxConflicts {
			return out, err
		}
		if o, err = st.Get(ctx, kind, name); err != nil {
			return nil, err
		}
	}
}

// UpdateStatus reads the object kind/name, lets change edit it, and writes
// its status conditioned on the resourceVersion it read, again from a fresh
// read when another writer came first. change returns false to write
// nothing. It returns the stored object (the one read when nothing was
// written); a missing object is api.ErrNotFound.
func UpdateStatus[T api.Object](ctx context.Context, st store.Interface, kind, name string, change func(T) bool) (T, error) {
	var zero T
	return updateStatus(ctx, st, kind, name, zero, false, change)
}

// UpdateStatusFrom is UpdateStatus starting from base, an object the
// caller already read (from a watch cache, say), instead of reading it
// again: if base is stale its write loses to the newer one and the change
// is made again on a fresh read. change gets a copy of base; when it
// returns false, base itself is returned.
func UpdateStatusFrom[T api.Object](ctx context.Context, st store.Interface, kind string, base T, change func(T) bool) (T, error) {
	return updateStatus(ctx, st, kind, base.GetMeta().Name, base, true, change)
}

// EditStatus is UpdateStatus with an edit that may refuse the change:
// its error ends the update, nothing is written, and it is returned.
func EditStatus[T api.Object](ctx context.Context, st store.Interface, kind, name string, edit func(T) (bool, error)) (T, error) {
	var zero T
	return editStatus(ctx, st, kind, name, zero, false, edit)
}

// EditStatusFrom is EditStatus starting from base, as UpdateStatusFrom.
func EditStatusFrom[T api.Object](ctx context.Context, st store.Interface, kind string, base T, edit func(T) (bool, error)) (T, error) {
	return editStatus(ctx, st, kind, base.GetMeta().Name, base, true, edit)
}

func editStatus[T api.Object](ctx context.Context, st store.Interface, kind, name string, base T, haveBase bool, edit func(T) (bool, error)) (T, error) {
	var refused error
	out, err := updateStatus(ctx, st, kind, name, base, haveBase, func(o T) bool {
		var changed bool
		changed, refused = edit(o)
		return changed && refused == nil
	})
	if err == nil {
		err = refused
	}
	return out, err
}

func updateStatus[T api.Object](ctx context.Context, st store.Interface, kind, name string, base T, haveBase bool, change func(T) bool) (T, error) {
	var zero T
	for attempt := 0; ; attempt++ {
		var cur T
		if attempt == 0 && haveBase {
			cur = api.DeepCopy(base)
		} else {
			o, err := st.Get(ctx, kind, name)
			if err != nil {
				return zero, err
			}
			var ok bool
			if cur, ok = o.(T); !ok {
				return zero, fmt.Errorf("update status of %s %s: stored object is %T", kind, name, o)
			}
		}
		if !change(cur) {
			if attempt == 0 && haveBase {
				return base, nil
			}
			return cur, nil
		}
		out, err := st.UpdateStatus(ctx, cur)
		if err == nil {
			return out.(T), nil
		}
		if !errors.Is(err, api.ErrConflict) || attempt >= maxConflicts {
			return zero, err
		}
	}
}

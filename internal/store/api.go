package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
)

// API is what the API server uses of a store: Interface, plus lists a page
// at a time without decoding, the audit log, and a health check. *Store
// implements it, and so does the Kubernetes store.
type API interface {
	Interface
	// ListRaw returns a page of a kind's objects as stored JSON, the
	// resourceVersion the page was read at, and the continue token of
	// the next page ("" on the last).
	ListRaw(ctx context.Context, kind string, pg Page) (items []json.RawMessage, rv string, next string, err error)
	// ListEvents returns recorded events, oldest first.
	ListEvents(ctx context.Context, f EventFilter) ([]*api.Event, error)
	// Ping checks that the store answers.
	Ping(ctx context.Context) error
}

var _ API = (*Store)(nil)

// ApplyResult says what Apply did.
type ApplyResult string

// Apply results, as kubectl prints them.
const (
	Created    ApplyResult = "created"
	Configured ApplyResult = "configured"
	Unchanged  ApplyResult = "unchanged"
)

// applyTries bounds Apply's retries when another writer gets in between
// its read and its write.
const applyTries = 5

// Apply creates o or, if it exists, updates it (create-or-update, as PUT
// does), on any store. The resourceVersion precondition o carries applies
// to the update; without one, a write that lost a race is tried again on
// the newer object. Finalizers and owner references that o leaves unset are
// kept: a user's apply of a manifest must not take away what the
// controllers added.
func Apply(ctx context.Context, st Interface, o api.Object) (api.Object, ApplyResult, error) {
	kind, name := o.GetTypeMeta().Kind, o.GetMeta().Name
	pinned := o.GetMeta().ResourceVersion != ""
	var err error
	for range applyTries {
		var cur, out api.Object
		cur, err = st.Get(ctx, kind, name)
		switch {
		case err == nil:
			next := api.DeepCopy(o)
			m := next.GetMeta()
			if m.Finalizers == nil {
				m.Finalizers = cur.GetMeta().Finalizers
			}
			if m.OwnerReferences == nil {
				m.OwnerReferences = cur.GetMeta().OwnerReferences
			}
			if !pinned {
				m.ResourceVersion = cur.GetMeta().ResourceVersion
			}
			var changed bool
			out, changed, err = st.Update(ctx, next)
			if err == nil {
				if !changed {
					return out, Unchanged, nil
				}
				// The audit log is best effort: the write has landed.
				_ = st.RecordEvent(ctx, out, api.EventNormal, "Configured", fmt.Sprintf("%s %s configured", kind, name))
				return out, Configured, nil
			}
		case errors.Is(err, api.ErrNotFound):
			if pinned {
				return nil, "", fmt.Errorf("%s %q does not exist but a resourceVersion was given: %w", strings.ToLower(kind), name, api.ErrConflict)
			}
			out, err = st.Create(ctx, o)
			if err == nil {
				return out, Created, nil
			}
		}
		retry := !pinned && (errors.Is(err, api.ErrConflict) || errors.Is(err, api.ErrAlreadyExists) || errors.Is(err, api.ErrNotFound))
		if !retry {
			return nil, "", err
		}
	}
	return nil, "", err
}

// Merge is what an Update of cur with o writes, the same in every store:
// o's labels, annotations, finalizers and owner references, and o's spec
// when it differs (checked by api.ValidateUpdate; the store counts the
// generation). changed is false when nothing would change: then nothing
// is written. A resourceVersion o carries must be cur's (ErrConflict).
func Merge(cur, o api.Object) (next api.Object, specChanged, changed bool, err error) {
	m := o.GetMeta()
	if err := checkPrecondition(cur, m.ResourceVersion); err != nil {
		return nil, false, false, err
	}
	next = api.DeepCopy(cur)
	nm := next.GetMeta()
	nm.Labels, nm.Annotations = m.Labels, m.Annotations
	nm.Finalizers, nm.OwnerReferences = m.Finalizers, m.OwnerReferences
	specChanged = !jsonEqual(cur.GetSpec(), o.GetSpec())
	if specChanged {
		if err := api.ValidateUpdate(cur, o); err != nil {
			return nil, false, false, err
		}
		api.CopySpec(next, o)
	}
	return next, specChanged, specChanged || !jsonEqual(cur.GetMeta(), nm), nil
}

// RecordsCreated reports whether the creation of o is recorded as an
// event (reason Created) on it. A pool's member's is not: the pool's
// ScaledUp event counts its members as it creates them, and an event per
// member was a write per member, a quarter of a fill's requests on
// Kubernetes.
func RecordsCreated(o api.Object) bool {
	return api.OwnerOf(o, api.KindSandboxPool) == ""
}

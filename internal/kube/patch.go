package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hvkube/hvkube/internal/api"
)

// Writes are JSON merge patches from the object as this store read it to
// the object as the caller wants it, conditioned on the version read: they
// name only the fields that change, so fields this binary does not know
// (written by a newer hvkube, whose CRDs have them) are left as they are,
// where a whole object PUT rebuilt from this binary's types would erase
// them. A list is one value in a merge patch: a changed list is written
// whole, as hvkube's types have it.

// bases remembers each object's status as this store last read or wrote
// it, so that a status write conditioned on that version needs no read to
// know what it changes.
type bases struct {
	mu sync.Mutex
	m  map[string]statusBase // by kind/name
}

type statusBase struct {
	rv     string
	status []byte
}

// maxBases bounds the statuses remembered; past it, some are forgotten
// (a write then reads its object first).
const maxBases = 1 << 16

func baseKey(kind, name string) string { return kind + "/" + name }

func (b *bases) put(o api.Object) {
	st := o.GetStatus()
	if st == nil {
		return
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return
	}
	m := o.GetMeta()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]statusBase{}
	}
	if len(b.m) >= maxBases {
		n := 0
		for k := range b.m {
			delete(b.m, k)
			if n++; n >= maxBases/8 {
				break
			}
		}
	}
	b.m[baseKey(o.GetTypeMeta().Kind, m.Name)] = statusBase{rv: m.ResourceVersion, status: raw}
}

func (b *bases) get(kind, name, rv string) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sb, ok := b.m[baseKey(kind, name)]
	if !ok || sb.rv != rv {
		return nil, false
	}
	return sb.status, true
}

func (b *bases) forget(kind, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, baseKey(kind, name))
}

// decode is fromKube, remembering the status read.
func (s *Store) decode(u *unstructured.Unstructured) (api.Object, error) {
	o, err := fromKube(u)
	if err == nil {
		s.bases.put(o)
	}
	return o, err
}

// withVersion adds the resourceVersion precondition rv to the merge patch
// p (a JSON object), under metadata.
func withVersion(p []byte, rv string) ([]byte, error) {
	m := map[string]any{}
	if err := json.Unmarshal(p, &m); err != nil {
		return nil, err
	}
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		m["metadata"] = meta
	}
	meta["resourceVersion"] = rv
	return json.Marshal(m)
}

// specPatch is the merge patch from cur to next outside status, at cur's
// version.
func (s *Store) specPatch(cur, next api.Object) ([]byte, error) {
	a, err := s.toKube(cur)
	if err != nil {
		return nil, err
	}
	b, err := s.toKube(next)
	if err != nil {
		return nil, err
	}
	delete(a.Object, "status")
	delete(b.Object, "status")
	ja, err := json.Marshal(a.Object)
	if err != nil {
		return nil, err
	}
	jb, err := json.Marshal(b.Object)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.CreateMergePatch(ja, jb)
	if err != nil {
		return nil, fmt.Errorf("merge patch of %s %s: %w", cur.GetTypeMeta().Kind, cur.GetMeta().Name, err)
	}
	return withVersion(p, cur.GetMeta().ResourceVersion)
}

// statusPatch is the merge patch from the status base (as read at rv) to
// o's status, at rv.
func statusPatch(base []byte, o api.Object, rv string) ([]byte, error) {
	want, err := json.Marshal(o.GetStatus())
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.CreateMergePatch(base, want)
	if err != nil {
		return nil, fmt.Errorf("merge patch of %s %s's status: %w", o.GetTypeMeta().Kind, o.GetMeta().Name, err)
	}
	return withVersion([]byte(`{"status":`+string(p)+`}`), rv)
}

// readBase reads the object's current status and version.
func (s *Store) readBase(ctx context.Context, kind, name string) ([]byte, string, error) {
	cur, err := s.Get(ctx, kind, name)
	if err != nil {
		return nil, "", err
	}
	b, err := json.Marshal(cur.GetStatus())
	return b, cur.GetMeta().ResourceVersion, err
}

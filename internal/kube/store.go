// Package kube is hvkube's store on a Kubernetes API server: every kind a
// custom resource of group hvkube.io (deploy/crds), in one namespace, read
// and written with client-go; events as Kubernetes Events. It implements
// store.API, so the controllers, the node and the API server run on it as
// they do on SQLite, and storetest checks it the same way.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/crd"
	"github.com/hvkube/hvkube/internal/store"
)

// Options configure Open.
type Options struct {
	// Config reaches the API server (from a kubeconfig, or in-cluster).
	Config *rest.Config
	// Namespace holds this install's objects; it must exist.
	Namespace string
	// Component names the writer of events (their source) and of the
	// objects' fields (the field manager of its writes).
	Component string
	// Host is the node whose events these are (their source.host), for
	// a node agent's store: the admission policy lets a node write only
	// events that name it.
	Host string
	// NodeScope, when set, narrows every list and watch of sandboxes and
	// agents to those whose status.node names it (a field selector on
	// the CRDs' selectable field), as a kubelet watches only its own
	// pods: a node agent's store, which then hears nothing of the rest
	// of the fleet. Reads of one object by name are not narrowed.
	NodeScope string
	// Logger; slog.Default when nil.
	Logger *slog.Logger
	// Now is the clock of event timestamps; time.Now when nil.
	Now func() time.Time
}

// klogOnce sets client-go's logger (Open).
var klogOnce sync.Once

// Store is the Kubernetes store. It is safe for concurrent use.
type Store struct {
	dyn  dynamic.Interface
	core kubernetes.Interface
	ns   string
	log  *slog.Logger
	now  func() time.Time
	ev   *events
	// bases are the statuses last read or written (patch.go).
	bases bases
	// manager is the field manager of this store's writes.
	manager string
	// reviews are the nodes' identities reviewed lately (review.go).
	reviews *tokenReviews
	// nodeScope narrows lists and watches (Options.NodeScope).
	nodeScope string
}

var _ store.API = (*Store)(nil)

// Open connects to the API server and checks that the CRDs are installed
// and the namespace exists.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Config == nil {
		return nil, errors.New("kube: no API server configuration")
	}
	if opts.Namespace == "" {
		return nil, errors.New("kube: no namespace")
	}
	cfg := rest.CopyConfig(opts.Config)
	if cfg.QPS == 0 {
		// Controllers write in bursts (a pool fills, a round of claims);
		// the API server's own flow control is the limit that matters.
		cfg.QPS, cfg.Burst = 500, 1000
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "hvkube"
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	s := &Store{dyn: dyn, core: core, ns: opts.Namespace, log: opts.Logger, now: opts.Now, nodeScope: opts.NodeScope}
	s.reviews = newTokenReviews(s.reviewNodeToken, s.now)
	if s.log == nil {
		s.log = slog.Default()
	}
	// client-go logs through klog: into the first store's log instead of
	// its own lines on stderr. klog's logger is the process's, and setting
	// it while clients log is a data race: once.
	klogOnce.Do(func() { klog.SetSlogLogger(s.log.With("from", "client-go")) })
	if s.now == nil {
		s.now = time.Now
	}
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	component := opts.Component
	if component == "" {
		component = "hvkube"
	}
	s.ev = newEvents(s, corev1.EventSource{Component: component, Host: opts.Host})
	s.manager = component
	return s, nil
}

// check says what is missing before anything is written: the CRDs, the
// namespace, or the right to use them.
func (s *Store) check(ctx context.Context) error {
	res, err := s.core.Discovery().ServerResourcesForGroupVersion(crd.Group + "/" + crd.Version)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("kube: the API server serves no %s/%s: install the CRDs first (hvkube crds | kubectl apply -f -)", crd.Group, crd.Version)
		}
		return fmt.Errorf("kube: reach the API server: %w", err)
	}
	have := map[string]bool{}
	for _, r := range res.APIResources {
		have[r.Name] = true
	}
	for _, k := range api.Kinds {
		if !have[k.Plural] {
			return fmt.Errorf("kube: the CRD %s.%s is not installed (hvkube crds | kubectl apply -f -)", k.Plural, crd.Group)
		}
	}
	if _, err := s.core.CoreV1().Namespaces().Get(ctx, s.ns, metav1.GetOptions{}); err != nil && !apierrors.IsForbidden(err) {
		return fmt.Errorf("kube: namespace %s: %w", s.ns, mapErr(err))
	}
	return nil
}

// Close stops the event writer after it has written what is queued.
func (s *Store) Close() error {
	s.ev.close()
	return nil
}

// Namespace is the namespace this store keeps its objects in.
func (s *Store) Namespace() string { return s.ns }

func (s *Store) res(kind string) (dynamic.ResourceInterface, error) {
	k, ok := api.LookupKind(kind)
	if !ok || kind == api.KindEvent {
		return nil, fmt.Errorf("kind %q: %w", kind, api.ErrInvalid)
	}
	return s.dyn.Resource(schema.GroupVersionResource{Group: crd.Group, Version: crd.Version, Resource: k.Plural}).Namespace(s.ns), nil
}

// Ping checks that the API server answers.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.core.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return mapErr(err)
}

// Get returns the stored object, or an error wrapping api.ErrNotFound.
func (s *Store) Get(ctx context.Context, kind, name string) (api.Object, error) {
	r, err := s.res(kind)
	if err != nil {
		return nil, err
	}
	u, err := r.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, mapErr(err)
	}
	return s.decode(u)
}

// fieldSelector narrows the lists and watches of kind to the node scope
// (Options.NodeScope), "" for none.
func (s *Store) fieldSelector(kind string) string {
	if s.nodeScope == "" || (kind != api.KindSandbox && kind != api.KindAgent) {
		return ""
	}
	return fields.OneTermEqualSelector("status.node", s.nodeScope).String()
}

// List returns the objects of kind whose labels match sel, by name, and the
// resourceVersion of the list.
func (s *Store) List(ctx context.Context, kind string, sel api.Selector) ([]api.Object, string, error) {
	r, err := s.res(kind)
	if err != nil {
		return nil, "", err
	}
	l, err := r.List(ctx, metav1.ListOptions{LabelSelector: sel.String(), FieldSelector: s.fieldSelector(kind)})
	if err != nil {
		return nil, "", mapErr(err)
	}
	out := make([]api.Object, 0, len(l.Items))
	for i := range l.Items {
		o, err := s.decode(&l.Items[i])
		if err != nil {
			return nil, "", err
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetMeta().Name < out[j].GetMeta().Name })
	return out, l.GetResourceVersion(), nil
}

// ListRaw is List a page at a time, as hvkube's JSON. The API server's
// own pages continue with tokens of its own; hvkube's continue after a
// name, so a page is cut from one list here.
func (s *Store) ListRaw(ctx context.Context, kind string, pg store.Page) ([]json.RawMessage, string, string, error) {
	items, rv, err := s.List(ctx, kind, pg.Selector)
	if err != nil {
		return nil, "", "", err
	}
	start := sort.Search(len(items), func(i int) bool { return items[i].GetMeta().Name > pg.After })
	items = items[start:]
	next := ""
	if pg.Limit > 0 && len(items) > pg.Limit {
		items = items[:pg.Limit]
		next = items[len(items)-1].GetMeta().Name
	}
	out := make([]json.RawMessage, len(items))
	for i, o := range items {
		b, err := json.Marshal(o)
		if err != nil {
			return nil, "", "", err
		}
		out[i] = b
	}
	return out, rv, next, nil
}

// Create stores a new object. Its status, if it has one, is written next
// (the API server ignores status on create), and a Created event recorded
// (store.RecordsCreated).
func (s *Store) Create(ctx context.Context, o api.Object) (api.Object, error) {
	r, err := s.res(o.GetTypeMeta().Kind)
	if err != nil {
		return nil, err
	}
	if err := api.ValidateName("metadata.name", o.GetMeta().Name); err != nil {
		return nil, err
	}
	u, err := s.toKube(o)
	if err != nil {
		return nil, err
	}
	unstructured.RemoveNestedField(u.Object, "metadata", "resourceVersion")
	created, err := r.Create(ctx, u, metav1.CreateOptions{FieldManager: s.manager})
	if err != nil {
		return nil, mapErr(err)
	}
	out, err := s.decode(created)
	if err != nil {
		return nil, err
	}
	if st := o.GetStatus(); st != nil && !isZero(st) {
		// The object exists whatever becomes of its status: a caller told
		// the create failed would make another (a pool, its next member).
		// Without it, the status is the API server's empty one, which
		// every controller reads as the phase the creator set (Pending).
		if withStatus, err := s.initStatus(ctx, out, o); err != nil {
			s.log.Warn("created without its initial status", "kind", o.GetTypeMeta().Kind, "name", o.GetMeta().Name, "err", err)
		} else {
			out = withStatus
		}
	}
	if store.RecordsCreated(o) {
		s.ev.record(out, api.EventNormal, "Created", fmt.Sprintf("%s %s created", o.GetTypeMeta().Kind, o.GetMeta().Name))
	}
	return out, nil
}

// initStatus writes the status o was created with onto created, the
// object the API server made (without it). The creator's status is where
// the object starts: a controller that wrote the new object meanwhile
// (placement giving a pool's new sandbox its node) wrote what comes after
// it, so each write is conditioned on the version read, and after one
// loses, the creator's fields only fill those the current status leaves
// out.
func (s *Store) initStatus(ctx context.Context, created, o api.Object) (api.Object, error) {
	want, err := statusFields(o)
	if err != nil {
		return nil, err
	}
	cur := created
	for try := 0; ; try++ {
		have, err := statusFields(cur)
		if err != nil {
			return nil, err
		}
		merged := maps.Clone(want)
		maps.Copy(merged, have)
		if try > 0 && len(merged) == len(have) {
			return cur, nil // the later writes hold every field
		}
		next := api.DeepCopy(cur)
		b, _ := json.Marshal(merged)
		if err := json.Unmarshal(b, next.GetStatus()); err != nil {
			return nil, err
		}
		out, err := s.UpdateStatus(ctx, next)
		if err == nil || !errors.Is(err, api.ErrConflict) || try == writeTries {
			return out, err
		}
		if cur, err = s.Get(ctx, o.GetTypeMeta().Kind, o.GetMeta().Name); err != nil {
			return nil, err
		}
	}
}

// statusFields is o's status as a JSON object: its fields that are set.
func statusFields(o api.Object) (map[string]json.RawMessage, error) {
	b, err := json.Marshal(o.GetStatus())
	if err != nil {
		return nil, err
	}
	m := map[string]json.RawMessage{}
	return m, json.Unmarshal(b, &m)
}

// writeTries bounds how often an unconditional write is tried again after
// losing to another writer.
const writeTries = 10

// Update writes o's metadata and spec over the stored object's, as the
// SQLite store does: conditioned on o's resourceVersion when it has one,
// validated against the stored spec (fields that may not change), and not
// written at all when nothing changes (changed=false).
func (s *Store) Update(ctx context.Context, o api.Object) (api.Object, bool, error) {
	kind, m := o.GetTypeMeta().Kind, o.GetMeta()
	r, err := s.res(kind)
	if err != nil {
		return nil, false, err
	}
	for try := 0; ; try++ {
		cur, err := s.Get(ctx, kind, m.Name)
		if err != nil {
			return nil, false, err
		}
		// The API server counts the generation of a spec change.
		next, _, changed, err := store.Merge(cur, o)
		if err != nil {
			return nil, false, err
		}
		if !changed {
			return cur, false, nil
		}
		nm := next.GetMeta()
		patch, err := s.specPatch(cur, next)
		if err != nil {
			return nil, false, err
		}
		put, err := r.Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: s.manager})
		if apierrors.IsConflict(err) && m.ResourceVersion == "" && try < writeTries {
			continue // unconditional: again on the newer object
		}
		if apierrors.IsNotFound(err) && nm.DeletionTimestamp != nil && len(nm.Finalizers) == 0 {
			return next, true, nil // the last finalizer went, and the object with it
		}
		if err != nil {
			return nil, false, mapErr(err)
		}
		out, err := s.decode(put)
		return out, err == nil, err
	}
}

// UpdateStatus replaces the stored object's status with o's, conditioned
// on o's resourceVersion when it has one. Nothing else changes. It is a
// merge patch from the status at that version (remembered from the read
// o came from, else read) to o's: status fields this binary does not know
// are kept.
func (s *Store) UpdateStatus(ctx context.Context, o api.Object) (api.Object, error) {
	kind, m := o.GetTypeMeta().Kind, o.GetMeta()
	r, err := s.res(kind)
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		rv := m.ResourceVersion
		base, ok := s.bases.get(kind, m.Name, rv)
		if rv == "" || !ok {
			var at string
			if base, at, err = s.readBase(ctx, kind, m.Name); err != nil {
				return nil, err
			}
			if rv != "" && at != rv {
				return nil, fmt.Errorf("%w: %s %s was changed since version %s (now %s): read it again", api.ErrConflict, kind, m.Name, rv, at)
			}
			rv = at
		}
		patch, err := statusPatch(base, o, rv)
		if err != nil {
			return nil, err
		}
		put, err := r.Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: s.manager}, "status")
		if apierrors.IsConflict(err) && m.ResourceVersion == "" && try < writeTries {
			continue
		}
		if err != nil {
			return nil, mapErr(err)
		}
		return s.decode(put)
	}
}

// PatchStatus merges patch, a JSON merge patch of the status, into the
// stored object's status, conditioned on rv when it is set: one PATCH of
// the status subresource, with no read.
func (s *Store) PatchStatus(ctx context.Context, kind, name, rv string, patch []byte) (api.Object, error) {
	r, err := s.res(kind)
	if err != nil {
		return nil, err
	}
	if !json.Valid(patch) {
		return nil, fmt.Errorf("status patch of %s %s is not JSON: %w", kind, name, api.ErrInvalid)
	}
	body := []byte(`{"status":` + string(patch) + `}`)
	if rv != "" {
		if body, err = withVersion(body, rv); err != nil {
			return nil, err
		}
	}
	put, err := r.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: s.manager}, "status")
	if err != nil {
		return nil, mapErr(err)
	}
	return s.decode(put)
}

// Delete removes the object, or marks it deleted (deletionTimestamp) while
// finalizers hold it; deleted says which. The object returned is its last
// state.
func (s *Store) Delete(ctx context.Context, kind, name string, opts store.DeleteOptions) (api.Object, bool, error) {
	r, err := s.res(kind)
	if err != nil {
		return nil, false, err
	}
	cur, err := s.Get(ctx, kind, name)
	if err != nil {
		return nil, false, err
	}
	if opts.ResourceVersion != "" && opts.ResourceVersion != cur.GetMeta().ResourceVersion {
		return nil, false, fmt.Errorf("%s %q was modified (resourceVersion %s, not %s): %w", strings.ToLower(kind), name, cur.GetMeta().ResourceVersion, opts.ResourceVersion, api.ErrConflict)
	}
	uid := types.UID(cur.GetMeta().UID)
	pre := &metav1.Preconditions{UID: &uid}
	if opts.ResourceVersion != "" {
		pre.ResourceVersion = &opts.ResourceVersion
	}
	// Background: the API server does not wait for objects that name this
	// one as owner; their controllers delete them.
	bg := metav1.DeletePropagationBackground
	if err := r.Delete(ctx, name, metav1.DeleteOptions{Preconditions: pre, PropagationPolicy: &bg}); err != nil {
		return nil, false, mapErr(err)
	}
	if len(cur.GetMeta().Finalizers) == 0 {
		return cur, true, nil
	}
	after, err := s.Get(ctx, kind, name)
	if errors.Is(err, api.ErrNotFound) {
		return cur, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return after, false, nil
}

// RecordEvent queues an event about o; it is written as a Kubernetes
// Event, aggregated with the same event of the same object (count and
// last timestamp), in the order recorded.
func (s *Store) RecordEvent(ctx context.Context, o api.Object, eventType, reason, message string) error {
	s.ev.record(o, eventType, reason, message)
	return nil
}

// EventDrops is how many events this store did not write, by why (the
// Drop constants).
func (s *Store) EventDrops() map[string]uint64 { return s.ev.drops() }

// ListEvents returns events oldest first, every event recorded before the
// call included (those not written yet from this store's memory).
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]*api.Event, error) {
	return s.ev.list(ctx, f)
}

// mapErr turns an API server's error into the api errors hvkube's callers
// test for, keeping its message.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	var sentinel error
	switch {
	case apierrors.IsNotFound(err):
		sentinel = api.ErrNotFound
	case apierrors.IsAlreadyExists(err):
		sentinel = api.ErrAlreadyExists
	case apierrors.IsConflict(err):
		sentinel = api.ErrConflict
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		sentinel = api.ErrInvalid
	case apierrors.IsGone(err), apierrors.IsResourceExpired(err):
		sentinel = api.ErrGone
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err):
		sentinel = api.ErrUnavailable
	default:
		return err
	}
	return fmt.Errorf("%w: %s", sentinel, err.Error())
}

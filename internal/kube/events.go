package kube

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// eventQueue bounds the events waiting to be written; past it an event is
// dropped with a warning rather than holding a controller up.
const eventQueue = 10000

// events writes the store's events, one at a time and in order, as
// Kubernetes Events, aggregated as kubectl users know them: the same
// type, reason and message about the same object is one Event whose count
// and last timestamp grow.
type events struct {
	s         *Store
	component string
	q         chan eventItem
	done      chan struct{}

	mu     sync.Mutex // guards closed, and sends to q against close
	closed bool
}

type eventItem struct {
	obj                  api.ObjectReference
	typ, reason, message string
	at                   time.Time
	flushed              chan struct{} // a flush marker when set
}

func newEvents(s *Store, component string) *events {
	e := &events{s: s, component: component, q: make(chan eventItem, eventQueue), done: make(chan struct{})}
	go e.run()
	return e
}

func (e *events) record(o api.Object, typ, reason, message string) {
	m := o.GetMeta()
	it := eventItem{obj: api.ObjectReference{Kind: o.GetTypeMeta().Kind, Name: m.Name, UID: m.UID}, typ: typ, reason: reason, message: message, at: e.s.now()}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	select {
	case e.q <- it:
	default:
		e.s.log.Warn("event queue full; event dropped", "kind", it.obj.Kind, "object", it.obj.Name, "reason", reason)
	}
}

// flush waits until every event queued before it is written.
func (e *events) flush(ctx context.Context) {
	mark := eventItem{flushed: make(chan struct{})}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	select {
	case e.q <- mark:
	case <-ctx.Done():
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	select {
	case <-mark.flushed:
	case <-ctx.Done():
	}
}

func (e *events) close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	close(e.q)
	e.mu.Unlock()
	<-e.done
}

func (e *events) run() {
	defer close(e.done)
	for it := range e.q {
		if it.flushed != nil {
			close(it.flushed)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := e.write(ctx, it); err != nil {
			e.s.log.Warn("record event", "kind", it.obj.Kind, "object", it.obj.Name, "reason", it.reason, "err", err)
		}
		cancel()
	}
}

// eventName is the name of the aggregated Event of it: the object's name
// and a hash of what makes two events the same.
func eventName(it eventItem) string {
	h := fnv.New64a()
	for _, s := range []string{it.obj.Kind, it.obj.UID, it.typ, it.reason, it.message} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	name := it.obj.Name
	if len(name) > 200 {
		name = name[:200]
	}
	return fmt.Sprintf("%s.%016x", strings.ToLower(name), h.Sum64())
}

func (e *events) write(ctx context.Context, it eventItem) error {
	evs := e.s.core.CoreV1().Events(e.s.ns)
	name := eventName(it)
	at := metav1.NewTime(it.at)
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.s.ns},
		InvolvedObject: corev1.ObjectReference{APIVersion: api.KubeVersion, Kind: it.obj.Kind, Name: it.obj.Name,
			UID: typesUID(it.obj.UID), Namespace: e.s.ns},
		Type: it.typ, Reason: it.reason, Message: it.message,
		Source:         corev1.EventSource{Component: e.component},
		FirstTimestamp: at, LastTimestamp: at, Count: 1,
	}
	_, err := evs.Create(ctx, ev, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	for range 3 {
		cur, err := evs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Count++
		cur.LastTimestamp = at
		if _, err = evs.Update(ctx, cur, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("event %s: three conflicts in a row", name)
}

// list returns the events f asks for, oldest first.
func (e *events) list(ctx context.Context, f store.EventFilter) ([]*api.Event, error) {
	e.flush(ctx)
	var sel []fields.Selector
	if f.Kind != "" {
		sel = append(sel, fields.OneTermEqualSelector("involvedObject.kind", f.Kind))
	}
	if f.Name != "" {
		sel = append(sel, fields.OneTermEqualSelector("involvedObject.name", f.Name))
	}
	l, err := e.s.core.CoreV1().Events(e.s.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(sel...).String()})
	if err != nil {
		return nil, mapErr(err)
	}
	var after uint64
	if f.After != "" {
		// Kubernetes resourceVersions order as integers (its comparable
		// resourceVersions); it is the only order "after" can mean.
		if after, err = strconv.ParseUint(f.After, 10, 64); err != nil {
			return nil, api.Invalid("resourceVersion", "%.64q is not a resourceVersion (one from a list or an object)", f.After)
		}
	}
	var out []*api.Event
	for i := range l.Items {
		ev := fromKubeEvent(&l.Items[i])
		if !f.Since.IsZero() && ev.Timestamp.Before(f.Since) {
			continue
		}
		if f.After != "" && rvNumber(ev.Metadata.ResourceVersion) <= after {
			continue
		}
		out = append(out, ev)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Timestamp.Equal(out[j].Timestamp) {
			return out[i].Timestamp.Before(out[j].Timestamp)
		}
		return rvNumber(out[i].Metadata.ResourceVersion) < rvNumber(out[j].Metadata.ResourceVersion)
	})
	limit := f.Limit
	if limit <= 0 && f.After == "" {
		limit = 1000
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}

func rvNumber(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

// fromKubeEvent is a Kubernetes Event as hvkube's: its time is the last
// time it happened.
func fromKubeEvent(k *corev1.Event) *api.Event {
	ev := &api.Event{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindEvent}}
	ev.Metadata = api.ObjectMeta{Name: k.Name, UID: string(k.UID), ResourceVersion: k.ResourceVersion, CreationTimestamp: k.CreationTimestamp.Time}
	ev.InvolvedObject = api.ObjectReference{Kind: k.InvolvedObject.Kind, Name: k.InvolvedObject.Name, UID: string(k.InvolvedObject.UID)}
	ev.Type, ev.Reason, ev.Message = k.Type, k.Reason, k.Message
	ev.Timestamp = k.LastTimestamp.Time
	if k.Count > 1 {
		ev.Count = int(k.Count)
	}
	if ev.Timestamp.IsZero() {
		ev.Timestamp = k.EventTime.Time
	}
	return ev
}

package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// Event writing: record never waits. Each event goes through client-go's
// EventCorrelator (tools/record), as the kubelet's do: the same event
// about the same object again is one Event whose count and last timestamp
// grow; more than ten that differ only in their message within ten
// minutes become one "(combined from similar events)" Event; and a token
// bucket per object drops what floods. What it keeps waits, by Event name,
// for one of eventWriters writers (client-go's workqueue: one write of a
// name at a time, a newer count replacing an unwritten one).
//
// Not client-go's tools/events (events.k8s.io): it merges every event of
// one reason about an object whatever its message, and writes a series'
// count only every 30 minutes, while `hvkube describe` and `kubectl get
// events` read core/v1 Events with their counts.
// eventQueue bounds the Events waiting to be written; past it an event is
// dropped (and counted) rather than held. A variable for tests.
var eventQueue = 10000

const (
	// eventWriters write Events at once.
	eventWriters = 4
	// eventTries is how many times an Event's write is tried.
	eventTries = 3
	// eventBurst events about one object pass at once, then eventQPS a
	// second: a pool member claimed a few times a second keeps its
	// events, one that loops without end does not flood the API server.
	eventBurst = 100
	eventQPS   = 2
)

// Reasons an event was not written (Store.EventDrops).
const (
	DropFull      = "queue-full"   // eventQueue Events waited already
	DropRateLimit = "rate-limit"   // the object's token bucket was empty
	DropFailed    = "write-failed" // eventTries writes failed
	DropClosed    = "store-closed" // recorded after Close
)

// events writes the store's events as Kubernetes Events.
type events struct {
	s      *Store
	source corev1.EventSource
	corr   *record.EventCorrelator
	q      workqueue.TypedRateLimitingInterface[string] // Event names
	wg     sync.WaitGroup
	seq    atomic.Uint64 // numbers the Events' names

	mu      sync.Mutex               // guards the fields below
	pending map[string]*eventWrite   // by Event name: what is still to write
	writing map[string]*corev1.Event // by Event name: being written now
	dropped map[string]uint64        // by reason
	warned  time.Time                // the last warning of a drop
	closed  bool
}

// eventWrite is the state of an Event to write, and whether the API
// server may already have it (a patch, else a create).
type eventWrite struct {
	ev     *corev1.Event
	exists bool
}

func newEvents(s *Store, source corev1.EventSource) *events {
	e := &events{s: s, source: source,
		corr:    record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{BurstSize: eventBurst, QPS: eventQPS}),
		q:       workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		pending: map[string]*eventWrite{}, writing: map[string]*corev1.Event{}, dropped: map[string]uint64{}}
	for range eventWriters {
		e.wg.Add(1)
		go e.run()
	}
	return e
}

// record queues an event about o; it never waits.
func (e *events) record(o api.Object, typ, reason, message string) {
	m := o.GetMeta()
	at := metav1.NewTime(e.s.now())
	name := strings.ToLower(m.Name)
	if len(name) > 200 {
		name = name[:200]
	}
	ev := &corev1.Event{
		// The time as Kubernetes names Events, and a count: two events of
		// one clock tick (a coarse or a test's clock) are two Events.
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x.%x", name, at.UnixNano(), e.seq.Add(1)), Namespace: e.s.ns},
		InvolvedObject: corev1.ObjectReference{APIVersion: api.KubeVersion, Kind: o.GetTypeMeta().Kind, Name: m.Name,
			UID: typesUID(m.UID), Namespace: e.s.ns},
		Type: typ, Reason: reason, Message: message,
		Source:         e.source,
		FirstTimestamp: at, LastTimestamp: at, Count: 1,
	}
	res, err := e.corr.EventCorrelate(ev)
	switch {
	case err != nil:
		e.s.log.Warn("correlate event", "kind", ev.InvolvedObject.Kind, "object", m.Name, "reason", reason, "err", err)
		return
	case res.Skip:
		e.drop(DropRateLimit, ev)
		return
	}
	ev = res.Event
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.drop(DropClosed, ev)
		return
	}
	if w, ok := e.pending[ev.Name]; ok {
		w.ev = ev // a newer count of an Event not written yet
	} else if len(e.pending) >= eventQueue {
		e.mu.Unlock()
		e.drop(DropFull, ev)
		return
	} else {
		_, busy := e.writing[ev.Name]
		e.pending[ev.Name] = &eventWrite{ev: ev, exists: res.Patch != nil || busy}
	}
	e.mu.Unlock()
	e.q.Add(ev.Name)
}

// drop counts an event not written, and says so at most once a minute.
func (e *events) drop(why string, ev *corev1.Event) {
	e.mu.Lock()
	e.dropped[why]++
	n := e.dropped[why]
	now := time.Now()
	warn := now.Sub(e.warned) >= time.Minute
	if warn {
		e.warned = now
	}
	e.mu.Unlock()
	if warn {
		e.s.log.Warn("event not written", "why", why, "kind", ev.InvolvedObject.Kind, "object", ev.InvolvedObject.Name,
			"reason", ev.Reason, "droppedSoFar", n)
	}
}

// drops is how many events were not written, by why.
func (e *events) drops() map[string]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.dropped)
}

// close writes what is queued, for at most closeWait, and stops the
// writers.
func (e *events) close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	e.mu.Unlock()
	drained := make(chan struct{})
	go func() {
		e.q.ShutDownWithDrain()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(closeWait):
		e.q.ShutDown()
	}
	e.wg.Wait()
}

// closeWait bounds how long Close writes the Events still queued.
const closeWait = 10 * time.Second

func (e *events) run() {
	defer e.wg.Done()
	for {
		name, shutdown := e.q.Get()
		if shutdown {
			return
		}
		e.writeNext(name)
		e.q.Done(name)
	}
}

// writeNext writes the pending state of the Event name; a failed write
// is tried again later unless a newer state replaced it meanwhile.
func (e *events) writeNext(name string) {
	e.mu.Lock()
	w, ok := e.pending[name]
	if ok {
		delete(e.pending, name)
		e.writing[name] = w.ev
	}
	e.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := e.write(ctx, w)
	cancel()
	e.mu.Lock()
	delete(e.writing, name)
	_, newer := e.pending[name]
	retry := err != nil && !newer && e.q.NumRequeues(name) < eventTries-1 && !e.closed
	switch {
	case err == nil:
		if newer {
			e.pending[name].exists = true
		}
	case retry:
		e.pending[name] = w
	case newer:
		// The next write carries this one's count.
	}
	e.mu.Unlock()
	switch {
	case err == nil:
		// The correlator's count stays this store's: the API server's
		// answer may be older than an event recorded meanwhile.
		e.q.Forget(name)
	case retry:
		e.q.AddRateLimited(name)
	case !newer:
		e.q.Forget(name)
		e.drop(DropFailed, w.ev)
		e.s.log.Debug("write event", "event", name, "err", err)
	}
}

// write creates the Event, or updates the count, last timestamp and
// message of the one the API server has.
func (e *events) write(ctx context.Context, w *eventWrite) error {
	evs := e.s.core.CoreV1().Events(e.s.ns)
	if !w.exists {
		_, err := evs.Create(ctx, w.ev, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	patch, err := json.Marshal(map[string]any{"count": w.ev.Count, "lastTimestamp": w.ev.LastTimestamp, "message": w.ev.Message})
	if err != nil {
		return err
	}
	_, err = evs.Patch(ctx, w.ev.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		// Expired (Events live an hour): it starts again.
		fresh := w.ev.DeepCopy()
		fresh.ResourceVersion = ""
		_, err = evs.Create(ctx, fresh, metav1.CreateOptions{})
	}
	return err
}

// unwritten is what list adds to the API server's answer: the Events
// still to write (or being written) that f asks for.
func (e *events) unwritten(f store.EventFilter) map[string]*corev1.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]*corev1.Event{}
	add := func(ev *corev1.Event) {
		if (f.Kind == "" || ev.InvolvedObject.Kind == f.Kind) && (f.Name == "" || ev.InvolvedObject.Name == f.Name) {
			if cur, ok := out[ev.Name]; !ok || ev.Count > cur.Count {
				out[ev.Name] = ev
			}
		}
	}
	for _, ev := range e.writing {
		add(ev)
	}
	for _, w := range e.pending {
		add(w.ev)
	}
	return out
}

// list returns the events f asks for, oldest first: the API server's,
// with what this store recorded and has not written yet (without waiting
// for it), unless f asks for what comes after a resourceVersion (those
// come in a later list, with theirs).
func (e *events) list(ctx context.Context, f store.EventFilter) ([]*api.Event, error) {
	var unwritten map[string]*corev1.Event
	if f.After == "" {
		unwritten = e.unwritten(f)
	}
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
		k := &l.Items[i]
		if u, ok := unwritten[k.Name]; ok {
			if u.Count > k.Count {
				k.Count, k.LastTimestamp, k.Message = u.Count, u.LastTimestamp, u.Message
			}
			delete(unwritten, k.Name)
		}
		ev := fromKubeEvent(k)
		if !f.Since.IsZero() && ev.Timestamp.Before(f.Since) {
			continue
		}
		if f.After != "" && rvNumber(ev.Metadata.ResourceVersion) <= after {
			continue
		}
		out = append(out, ev)
	}
	for _, u := range unwritten {
		ev := fromKubeEvent(u)
		if !f.Since.IsZero() && ev.Timestamp.Before(f.Since) {
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

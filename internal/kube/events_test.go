package kube_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
	"github.com/hvkube/hvkube/internal/store"
)

// eventWrites holds back every write of an Event until release, and
// counts how many wait at once.
type eventWrites struct {
	next    http.RoundTripper
	held    chan struct{}
	waiting atomic.Int32
	most    atomic.Int32
}

func (h *eventWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/events") {
		n := h.waiting.Add(1)
		for {
			m := h.most.Load()
			if n <= m || h.most.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-h.held:
		case <-r.Context().Done():
		}
		h.waiting.Add(-1)
	}
	return h.next.RoundTrip(r)
}

// TestEventsNeverWaitOnKubernetes: with the API server taking no Event
// writes, recording events never waits (past the queue they are dropped
// and counted), listing them does not wait for the backlog and shows what
// is not written yet, and once the writes go through, several go at
// once and the same event again is one Event with its count.
func TestEventsNeverWaitOnKubernetes(t *testing.T) {
	t.Cleanup(kube.SetEventQueue(500))
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	hold := &eventWrites{held: make(chan struct{})}
	var once sync.Once
	release := func() { once.Do(func() { close(hold.held) }) }
	t.Cleanup(release)
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { hold.next = rt; return hold }
	st, err := kube.Open(context.Background(), kube.Options{Config: cfg, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	pool := func(name string) api.Object {
		p := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}}
		p.Metadata.Name, p.Metadata.UID = name, "uid-"+name
		return p
	}
	// p000 has the same event five times: one Event, count 5. Then 60
	// objects have ten events of ten reasons each, more than the queue
	// holds (500 here); and one floods with 150 reasons, more than its
	// burst.
	const again, objects, reasons, flood = 5, 60, 10, 150
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range again {
			st.RecordEvent(ctx, pool("p000"), api.EventNormal, "Again", "the same")
		}
		for i := 1; i <= objects; i++ {
			p := pool(fmt.Sprintf("p%04d", i))
			for j := range reasons {
				st.RecordEvent(ctx, p, api.EventNormal, fmt.Sprintf("Reason%d", j), "once")
			}
		}
		p := pool("flood")
		for j := range flood {
			st.RecordEvent(ctx, p, api.EventWarning, fmt.Sprintf("Flood%d", j), "again and again")
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("recording events waited for the API server")
	}
	if d := st.EventDrops(); d[kube.DropFull] == 0 || d[kube.DropRateLimit] == 0 {
		t.Errorf("drops %v of %d events recorded while no write went through, want some for a full queue and some for the flood",
			d, again+objects*reasons+flood)
	}
	listed := make(chan []*api.Event, 1)
	go func() {
		evs, err := st.ListEvents(ctx, store.EventFilter{Kind: api.KindSandboxPool, Name: "p000"})
		if err != nil {
			t.Error(err)
		}
		listed <- evs
	}()
	select {
	case evs := <-listed:
		if len(evs) != 1 || evs[0].Count != again || evs[0].Reason != "Again" {
			t.Errorf("p000's events before any write: %s, want one Again of count %d", fmt.Sprint(evs), again)
		}
	case <-time.After(time.Minute):
		t.Fatal("ListEvents waited for the backlog of Event writes")
	}
	if hold.most.Load() < 2 {
		t.Errorf("at most %d Event write(s) at once, want several", hold.most.Load())
	}
	release()
	core := kubernetes.NewForConfigOrDie(env.Config)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		first, err := core.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=p000"})
		if err != nil {
			t.Fatal(err)
		}
		next, err := core.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=p0001"})
		if err != nil {
			t.Fatal(err)
		}
		if len(first.Items) == 1 && first.Items[0].Count == again && len(next.Items) == reasons {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("on the API server: p000 has %d Events (%v), want 1 of count %d; p0001 has %d, want %d",
				len(first.Items), first.Items, again, len(next.Items), reasons)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

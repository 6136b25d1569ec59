package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/store"
)

// readCounter is a store that counts the reads of one object, by kind;
// a sandbox's only under a context marked by the test (markedCall), so
// that the node's own reconciles meanwhile do not count.
type readCounter struct {
	store.API
	mu   sync.Mutex
	gets map[string]int
}

type markedCall struct{}

func (r *readCounter) Get(ctx context.Context, kind, name string) (api.Object, error) {
	if kind != api.KindSandbox || ctx.Value(markedCall{}) != nil {
		r.mu.Lock()
		r.gets[kind]++
		r.mu.Unlock()
	}
	return r.API.Get(ctx, kind, name)
}

func (r *readCounter) List(ctx context.Context, kind string, sel api.Selector) ([]api.Object, string, error) {
	r.mu.Lock()
	r.gets["List "+kind]++
	r.mu.Unlock()
	return r.API.List(ctx, kind, sel)
}

func (r *readCounter) count(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[kind]
}

func (r *readCounter) reset() {
	r.mu.Lock()
	r.gets = map[string]int{}
	r.mu.Unlock()
}

// TestNodeReadsItsWatch checks the reads a node saves the store (on
// Kubernetes, the API server): screen and input calls on a running
// sandbox read it from the node's watch, each heartbeat writes the Node
// object from its last write without reading it, and the status rounds
// list nothing from the store.
func TestNodeReadsItsWatch(t *testing.T) {
	rc := &readCounter{gets: map[string]int{}}
	c := newClusterWith(t, clusterOptions{statusInterval: 20 * time.Millisecond, nodeStore: func(st store.API) store.API {
		rc.API = st
		return rc
	}})
	c.create(t, yamlObj(t, sandboxYAML("box", "  healthCheck: {intervalSeconds: 3600}\n")))
	eventually(t, "the node's watch shows the sandbox running", func() (bool, string) {
		o, ok := c.nd.caches[api.KindSandbox].Get("box")
		if !ok {
			return false, "not in the watch"
		}
		return o.(*api.Sandbox).Status.Phase == api.SandboxRunning, o.(*api.Sandbox).Status.Phase
	})
	ctx := context.WithValue(context.Background(), markedCall{}, true)
	rc.reset()
	for range 10 {
		if _, _, err := c.nd.Screenshot(ctx, "box", backend.ScreenshotOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.nd.ScreenSize(ctx, "box"); err != nil {
			t.Fatal(err)
		}
	}
	if got := rc.count(api.KindSandbox); got != 0 {
		t.Errorf("20 screen calls read the sandbox from the store %d times, want 0", got)
	}

	// A call the watch's view refuses is looked at again in the store:
	// input right after a resume, before the watch brings it, is taken.
	if err := c.nd.Pause(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node's watch shows the sandbox paused", func() (bool, string) {
		o, _ := c.nd.caches[api.KindSandbox].Get("box")
		return o.(*api.Sandbox).Status.Phase == api.SandboxPaused, o.(*api.Sandbox).Status.Phase
	})
	if err := c.nd.SendInput(ctx, "box", []backend.InputEvent{{Kind: backend.EventKey, Key: "a", Down: true}}); !errors.Is(err, api.ErrConflict) {
		t.Errorf("input to a paused sandbox: %v, want a conflict", err)
	}
	if err := c.nd.Resume(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if err := c.nd.SendInput(ctx, "box", []backend.InputEvent{{Kind: backend.EventKey, Key: "a", Down: true}}); err != nil {
		t.Errorf("input right after a resume: %v", err)
	}

	// A person's take-over, which the node that owns the sandbox writes,
	// stops the agent's input at once, not once the node's watch brings
	// it; the input checks read nothing from the store.
	rc.reset()
	if _, _, err := c.nd.TakeControl(ctx, "box", api.SandboxControl{ID: "person-1", Holder: "ana", Since: time.Now()}, false); err != nil {
		t.Fatal(err)
	}
	key := []backend.InputEvent{{Kind: backend.EventKey, Key: "a", Down: true}}
	if err := c.nd.SendInput(ctx, "box", key); !errors.Is(err, api.ErrConflict) {
		t.Errorf("input right after a person took control: %v, want a conflict", err)
	}
	if err := c.nd.SendInput(display.WithControl(ctx, "person-1"), "box", key); err != nil {
		t.Errorf("the holder's input: %v", err)
	}
	if _, _, err := c.nd.TakeControl(ctx, "box", api.SandboxControl{ID: "person-2", Holder: "bo", Since: time.Now()}, false); !errors.Is(err, api.ErrConflict) {
		t.Errorf("a second take-over without force: %v, want a conflict", err)
	}
	if ended, _, err := c.nd.ReleaseControl(ctx, "box", "person-1", false); err != nil || ended == nil || ended.ID != "person-1" {
		t.Errorf("hand back: ended %+v, %v", ended, err)
	}
	if err := c.nd.SendInput(ctx, "box", key); err != nil {
		t.Errorf("input right after the hand-back: %v", err)
	}
	if got := rc.count(api.KindSandbox); got != 0 {
		t.Errorf("a take-over, its hand-back and four input checks read the sandbox from the store %d times, want 0", got)
	}

	rc.reset()
	time.Sleep(300 * time.Millisecond) // about 15 heartbeats
	if got := rc.count(api.KindNode); got > 1 {
		t.Errorf("heartbeats read the Node object %d times in 300 ms, want at most 1 (each writes from its last write)", got)
	}
	for _, kind := range []string{api.KindSandbox, api.KindTemplate} {
		if got := rc.count("List " + kind); got != 0 {
			t.Errorf("status rounds listed %s objects from the store %d times in 300 ms, want 0 (the node's watch has them)", kind, got)
		}
	}
	o, err := c.st.Get(ctx, api.KindNode, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if hb := o.(*api.Node).Status.LastHeartbeat; hb == nil || time.Since(*hb) > time.Second {
		t.Errorf("the Node's heartbeat is %v, want a recent one", hb)
	}
}

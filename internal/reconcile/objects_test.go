package reconcile

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// countingStore counts the reads of one object on a real store.
type countingStore struct {
	store.Interface
	gets atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, kind, name string) (api.Object, error) {
	c.gets.Add(1)
	return c.Interface.Get(ctx, kind, name)
}

// TestUpdateStatusFrom writes from an object already read: no read when
// it is current, a fresh read and the change made again when another
// writer came first, nothing written when nothing changes.
func TestUpdateStatusFrom(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cs := &countingStore{Interface: st}
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}, Metadata: api.ObjectMeta{Name: "box"}}
	sb.Spec.TemplateRef = "t"
	api.Default(sb)
	o, err := st.Create(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	base := o.(*api.Sandbox)
	setMessage := func(msg string) func(*api.Sandbox) bool {
		return func(cur *api.Sandbox) bool {
			if cur.Status.Message == msg {
				return false
			}
			cur.Status.Message = msg
			return true
		}
	}

	out, err := UpdateStatusFrom(ctx, cs, api.KindSandbox, base, setMessage("one"))
	if err != nil || out.Status.Message != "one" {
		t.Fatalf("from a current object: %v, message %q", err, out.Status.Message)
	}
	if got := cs.gets.Load(); got != 0 {
		t.Errorf("from a current object: %d reads, want 0", got)
	}
	if base.Status.Message != "" {
		t.Errorf("the base was changed: message %q", base.Status.Message)
	}

	// base is stale now: its write loses, and the change is made again on
	// what the store holds.
	out, err = UpdateStatusFrom(ctx, cs, api.KindSandbox, base, setMessage("two"))
	if err != nil || out.Status.Message != "two" {
		t.Fatalf("from a stale object: %v, message %q", err, out.Status.Message)
	}
	if got := cs.gets.Load(); got != 1 {
		t.Errorf("from a stale object: %d reads, want 1", got)
	}

	cs.gets.Store(0)
	same, err := UpdateStatusFrom(ctx, cs, api.KindSandbox, out, setMessage("two"))
	if err != nil || same != out {
		t.Fatalf("nothing to change: %v, got %p, want the base %p", err, same, out)
	}
	if got := cs.gets.Load(); got != 0 {
		t.Errorf("nothing to change: %d reads, want 0", got)
	}
	cur, _ := st.Get(ctx, api.KindSandbox, "box")
	if cur.GetMeta().ResourceVersion != out.Metadata.ResourceVersion {
		t.Errorf("nothing to change, but the store holds version %s, not %s", cur.GetMeta().ResourceVersion, out.Metadata.ResourceVersion)
	}
}

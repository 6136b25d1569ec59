package kube_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/kube"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
)

// TestCreateKeepsLaterStatusOnKubernetes: a create with a status is two
// requests on Kubernetes (the API server drops status on create). A controller that
// writes the new object's status between them (placement giving a pool's
// new sandbox its node, once) must not be undone by the creator's
// initial status.
func TestCreateKeepsLaterStatusOnKubernetes(t *testing.T) {
	st := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, w, err := st.ListAndWatch(ctx, api.KindSandbox, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	placed := map[string]bool{}
	go func() {
		for ev := range w.Events() {
			sb, ok := ev.Object.(*api.Sandbox)
			if !ok || sb.Status.Node != "" {
				continue
			}
			mu.Lock()
			once := !placed[sb.Metadata.Name]
			placed[sb.Metadata.Name] = true
			mu.Unlock()
			if !once {
				continue // placement places once; what undoes it is the bug
			}
			for {
				cur, err := st.Get(ctx, api.KindSandbox, sb.Metadata.Name)
				if err != nil {
					break
				}
				c := cur.(*api.Sandbox)
				c.Status.Node = "n1"
				if _, err := st.UpdateStatus(ctx, c); err == nil || ctx.Err() != nil {
					break
				}
			}
		}
	}()
	const n = 60
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
			sb.Metadata.Name = fmt.Sprintf("sb-%d", i)
			sb.Status.Phase = api.SandboxPending
			if _, err := st.Create(ctx, sb); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		items, _, err := st.List(ctx, api.KindSandbox, api.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		var lost []string
		for _, it := range items {
			sb := it.(*api.Sandbox)
			if sb.Status.Node != "n1" || sb.Status.Phase != api.SandboxPending {
				lost = append(lost, fmt.Sprintf("%s(node %q, phase %q)", sb.Metadata.Name, sb.Status.Node, sb.Status.Phase))
			}
		}
		mu.Lock()
		all := len(placed) == n
		mu.Unlock()
		if len(lost) == 0 && len(items) == n && all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sandboxes lost the node written after their creation, or their phase: %v", len(lost), len(items), lost)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// failStatus fails every write of a status subresource with a 503, as an
// API server that goes away between a create and its status write.
type failStatus struct{ next http.RoundTripper }

func (f failStatus) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status") {
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader("unavailable")), Request: r}, nil
	}
	return f.next.RoundTrip(r)
}

// TestCreateWhoseStatusWriteFailsOnKubernetes: a create is reported as
// done once the object exists, also when the status write after it
// fails: a caller told otherwise makes another (a pool, its next member).
func TestCreateWhoseStatusWriteFailsOnKubernetes(t *testing.T) {
	env := kubetest.Start(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return failStatus{rt} }
	st, err := kube.Open(context.Background(), kube.Options{Config: cfg, Namespace: env.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "created"
	sb.Status.Phase = api.SandboxPending
	out, err := st.Create(ctx, sb)
	if err != nil {
		t.Fatalf("create reported %v for an object it made", err)
	}
	if out.GetMeta().Name != "created" || out.GetMeta().UID == "" {
		t.Fatalf("create returned %+v, want the object the API server made", out.GetMeta())
	}
	if _, err := st.Get(ctx, api.KindSandbox, "created"); err != nil {
		t.Fatal(err)
	}
}

package kube

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/crd"
)

// These test the store's own logic (error mapping, conversion, patches,
// status on create) without an API server: client-go's fake clients
// stand in for it where a call is made. What only a real API server does
// (preconditions, the status subresource, admission) is tested
// …OnKubernetes.

// TestMapErr: each API-server error becomes the api error hvkube's
// callers test for, and keeps its message; others pass as they are.
func TestMapErr(t *testing.T) {
	gr := schema.GroupResource{Group: crd.Group, Resource: "sandboxes"}
	for _, tt := range []struct {
		err  error
		want error
	}{
		{apierrors.NewNotFound(gr, "x"), api.ErrNotFound},
		{apierrors.NewAlreadyExists(gr, "x"), api.ErrAlreadyExists},
		{apierrors.NewConflict(gr, "x", errors.New("changed")), api.ErrConflict},
		{apierrors.NewInvalid(schema.GroupKind{Group: crd.Group, Kind: "Sandbox"}, "x", nil), api.ErrInvalid},
		{apierrors.NewBadRequest("bad"), api.ErrInvalid},
		{apierrors.NewGone("too old"), api.ErrGone},
		{apierrors.NewResourceExpired("expired"), api.ErrGone},
		{apierrors.NewTooManyRequests("slow down", 1), api.ErrUnavailable},
		{apierrors.NewServerTimeout(gr, "get", 1), api.ErrUnavailable},
		{apierrors.NewServiceUnavailable("later"), api.ErrUnavailable},
		{apierrors.NewTimeoutError("slow", 1), api.ErrUnavailable},
	} {
		got := mapErr(tt.err)
		if !errors.Is(got, tt.want) || !strings.Contains(got.Error(), tt.err.Error()) {
			t.Errorf("mapErr(%v) = %v, want %v with the message kept", tt.err, got, tt.want)
		}
	}
	other := apierrors.NewForbidden(gr, "x", errors.New("no"))
	if got := mapErr(other); got != other {
		t.Errorf("mapErr(forbidden) = %v, want it as it is", got)
	}
	if mapErr(nil) != nil {
		t.Error("mapErr(nil) is not nil")
	}
}

// examples are the objects of examples/, one of each kind at least.
func examples(t *testing.T) []api.Object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	var out []api.Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := api.Decode(b, api.DecodeOptions{})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, objs...)
	}
	return out
}

// TestConvertRoundTrip: every example, with a status and an owner, goes
// to a custom resource of the store's namespace (apiVersion hvkube.io/v1,
// the owner's too) and comes back as it was.
func TestConvertRoundTrip(t *testing.T) {
	s := &Store{ns: "desks"}
	now := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	for _, o := range examples(t) {
		o.GetMeta().OwnerReferences = []api.OwnerReference{{Kind: api.KindSandboxPool, Name: "web", UID: "u-1"}}
		o.GetMeta().Labels = map[string]string{"a": "b"}
		o.GetMeta().CreationTimestamp = now
		if sb, ok := o.(*api.Sandbox); ok {
			sb.Status.Phase, sb.Status.Node, sb.Status.ClaimedAt = api.SandboxRunning, "n1", &now
		}
		u, err := s.toKube(o)
		if err != nil {
			t.Fatal(err)
		}
		if u.GetAPIVersion() != api.KubeVersion || u.GetNamespace() != "desks" || u.GetOwnerReferences()[0].APIVersion != api.KubeVersion {
			t.Errorf("%s %s: apiVersion %s, namespace %s, owner %+v", o.GetTypeMeta().Kind, o.GetMeta().Name, u.GetAPIVersion(), u.GetNamespace(), u.GetOwnerReferences())
		}
		back, err := fromKube(u)
		if err != nil {
			t.Fatal(err)
		}
		if back.GetTypeMeta().APIVersion != api.Version {
			t.Errorf("back as apiVersion %s", back.GetTypeMeta().APIVersion)
		}
		want, _ := json.Marshal(o)
		got, _ := json.Marshal(back)
		if string(got) != string(want) {
			t.Errorf("%s %s changed on the way:\n got %s\nwant %s", o.GetTypeMeta().Kind, o.GetMeta().Name, got, want)
		}
	}
	if _, err := fromKube(&unstructured.Unstructured{Object: map[string]any{"apiVersion": api.KubeVersion, "kind": "Pod"}}); err == nil {
		t.Error("a kind hvkube does not have was decoded")
	}
}

// TestPatchesCarryOnlyTheChange: a spec update is a merge patch of what
// changed, conditioned on the version read; a status write one from the
// status as read.
func TestPatchesCarryOnlyTheChange(t *testing.T) {
	s := &Store{ns: "desks"}
	cur := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	cur.Metadata.Name, cur.Metadata.ResourceVersion = "desk", "41"
	cur.Spec.TemplateRef = "linux-desktop"
	cur.Spec.Resources.CPU = 1
	cur.Status.Phase, cur.Status.Node = api.SandboxRunning, "n1"
	next := api.DeepCopy(cur)
	next.Spec.Resources.CPU = 2
	next.Metadata.Labels = map[string]string{"tier": "gpu"}
	p, err := s.specPatch(cur, next)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(p), `{"metadata":{"labels":{"tier":"gpu"},"resourceVersion":"41"},"spec":{"resources":{"cpu":2}}}`; got != want {
		t.Errorf("spec patch %s, want %s", got, want)
	}
	base, _ := json.Marshal(cur.Status)
	next.Status.Phase = api.SandboxPaused
	p, err = statusPatch(base, next, "42")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(p), `{"metadata":{"resourceVersion":"42"},"status":{"phase":"Paused"}}`; got != want {
		t.Errorf("status patch %s, want %s", got, want)
	}
}

// newFakeStore is a Store on client-go's fake clients.
func newFakeStore(t *testing.T) (*Store, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	lists := map[schema.GroupVersionResource]string{}
	for _, k := range api.Kinds {
		lists[schema.GroupVersionResource{Group: crd.Group, Version: crd.Version, Resource: k.Plural}] = k.Kind + "List"
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists)
	s := &Store{dyn: dyn, core: kubefake.NewClientset(), ns: "desks", log: slog.New(slog.DiscardHandler), now: time.Now, manager: "test"}
	s.ev = newEvents(s, corev1.EventSource{Component: "test"})
	t.Cleanup(func() { s.Close() })
	return s, dyn
}

// TestCreateWritesTheStatusToo: the API server ignores a status on
// create, so the store writes it after, and the caller gets the object
// with it; a second create of the name is ErrAlreadyExists, a missing
// object ErrNotFound, and a bad name is refused before any request.
func TestCreateWritesTheStatusToo(t *testing.T) {
	s, dyn := newFakeStore(t)
	ctx := context.Background()
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "desk"
	sb.Spec.TemplateRef = "linux-desktop"
	sb.Status.Phase, sb.Status.Node = api.SandboxPending, "n1"
	out, err := s.Create(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*api.Sandbox).Status; got.Phase != api.SandboxPending || got.Node != "n1" {
		t.Errorf("created with status %+v, want Pending on n1", got)
	}
	var verbs []string
	for _, a := range dyn.Actions() {
		verbs = append(verbs, a.GetVerb()+"/"+a.GetSubresource())
	}
	// (The fake sets no resourceVersion, so the store reads the object
	// before its status patch; an API server's create gives one.)
	if len(verbs) < 2 || verbs[0] != "create/" || verbs[len(verbs)-1] != "patch/status" || strings.Contains(strings.Join(verbs, " "), "update") {
		t.Errorf("requests %v, want a create, then the status as a patch, and no whole-object write", verbs)
	}
	got, err := s.Get(ctx, api.KindSandbox, "desk")
	if err != nil || got.(*api.Sandbox).Status.Node != "n1" || got.(*api.Sandbox).Spec.TemplateRef != "linux-desktop" {
		t.Errorf("get after create: %+v %v", got, err)
	}
	if _, err := s.Create(ctx, sb); !errors.Is(err, api.ErrAlreadyExists) {
		t.Errorf("a second create: %v, want ErrAlreadyExists", err)
	}
	if _, err := s.Get(ctx, api.KindSandbox, "nobody"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("get of a missing sandbox: %v, want ErrNotFound", err)
	}
	dyn.ClearActions()
	bad := api.DeepCopy(sb)
	bad.GetMeta().Name = "Not_A_Name"
	if _, err := s.Create(ctx, bad); !errors.Is(err, api.ErrInvalid) || len(dyn.Actions()) != 0 {
		t.Errorf("a bad name: %v after %d requests, want ErrInvalid before any", err, len(dyn.Actions()))
	}
	if _, err := s.Get(ctx, api.KindEvent, "x"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("get of an Event as an object: %v, want ErrInvalid", err)
	}
}

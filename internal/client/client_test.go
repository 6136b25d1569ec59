package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

// rig is the real API server over a real SQLite store in t.TempDir(),
// served by httptest behind a swappable front handler, and a client of it.
type rig struct {
	t   *testing.T
	ctx context.Context
	st  *store.Store
	srv *httptest.Server
	c   *client.Client
	// h is what the httptest server serves: the API server's handler,
	// or whatever a test put in front of it or in its place.
	h atomic.Pointer[http.Handler]
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newServer returns the API server's handler over a new store.
func newServer(t *testing.T, opts server.Options) (http.Handler, *store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	opts.Store = st
	opts.Logger = quiet
	return server.New(opts).Handler(), st
}

// shut closes srv and every connection to it, also those a watching
// client opens while it closes (Close alone waits for their requests).
func shut(srv *httptest.Server) {
	done := make(chan struct{})
	go func() {
		srv.Close()
		close(done)
	}()
	for {
		srv.CloseClientConnections()
		select {
		case <-done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// newRig starts a server with opts; wrap, when set, is put in front of
// its handler. The client sends token.
func newRig(t *testing.T, opts server.Options, token string, wrap func(http.Handler) http.Handler) *rig {
	t.Helper()
	h, st := newServer(t, opts)
	if wrap != nil {
		h = wrap(h)
	}
	r := &rig{t: t, ctx: context.Background(), st: st}
	r.h.Store(&h)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		(*r.h.Load()).ServeHTTP(w, req)
	}))
	t.Cleanup(func() { shut(r.srv) })
	c, err := client.New(r.srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	return r
}

func sandbox(name string, labels map[string]string) *api.Sandbox {
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = name
	sb.Metadata.Labels = labels
	return sb
}

func agent(name string) *api.Agent {
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name = name
	a.Spec.SandboxSelector = &api.SandboxSelector{Pool: "web"}
	a.Spec.Task.Steps = []api.Action{{Action: "wait", Duration: 1}}
	return a
}

func pool(name string, replicas int) *api.SandboxPool {
	p := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}}
	p.Metadata.Name = name
	p.Spec.Replicas = replicas
	return p
}

// names returns the objects' names in order.
func names(objs []api.Object) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.GetMeta().Name)
	}
	return out
}

// apiError returns err as a *client.Error, failing the test if it is not.
func apiError(t *testing.T, err error) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *client.Error", err, err)
	}
	return e
}

func TestNew(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{"", client.DefaultServer, false},
		{"hv.example:9000", "http://hv.example:9000", false},
		{"https://hv.example/", "https://hv.example", false},
		{"http://127.0.0.1:8080///", "http://127.0.0.1:8080", false},
		{"ftp://hv.example", "", true},
		{"http://", "", true},
		{"http://bad host", "", true},
	}
	for _, tt := range tests {
		c, err := client.New(tt.in, "")
		if tt.bad {
			if err == nil {
				t.Errorf("New(%q) = %s, want an error", tt.in, c.Server())
			}
			continue
		}
		if err != nil {
			t.Errorf("New(%q): %v", tt.in, err)
			continue
		}
		if got := c.Server(); got != tt.want {
			t.Errorf("New(%q).Server() = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestObjects runs Create, Get, List, Apply, Scale, Events and Delete
// against the real server, and checks what each returns.
func TestObjects(t *testing.T) {
	r := newRig(t, server.Options{}, "", nil)
	ctx := r.ctx
	web, db := map[string]string{"pool": "web"}, map[string]string{"pool": "db"}

	o, err := r.c.Create(ctx, sandbox("a", web))
	if err != nil {
		t.Fatal(err)
	}
	a, ok := o.(*api.Sandbox)
	if !ok {
		t.Fatalf("Create returned %T, want *api.Sandbox", o)
	}
	if a.Metadata.UID == "" || a.Metadata.ResourceVersion == "" || a.Kind != api.KindSandbox || a.APIVersion != api.Version {
		t.Errorf("created sandbox lacks what the server sets: %+v %+v", a.TypeMeta, a.Metadata)
	}
	if _, err := r.c.Create(ctx, sandbox("b", db)); err != nil {
		t.Fatal(err)
	}

	// Get takes any name of the kind.
	for _, kind := range []string{"Sandbox", "sandboxes", "sb"} {
		got, err := r.c.Get(ctx, kind, "a")
		if err != nil {
			t.Fatalf("Get(%s, a): %v", kind, err)
		}
		if got.GetMeta().UID != a.Metadata.UID {
			t.Errorf("Get(%s, a) has UID %s, want %s", kind, got.GetMeta().UID, a.Metadata.UID)
		}
	}
	if _, err := r.c.Get(ctx, "gizmos", "a"); err == nil || !strings.Contains(err.Error(), "unknown resource type") {
		t.Errorf("Get of an unknown kind: %v, want unknown resource type", err)
	}

	for _, tt := range []struct {
		selector string
		want     []string
	}{
		{"", []string{"a", "b"}},
		{"pool=web", []string{"a"}},
		{"pool in (web,db)", []string{"a", "b"}},
		{"pool=none", []string{}},
	} {
		got, err := r.c.List(ctx, "sandboxes", tt.selector)
		if err != nil {
			t.Fatalf("List(%q): %v", tt.selector, err)
		}
		if !slices.Equal(names(got), tt.want) {
			t.Errorf("List(%q) = %v, want %v", tt.selector, names(got), tt.want)
		}
	}
	if _, err := r.c.List(ctx, "sandboxes", "=web"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("List with a bad selector: %v, want ErrInvalid", err)
	}

	// Apply: created, unchanged (nothing written), configured.
	out, res, err := r.c.Apply(ctx, sandbox("c", web))
	if err != nil || res != "created" {
		t.Fatalf("Apply new: %q, %v; want created", res, err)
	}
	rv := out.GetMeta().ResourceVersion
	out, res, err = r.c.Apply(ctx, sandbox("c", web))
	if err != nil || res != "unchanged" {
		t.Fatalf("Apply same: %q, %v; want unchanged", res, err)
	}
	if got := out.GetMeta().ResourceVersion; got != rv {
		t.Errorf("unchanged apply moved resourceVersion %s -> %s", rv, got)
	}
	out, res, err = r.c.Apply(ctx, sandbox("c", db))
	if err != nil || res != "configured" {
		t.Fatalf("Apply changed: %q, %v; want configured", res, err)
	}
	if got := out.GetMeta().Labels["pool"]; got != "db" {
		t.Errorf("configured sandbox has pool=%q, want db", got)
	}
	if got, _ := r.c.Get(ctx, "sandbox", "c"); got.GetMeta().Labels["pool"] != "db" {
		t.Errorf("stored sandbox has pool=%q, want db", got.GetMeta().Labels["pool"])
	}

	// Scale writes the replicas and returns the pool.
	if _, err := r.c.Create(ctx, pool("desks", 1)); err != nil {
		t.Fatal(err)
	}
	p, err := r.c.Scale(ctx, "desks", 4)
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.Replicas != 4 {
		t.Errorf("scaled pool has %d replicas, want 4", p.Spec.Replicas)
	}
	if _, err := r.c.Scale(ctx, "nowhere", 1); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("Scale of a missing pool: %v, want ErrNotFound", err)
	}

	// Events of one object name only that object.
	evs, err := r.c.Events(ctx, api.KindSandbox, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) < 2 {
		t.Errorf("%d events of sandbox c, want one for its creation and one for its change", len(evs))
	}
	for _, ev := range evs {
		if ev.InvolvedObject.Kind != api.KindSandbox || ev.InvolvedObject.Name != "c" {
			t.Errorf("event of %s %s among the events of sandbox c", ev.InvolvedObject.Kind, ev.InvolvedObject.Name)
		}
	}

	// Delete: done at once, or accepted while a finalizer holds the
	// object (the server puts the run finalizer on every agent).
	done, err := r.c.Delete(ctx, "sandbox", "c")
	if err != nil || !done {
		t.Fatalf("Delete sandbox c: done %v, %v; want done", done, err)
	}
	if _, err := r.c.Get(ctx, "sandbox", "c"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if _, err := r.c.Delete(ctx, "sandbox", "c"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if _, err := r.c.Create(ctx, agent("job")); err != nil {
		t.Fatal(err)
	}
	done, err = r.c.Delete(ctx, "agent", "job")
	if err != nil || done {
		t.Fatalf("Delete agent with its run finalizer: done %v, %v; want accepted, not done", done, err)
	}
	held, err := r.c.Get(ctx, "agent", "job")
	if err != nil {
		t.Fatalf("agent held by its finalizer: %v", err)
	}
	if held.GetMeta().DeletionTimestamp == nil {
		t.Error("agent held by its finalizer has no deletionTimestamp")
	}
}

// TestListFollowsPages makes the server answer two objects a page (a front
// rewrites the client's limit): List follows the continue tokens, keeps
// its selector on every page, and returns every object once, in order.
func TestListFollowsPages(t *testing.T) {
	var mu sync.Mutex
	var pages []string // the query of each list request
	r := newRig(t, server.Options{}, "", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			q := req.URL.Query()
			if q.Get("limit") != "" {
				q.Set("limit", "2")
				req.URL.RawQuery = q.Encode()
				mu.Lock()
				pages = append(pages, req.URL.RawQuery)
				mu.Unlock()
			}
			h.ServeHTTP(w, req)
		})
	})
	var want []string
	for i := range 7 {
		labels := map[string]string{"pool": "web"}
		if i%3 == 2 {
			labels["pool"] = "db"
		}
		name := fmt.Sprintf("sb-%d", i)
		if _, err := r.c.Create(r.ctx, sandbox(name, labels)); err != nil {
			t.Fatal(err)
		}
		if labels["pool"] == "web" {
			want = append(want, name)
		}
	}
	got, err := r.c.List(r.ctx, "sandboxes", "pool=web")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(got), want) {
		t.Errorf("List = %v, want %v", names(got), want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pages) < 3 {
		t.Errorf("%d list requests for %d objects two a page: %v", len(pages), len(want), pages)
	}
	for i, q := range pages {
		if !strings.Contains(q, "labelSelector=pool%3Dweb") {
			t.Errorf("page %d asked without the selector: %s", i, q)
		}
		if (i > 0) != strings.Contains(q, "continue=") {
			t.Errorf("page %d: continue token present %v: %s", i, i > 0, q)
		}
	}
}

// categories are the api error categories the client maps codes to.
var categories = []struct {
	name string
	err  error
}{
	{"ErrNotFound", api.ErrNotFound},
	{"ErrConflict", api.ErrConflict},
	{"ErrInvalid", api.ErrInvalid},
	{"ErrUnsupported", api.ErrUnsupported},
	{"ErrGone", api.ErrGone},
	{"ErrNoSpace", api.ErrNoSpace},
	{"ErrUnavailable", api.ErrUnavailable},
}

// checkCategory checks that err is of category want and of no other
// (want nil: of none).
func checkCategory(t *testing.T, err, want error) {
	t.Helper()
	for _, c := range categories {
		if got := errors.Is(err, c.err); got != (c.err == want) {
			t.Errorf("errors.Is(%q, %s) = %v, want %v", err, c.name, got, !got)
		}
	}
}

// TestErrorCategories provokes each error category from the real server
// and checks the code, message, field and category the client makes of it.
func TestErrorCategories(t *testing.T) {
	r := newRig(t, server.Options{}, "", nil)
	ctx := r.ctx
	if _, err := r.c.Create(ctx, sandbox("a", nil)); err != nil {
		t.Fatal(err)
	}
	badRes := sandbox("bad", nil)
	badRes.Spec.Display.Resolution = "huge"
	tests := []struct {
		name     string
		call     func() error
		code     int
		category error
		field    string
		msg      string // a part of the message
	}{
		{"missing object", func() error { _, err := r.c.Get(ctx, "sandbox", "nowhere"); return err },
			http.StatusNotFound, api.ErrNotFound, "", "nowhere"},
		{"unknown route", func() error {
			_, err := r.c.Do(ctx, http.MethodGet, "/api/v1/sandboxes/a/nothing/here", nil, "", nil)
			return err
		},
			http.StatusNotFound, api.ErrNotFound, "", "no API route"},
		{"duplicate create", func() error { _, err := r.c.Create(ctx, sandbox("a", nil)); return err },
			http.StatusConflict, api.ErrConflict, "", "already exists"},
		{"invalid field", func() error { _, err := r.c.Create(ctx, badRes); return err },
			http.StatusBadRequest, api.ErrInvalid, "spec.display.resolution", "huge"},
		{"no backend", func() error { _, err := r.c.SandboxOp(ctx, "a", "pause"); return err },
			http.StatusNotImplemented, api.ErrUnsupported, "", "needs a VM backend"},
		{"revision from the future", func() error {
			_, err := r.c.Do(ctx, http.MethodGet, "/api/v1/sandboxes?resourceVersion=999999", nil, "", nil)
			return err
		}, http.StatusGone, api.ErrGone, "", "newer than the store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if err == nil {
				t.Fatal("no error")
			}
			e := apiError(t, err)
			if e.Code != tt.code {
				t.Errorf("code %d, want %d", e.Code, tt.code)
			}
			if e.Field != tt.field {
				t.Errorf("field %q, want %q", e.Field, tt.field)
			}
			if !strings.Contains(e.Message, tt.msg) || e.Error() != e.Message {
				t.Errorf("message %q (Error() %q), want the server's, with %q", e.Message, e.Error(), tt.msg)
			}
			checkCategory(t, err, tt.category)
		})
	}
}

// TestErrorIs is the mapping of status codes to categories, with codes the
// real server cannot be made to answer here (a full disk).
func TestErrorIs(t *testing.T) {
	tests := []struct {
		code int
		want error
	}{
		{http.StatusBadRequest, api.ErrInvalid},
		{http.StatusUnauthorized, nil},
		{http.StatusForbidden, nil},
		{http.StatusNotFound, api.ErrNotFound},
		{http.StatusConflict, api.ErrConflict},
		{http.StatusGone, api.ErrGone},
		{http.StatusRequestEntityTooLarge, nil},
		{http.StatusInternalServerError, nil},
		{http.StatusNotImplemented, api.ErrUnsupported},
		{http.StatusGatewayTimeout, nil},
		{http.StatusInsufficientStorage, api.ErrNoSpace},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.code), func(t *testing.T) {
			// Wrapped, as callers pass it on.
			err := fmt.Errorf("apply: %w", &client.Error{Code: tt.code, Message: "x"})
			checkCategory(t, err, tt.want)
		})
	}
}

// TestErrorUnavailable: the server answers api.ErrUnavailable with 503,
// and the client should map 503 back to it, as it does every other
// category the server maps.
func TestErrorUnavailable(t *testing.T) {
	r := newRig(t, server.Options{Ready: func(context.Context) error {
		return fmt.Errorf("the backend does not answer: %w", api.ErrUnavailable)
	}}, "", nil)
	_, err := r.c.Raw(r.ctx, http.MethodGet, "/readyz", nil, "")
	if e := apiError(t, err); e.Code != http.StatusServiceUnavailable {
		t.Fatalf("code %d, want 503", e.Code)
	}
	checkCategory(t, err, api.ErrUnavailable)
}

// TestErrorWithoutJSONBody: an answer that is not the API's JSON (a proxy's
// page) becomes an Error whose message carries the request, the status
// and the body.
func TestErrorWithoutJSONBody(t *testing.T) {
	for _, tt := range []struct {
		name, body string
	}{
		{"text", "upstream connect error\n"},
		{"JSON without an error", `{"status":"down"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A fake proxy in front of a server that is down.
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				w.WriteHeader(http.StatusBadGateway)
				io.WriteString(w, tt.body)
			}))
			defer proxy.Close()
			c, err := client.New(proxy.URL, "")
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Get(context.Background(), "sandbox", "a")
			e := apiError(t, err)
			if e.Code != http.StatusBadGateway {
				t.Errorf("code %d, want 502", e.Code)
			}
			for _, part := range []string{"GET", "/api/v1/sandboxes/a", "502 Bad Gateway", strings.TrimSpace(tt.body)} {
				if !strings.Contains(e.Message, part) {
					t.Errorf("message %q lacks %q", e.Message, part)
				}
			}
			checkCategory(t, err, nil)
		})
	}
}

// TestToken: the client sends its token as a bearer token on every call;
// a server with a token refuses a client without it, or with another.
func TestToken(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	r := newRig(t, server.Options{Token: "s3cret"}, "s3cret", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			mu.Lock()
			seen = append(seen, req.Header.Get("Authorization"))
			mu.Unlock()
			h.ServeHTTP(w, req)
		})
	})
	if _, err := r.c.Create(r.ctx, sandbox("a", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.List(r.ctx, "sandboxes", ""); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for i, h := range seen {
		if h != "Bearer s3cret" {
			t.Errorf("request %d sent Authorization %q, want %q", i, h, "Bearer s3cret")
		}
	}
	mu.Unlock()

	for _, tt := range []struct {
		name, token string
	}{
		{"no token", ""},
		{"another token", "guess"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.New(r.srv.URL, tt.token)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Get(r.ctx, "sandbox", "a")
			e := apiError(t, err)
			if e.Code != http.StatusUnauthorized || !strings.Contains(e.Message, "bearer token") {
				t.Errorf("got %d %q, want 401 naming the bearer token", e.Code, e.Message)
			}
			checkCategory(t, err, nil)
			if _, err := c.Watch(r.ctx, "sandboxes", ""); err == nil {
				t.Error("Watch without the token started")
			}
			// The health checks need no token.
			if err := c.WaitReady(r.ctx, time.Second); err != nil {
				t.Errorf("WaitReady without the token: %v", err)
			}
		})
	}
}

// next returns the next watch event, failing after a while.
func next(t *testing.T, ch <-chan client.WatchEvent) client.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
	}
	return client.WatchEvent{}
}

// expect reads the next events and checks their types and names.
func expect(t *testing.T, ch <-chan client.WatchEvent, want ...string) {
	t.Helper()
	for _, w := range want {
		ev := next(t, ch)
		if ev.Err != nil {
			t.Fatalf("watch error %v, want %s", ev.Err, w)
		}
		if got := ev.Type + " " + ev.Object.GetMeta().Name; got != w {
			t.Fatalf("event %s, want %s", got, w)
		}
	}
}

// ended waits until the watch's channel is closed and returns the last
// event's error, if it sent one.
func ended(t *testing.T, ch <-chan client.WatchEvent) error {
	t.Helper()
	var last error
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return last
			}
			if ev.Err == nil {
				t.Fatalf("event %s %s after the watch should have ended", ev.Type, ev.Object.GetMeta().Name)
			}
			last = ev.Err
		case <-deadline:
			t.Fatal("the watch did not end within 10s")
		}
	}
}

func (r *rig) update(name string, edit func(*api.Sandbox)) {
	r.t.Helper()
	o, err := r.st.Get(r.ctx, api.KindSandbox, name)
	if err != nil {
		r.t.Fatal(err)
	}
	sb := o.(*api.Sandbox)
	edit(sb)
	if _, _, err := r.st.Update(r.ctx, sb); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) create(o api.Object) {
	r.t.Helper()
	api.Default(o)
	if _, err := r.st.Create(r.ctx, o); err != nil {
		r.t.Fatal(err)
	}
}

// TestWatch: the current objects come as ADDED, then every change of the
// objects the selector matches, in order; cancelling ends the watch with
// no error event.
func TestWatch(t *testing.T) {
	r := newRig(t, server.Options{}, "", nil)
	web, db := map[string]string{"pool": "web"}, map[string]string{"pool": "db"}
	r.create(sandbox("a", web))
	r.create(sandbox("b", db))
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	ch, err := r.c.Watch(ctx, "sandboxes", "pool=web")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "ADDED a")
	r.update("a", func(sb *api.Sandbox) { sb.Metadata.Labels["tier"] = "1" })
	r.create(sandbox("c", web))
	r.create(sandbox("d", db)) // not watched
	r.update("b", func(sb *api.Sandbox) { sb.Metadata.Labels["tier"] = "1" })
	if _, _, err := r.st.Delete(r.ctx, api.KindSandbox, "a", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "MODIFIED a", "ADDED c", "DELETED a")
	cancel()
	if err := ended(t, ch); err != nil {
		t.Errorf("a cancelled watch ended with %v, want no error", err)
	}

	// The audit log is watched as kind events.
	ectx, ecancel := context.WithCancel(r.ctx)
	defer ecancel()
	evs, err := r.c.Watch(ectx, "events", "")
	if err != nil {
		t.Fatal(err)
	}
	ev := next(t, evs)
	if _, ok := ev.Object.(*api.Event); !ok || ev.Type != "ADDED" {
		t.Errorf("first event of the audit log: %s %T, want ADDED *api.Event", ev.Type, ev.Object)
	}

	if _, err := r.c.Watch(r.ctx, "gizmos", ""); err == nil {
		t.Error("Watch of an unknown kind started")
	}
}

// TestWatchResumesAfterABreak cuts the watch's connection: the client
// reconnects from the last change it delivered, so that it neither
// repeats the objects it listed nor misses the change made meanwhile.
func TestWatchResumesAfterABreak(t *testing.T) {
	var resumed atomic.Int32
	r := newRig(t, server.Options{}, "", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Query().Get("watch") == "true" && req.URL.Query().Get("resourceVersion") != "" {
				resumed.Add(1)
			}
			h.ServeHTTP(w, req)
		})
	})
	r.create(sandbox("a", nil))
	r.create(sandbox("b", nil))
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	ch, err := r.c.Watch(ctx, "sandboxes", "")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "ADDED a", "ADDED b")
	r.srv.CloseClientConnections()
	r.update("a", func(sb *api.Sandbox) { sb.Metadata.Labels = map[string]string{"after": "break"} })
	expect(t, ch, "MODIFIED a")
	r.srv.CloseClientConnections()
	r.create(sandbox("c", nil))
	expect(t, ch, "ADDED c")
	if n := resumed.Load(); n < 1 {
		t.Errorf("%d watches resumed from a resourceVersion, want at least 1", n)
	}
}

// TestWatchListsAgainWhenTheServerCannotResume replaces the server with one
// over another store, as a restore of an older database would: it cannot
// resume from the client's resourceVersion (410), and the client lists
// again, delivering the new server's objects as ADDED.
func TestWatchListsAgainWhenTheServerCannotResume(t *testing.T) {
	r := newRig(t, server.Options{}, "", nil)
	for _, n := range []string{"a", "b", "c", "d"} {
		r.create(sandbox(n, nil))
	}
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	ch, err := r.c.Watch(ctx, "sandboxes", "")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "ADDED a", "ADDED b", "ADDED c", "ADDED d")

	h2, st2 := newServer(t, server.Options{})
	z := sandbox("z", nil)
	api.Default(z)
	if _, err := st2.Create(r.ctx, z); err != nil {
		t.Fatal(err)
	}
	r.h.Store(&h2)
	r.srv.CloseClientConnections()
	expect(t, ch, "ADDED z")
	// What the watch had delivered and the new list lacks was deleted
	// meanwhile: it says so, in any order.
	gone := map[string]bool{}
	for range 4 {
		ev := next(t, ch)
		if ev.Err != nil || ev.Type != "DELETED" {
			t.Fatalf("after the relist: %s %v, want DELETED", ev.Type, ev.Err)
		}
		gone[ev.Object.GetMeta().Name] = true
	}
	if len(gone) != 4 || !gone["a"] || !gone["b"] || !gone["c"] || !gone["d"] {
		t.Fatalf("deleted %v, want a b c d", gone)
	}
	z2 := sandbox("z2", nil)
	api.Default(z2)
	if _, err := st2.Create(r.ctx, z2); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, "ADDED z2")
}

// TestWatchEnds: a watch whose server is gone for longer than
// ReconnectFor, or that the server refuses on reconnecting, ends with a
// last event that carries the error.
func TestWatchEnds(t *testing.T) {
	defer func(d time.Duration) { client.ReconnectFor = d }(client.ReconnectFor)
	client.ReconnectFor = 300 * time.Millisecond
	tests := []struct {
		name string
		cut  func(r *rig)
		want string
	}{
		{"server gone", func(r *rig) { shut(r.srv) }, "could not reconnect"},
		{"refused on reconnect", func(r *rig) {
			h, _ := newServer(t, server.Options{Token: "rotated"})
			r.h.Store(&h)
			r.srv.CloseClientConnections()
		}, "bearer token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, server.Options{}, "", nil)
			r.create(sandbox("a", nil))
			ctx, cancel := context.WithCancel(r.ctx)
			defer cancel()
			ch, err := r.c.Watch(ctx, "sandboxes", "")
			if err != nil {
				t.Fatal(err)
			}
			expect(t, ch, "ADDED a")
			tt.cut(r)
			err = ended(t, ch)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("the watch ended with %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestContext: a call ends when its context does, with the context's
// error (not the "cannot reach" of an unreachable server); a call to an
// address where nothing listens says so.
func TestContext(t *testing.T) {
	r := newRig(t, server.Options{}, "", nil)
	a := agent("asker")
	r.create(a)
	asked := time.Now().UTC()
	if _, err := updateAgent(r, "asker", func(a *api.Agent) {
		a.Status.HumanRequest = &api.HumanRequest{ID: "q1", Question: "which seat?", AskedAt: asked}
	}); err != nil {
		t.Fatal(err)
	}

	// The server holds a long poll until the answer comes; the caller's
	// deadline ends it first.
	ctx, cancel := context.WithTimeout(r.ctx, 200*time.Millisecond)
	defer cancel()
	_, err := r.c.HumanRequest(ctx, "asker", 30*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("long poll past the deadline: %v, want context.DeadlineExceeded", err)
	}
	if err != nil && strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("a deadline reads as an unreachable server: %v", err)
	}

	// The answer ends the long poll.
	got := make(chan error, 1)
	var hr *api.HumanRequest
	go func() {
		var err error
		hr, err = r.c.HumanRequest(r.ctx, "asker", 30*time.Second)
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the poll start waiting; an earlier answer is read at once
	if _, err := updateAgent(r, "asker", func(a *api.Agent) {
		now := time.Now().UTC()
		a.Status.HumanRequest.Answer, a.Status.HumanRequest.AnsweredBy, a.Status.HumanRequest.AnsweredAt = "12A", "ops", &now
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		if hr.Answer != "12A" || hr.Pending() {
			t.Errorf("answered request %+v, want answer 12A", hr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll did not end with the answer")
	}

	// A cancelled context sends nothing.
	cctx, ccancel := context.WithCancel(r.ctx)
	ccancel()
	if _, err := r.c.Get(cctx, "agent", "asker"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context: %v, want context.Canceled", err)
	}

	// Nothing listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := client.New(addr, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(r.ctx, "agent", "asker")
	if err == nil || !strings.Contains(err.Error(), "cannot reach the hvkube server at http://"+addr) {
		t.Errorf("Get from a closed port: %v, want cannot reach the hvkube server", err)
	}
	var e *client.Error
	if errors.As(err, &e) {
		t.Errorf("an unreachable server reads as an answer: %v", e)
	}
}

func updateAgent(r *rig, name string, edit func(*api.Agent)) (api.Object, error) {
	o, err := r.st.Get(r.ctx, api.KindAgent, name)
	if err != nil {
		return nil, err
	}
	a := o.(*api.Agent)
	edit(a)
	return r.st.UpdateStatus(r.ctx, a)
}

// TestWaitReady waits for a server that becomes ready, and gives up on one
// that does not with the server's answer.
func TestWaitReady(t *testing.T) {
	var ready atomic.Bool
	var asked atomic.Int32
	r := newRig(t, server.Options{Ready: func(context.Context) error {
		if asked.Add(1) >= 3 {
			ready.Store(true)
		}
		if !ready.Load() {
			return errors.New("controllers starting")
		}
		return nil
	}}, "", nil)
	if err := r.c.WaitReady(r.ctx, 10*time.Second); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	if n := asked.Load(); n < 3 {
		t.Errorf("ready after %d looks, want 3", n)
	}

	never := newRig(t, server.Options{Ready: func(context.Context) error { return errors.New("controllers starting") }}, "", nil)
	err := never.c.WaitReady(never.ctx, 200*time.Millisecond)
	e := apiError(t, err)
	if e.Code != http.StatusServiceUnavailable || !strings.Contains(e.Message, "controllers starting") {
		t.Errorf("WaitReady on a server never ready: %d %q, want 503 with the reason", e.Code, e.Message)
	}
}

// TestDoDecodeError: a 2xx answer that is not the JSON asked for is an
// error that names the request.
func TestDoDecodeError(t *testing.T) {
	r := newRig(t, server.Options{}, "", nil)
	var out map[string]any
	_, err := r.c.Do(r.ctx, http.MethodGet, "/healthz", nil, "", &out)
	if err == nil || !strings.Contains(err.Error(), "GET /healthz: decode answer") {
		t.Errorf("Do of a text answer into JSON: %v, want a decode error naming the request", err)
	}
	var e *client.Error
	if errors.As(err, &e) {
		t.Errorf("a decode error reads as the server's: %v", e)
	}
}

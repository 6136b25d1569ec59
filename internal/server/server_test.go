package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

type testServer struct {
	*httptest.Server
	st  *store.Store
	tap *watchTap // nil unless start made the server
}

func start(t *testing.T, opts Options) *testServer {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tap := &watchTap{API: st, begun: map[string]int{}}
	opts.Store = tap
	srv := httptest.NewServer(New(opts).Handler())
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	return &testServer{Server: srv, st: st, tap: tap}
}

// watchTap is the test server's store, counting the watches its handlers
// begin by kind: a test that needs a reader to be waiting acts once the
// count moves, not after a sleep that is long enough on a fast machine.
type watchTap struct {
	store.API
	mu    sync.Mutex // guards begun
	begun map[string]int
}

func (s *watchTap) ListAndWatch(ctx context.Context, kind string, sel api.Selector) ([]api.Object, store.Watcher, error) {
	items, w, err := s.API.ListAndWatch(ctx, kind, sel)
	if err == nil {
		s.count(kind)
	}
	return items, w, err
}

func (s *watchTap) WatchFrom(ctx context.Context, kind string, sel api.Selector, rv string) (store.Watcher, error) {
	w, err := s.API.WatchFrom(ctx, kind, sel, rv)
	if err == nil {
		s.count(kind)
	}
	return w, err
}

func (s *watchTap) count(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begun[kind]++
}

// watches returns how many watches of kind have begun: each has
// registered with the store, so a change committed after it is delivered.
func (s *watchTap) watches(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.begun[kind]
}

func (ts *testServer) do(t *testing.T, method, path, ctype, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

const poolYAML = `apiVersion: hvkube/v1
kind: SandboxPool
metadata:
  name: browser-workers
spec:
  replicas: 5
  minReady: 2
  template:
    metadata:
      labels: {pool: browser-workers}
    spec:
      display: {resolution: 1280x800}
`

func TestCRUD(t *testing.T) {
	ts := start(t, Options{})
	code, _, body := ts.do(t, "POST", "/api/v1/sandboxpools", "application/yaml", poolYAML)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	var p api.SandboxPool
	json.Unmarshal(body, &p)
	if p.Metadata.UID == "" || p.Spec.WarmTier != "paused" || p.APIVersion != api.Version {
		t.Fatalf("created: %s", body)
	}
	if code, _, _ := ts.do(t, "POST", "/api/v1/sandboxpools", "application/yaml", poolYAML); code != http.StatusConflict {
		t.Fatalf("duplicate create: %d", code)
	}
	code, _, body = ts.do(t, "GET", "/api/v1/pools/browser-workers", "", "")
	if code != 200 || !strings.Contains(string(body), `"name":"browser-workers"`) {
		t.Fatalf("get: %d %s", code, body)
	}
	// PUT: unchanged, then configured.
	code, h, _ := ts.do(t, "PUT", "/api/v1/sandboxpools/browser-workers", "application/yaml", poolYAML)
	if code != 200 || h.Get(ApplyResultHeader) != "unchanged" {
		t.Fatalf("put same: %d %s", code, h.Get(ApplyResultHeader))
	}
	code, h, _ = ts.do(t, "PUT", "/api/v1/sandboxpools/browser-workers", "application/yaml", strings.Replace(poolYAML, "replicas: 5", "replicas: 6", 1))
	if code != 200 || h.Get(ApplyResultHeader) != "configured" {
		t.Fatalf("put changed: %d %s", code, h.Get(ApplyResultHeader))
	}
	code, _, body = ts.do(t, "PATCH", "/api/v1/sandboxpools/browser-workers/scale", "application/json", `{"replicas":3}`)
	if code != 200 || !strings.Contains(string(body), `"replicas":3`) {
		t.Fatalf("scale: %d %s", code, body)
	}
	code, _, body = ts.do(t, "GET", "/api/v1/sandboxpools?labelSelector=nope%3Dx", "", "")
	if code != 200 || !strings.Contains(string(body), `"kind":"SandboxPoolList"`) || !strings.Contains(string(body), `"items":[]`) {
		t.Fatalf("list with selector: %d %s", code, body)
	}
	code, _, _ = ts.do(t, "DELETE", "/api/v1/sandboxpools/browser-workers", "", "")
	if code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if code, _, _ := ts.do(t, "GET", "/api/v1/sandboxpools/browser-workers", "", ""); code != 404 {
		t.Fatalf("get after delete: %d", code)
	}
	code, _, body = ts.do(t, "GET", "/api/v1/events?kind=pool&name=browser-workers", "", "")
	if code != 200 || strings.Count(string(body), `"reason"`) != 4 {
		t.Fatalf("events: %d %s", code, body)
	}
}

func TestAgentShortFormAndResult(t *testing.T) {
	ts := start(t, Options{})
	code, _, body := ts.do(t, "POST", "/api/v1/agents", "application/json",
		`{"name":"book-flight-123","sandboxSelector":{"pool":"browser-workers"},"task":{"workflow":"book-flight","input":{"destination":"New York"}}}`)
	if code != 201 {
		t.Fatalf("short form: %d %s", code, body)
	}
	code, _, body = ts.do(t, "GET", "/api/v1/agents/book-flight-123/result", "", "")
	if code != 200 {
		t.Fatalf("result: %d %s", code, body)
	}
	var res map[string]any
	json.Unmarshal(body, &res)
	if res["status"] != "pending" || res["duration_seconds"] != 0.0 {
		t.Fatalf("result: %s", body)
	}
}

func TestSandboxOpsNeedBackend(t *testing.T) {
	ts := start(t, Options{})
	ts.do(t, "POST", "/api/v1/sandboxes", "application/yaml", "apiVersion: hvkube/v1\nkind: Sandbox\nmetadata: {name: desk}\nspec: {}\n")
	for _, r := range []struct{ method, path string }{
		{"POST", "/api/v1/sandboxes/desk/pause"},
		{"GET", "/api/v1/sandboxes/desk/screen"},
		{"POST", "/api/v1/sandboxes/desk/input"},
	} {
		code, _, body := ts.do(t, r.method, r.path, "", "")
		if code != http.StatusNotImplemented || !strings.Contains(string(body), "backend") {
			t.Errorf("%s %s: %d %s", r.method, r.path, code, body)
		}
	}
	if code, _, _ := ts.do(t, "POST", "/api/v1/sandboxes/ghost/pause", "", ""); code != 404 {
		t.Errorf("unknown sandbox: %d", code)
	}
}

func TestAuth(t *testing.T) {
	ts := start(t, Options{Token: "s3cret"})
	if code, _, _ := ts.do(t, "GET", "/healthz", "", ""); code != 200 {
		t.Fatalf("healthz needs no token: %d", code)
	}
	if code, _, _ := ts.do(t, "GET", "/api/v1/agents", "", ""); code != 401 {
		t.Fatalf("no token: %d", code)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/api/v1/agents", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("with token: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
}

func TestWatchStream(t *testing.T) {
	ts := start(t, Options{})
	ts.do(t, "POST", "/api/v1/sandboxpools", "application/yaml", poolYAML)
	next, code := watchLines(t, ts, "/api/v1/sandboxpools?watch=true")
	if code != 200 {
		t.Fatalf("watch: %d", code)
	}
	if got := next(eventWait); got != "ADDED browser-workers" {
		t.Fatalf("initial: %s", got)
	}
	ts.do(t, "PATCH", "/api/v1/sandboxpools/browser-workers/scale", "application/json", `{"replicas":4}`)
	if got := next(eventWait); got != "MODIFIED browser-workers" {
		t.Fatalf("after scale: %s", got)
	}
	ts.do(t, "DELETE", "/api/v1/sandboxpools/browser-workers", "", "")
	if got := next(eventWait); got != "DELETED browser-workers" {
		t.Fatalf("after delete: %s", got)
	}
}

// TestBadInput sends bad requests and checks the status code, the field the
// error names, and that the store did not change.
func TestBadInput(t *testing.T) {
	ts := start(t, Options{MaxBody: 64 << 10})
	if code, _, b := ts.do(t, "POST", "/api/v1/sandboxpools", "application/yaml", poolYAML); code != 201 {
		t.Fatalf("setup: %d %s", code, b)
	}
	tests := badInputs()
	before := snapshot(t, ts)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, h, body := ts.do(t, tt.method, tt.path, tt.ctype, tt.body)
			if code != tt.code {
				t.Fatalf("status %d, want %d: %s", code, tt.code, body)
			}
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
			var e struct {
				Error string `json:"error"`
				Field string `json:"field"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
				t.Fatalf("error body %q: %v", body, err)
			}
			if e.Field != tt.field {
				t.Fatalf("field %q, want %q (error: %s)", e.Field, tt.field, e.Error)
			}
			if tt.field != "" && !strings.Contains(e.Error, tt.field) {
				t.Fatalf("message %q does not name %s", e.Error, tt.field)
			}
		})
	}
	if after := snapshot(t, ts); after != before {
		t.Fatalf("bad input changed the store:\nbefore %s\nafter  %s", before, after)
	}
	if len(tests) < 30 {
		t.Fatalf("only %d bad inputs", len(tests))
	}
}

// snapshot is every object in the store plus the revision.
func snapshot(t *testing.T, ts *testServer) string {
	var sb strings.Builder
	rv, err := ts.st.Revision(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&sb, "rv=%d ", rv)
	for _, k := range api.Kinds {
		items, _, err := ts.st.List(context.Background(), k.Kind, api.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(items)
		sb.Write(b)
	}
	return sb.String()
}

// badInput is a request the API refuses: its status, and the field its
// error names ("" for none).
type badInput struct {
	name, method, path, ctype, body string
	code                            int
	field                           string
}

// badInputs are TestBadInput's requests (TestWebhookOnKubernetes sends
// those of objects straight to the Kubernetes API server).
func badInputs() []badInput {
	const sb = "apiVersion: hvkube/v1\nkind: Sandbox\nmetadata:\n  name: desk\n"
	const ag = "apiVersion: hvkube/v1\nkind: Agent\nmetadata:\n  name: job\n"
	const tpl = "apiVersion: hvkube/v1\nkind: Template\nmetadata:\n  name: tpl\n"
	const ds = "apiVersion: hvkube/v1\nkind: DisplayService\nmetadata:\n  name: view\n"
	pool := func(spec string) string {
		return "apiVersion: hvkube/v1\nkind: SandboxPool\nmetadata:\n  name: other\nspec:\n" + spec
	}
	return []badInput{
		{"not YAML", "POST", "/api/v1/sandboxes", "application/yaml", "{{{ not: [yaml", 400, ""},
		{"binary", "POST", "/api/v1/sandboxes", "application/json", "\x00\xff\xfe", 400, ""},
		{"no content type", "POST", "/api/v1/sandboxes", "", "\x00\xff\xfe", 415, ""},
		{"text/plain", "POST", "/api/v1/sandboxes", "text/plain", `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"x"}}`, 415, ""},
		{"form", "POST", "/api/v1/sandboxes", "application/x-www-form-urlencoded", "a=b", 415, ""},
		{"form on delete", "DELETE", "/api/v1/sandboxpools/browser-workers", "application/x-www-form-urlencoded", "", 415, ""},
		{"duplicate JSON key", "POST", "/api/v1/sandboxes", "application/json", `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"a","name":"b"}}`, 400, "metadata.name"},
		{"duplicate JSON key in list", "POST", "/api/v1/sandboxes", "application/json", `[{"apiVersion":"hvkube/v1","kind":"Sandbox","kind":"Sandbox","metadata":{"name":"a"}}]`, 400, "[0].kind"},
		{"duplicate YAML key", "POST", "/api/v1/sandboxes", "application/yaml", sb + "  name: b\n", 400, ""},
		{"deep JSON", "POST", "/api/v1/sandboxes", "application/json", strings.Repeat("[", 500) + strings.Repeat("]", 500), 400, ""},
		{"scale duplicate key", "PATCH", "/api/v1/sandboxpools/browser-workers/scale", "application/json", `{"replicas":3,"replicas":9}`, 400, "replicas"},
		{"template /etc/shadow", "POST", "/api/v1/templates", "application/yaml", tpl + "spec:\n  qemu: {disk: /etc/shadow, kernel: /boot/vmlinuz}\n", 400, "spec.qemu.disk"},
		{"volume outside roots", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  volumes:\n  - {name: w, hostPath: /etc, sandboxPath: /w}\n", 400, "spec.volumes[0].hostPath"},
		{"pool volume outside roots", "POST", "/api/v1/sandboxpools", "application/yaml", pool("  replicas: 1\n  template:\n    spec:\n      volumes:\n      - {name: w, hostPath: /root, sandboxPath: /w}\n"), 400, "spec.template.spec.volumes[0].hostPath"},
		{"network mode", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  network: {mode: bridge}\n", 400, "spec.network.mode"},
		{"egress without a network", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  network: {mode: none, egress: {allow: [example.com]}}\n", 400, "spec.network.egress"},
		{"egress rule syntax", "POST", "/api/v1/templates", "application/yaml", tpl + "spec:\n  qemu: {image: linux-desktop}\n  network:\n    egress: {allow: [example.com, 10.0.0.0/33]}\n", 400, "spec.network.egress.allow[1]"},
		{"egress rule port", "POST", "/api/v1/sandboxpools", "application/yaml", pool("  replicas: 1\n  template:\n    spec:\n      network:\n        egress: {deny: ['example.com:99999']}\n"), 400, "spec.template.spec.network.egress.deny[0]"},
		{"egress rule with a space", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  network:\n    egress: {allow: ['a b']}\n", 400, "spec.network.egress.allow[0]"},
		{"selector of 1001 terms", "GET", "/api/v1/sandboxes?labelSelector=" + strings.Repeat("a%3Db,", 1000) + "a%3Db", "", "", 400, "labelSelector"},
		{"selector of 300 values", "GET", "/api/v1/sandboxes?labelSelector=a%20in%20(" + strings.Repeat("b,", 299) + "b)", "", "", 400, "labelSelector"},
		{"list limit 0", "GET", "/api/v1/sandboxes?limit=0", "", "", 400, "limit"},
		{"list bad continue", "GET", "/api/v1/sandboxes?continue=xyz", "", "", 400, "continue"},
		{"list bad resourceVersion", "GET", "/api/v1/sandboxes?resourceVersion=abc", "", "", 400, "resourceVersion"},
		{"list future resourceVersion", "GET", "/api/v1/sandboxes?resourceVersion=99999", "", "", 410, ""},
		{"list resourceVersion past its bound", "GET", "/api/v1/sandboxes?resourceVersion=" + strings.Repeat("9", 65), "", "", 400, "resourceVersion"},
		{"watch resourceVersion not a store's", "GET", "/api/v1/sandboxes?watch=true&resourceVersion=x%01y", "", "", 400, "resourceVersion"},
		{"watch future resourceVersion", "GET", "/api/v1/sandboxes?watch=true&resourceVersion=99999", "", "", 410, ""},
		{"events future resourceVersion", "GET", "/api/v1/events?resourceVersion=99999", "", "", 410, ""},
		{"agent type too long", "POST", "/api/v1/agents", "application/yaml", ag + "spec:\n  sandboxName: d\n  task:\n    steps:\n    - {action: type, text: " + strings.Repeat("x", 5000) + "}\n", 400, "spec.task.steps[0].text"},
		{"agent key too long", "POST", "/api/v1/agents", "application/yaml", ag + "spec:\n  sandboxName: d\n  task:\n    steps:\n    - {action: key, text: " + strings.Repeat("x", 300) + "}\n", 400, "spec.task.steps[0].text"},
		{"agent wait too long", "POST", "/api/v1/agents", "application/yaml", ag + "spec:\n  sandboxName: d\n  task:\n    steps:\n    - {action: wait, duration: 101}\n", 400, "spec.task.steps[0].duration"},
		{"agent hold too long", "POST", "/api/v1/agents", "application/yaml", ag + "spec:\n  sandboxName: d\n  task:\n    steps:\n    - {action: hold_key, text: shift, duration: 3600}\n", 400, "spec.task.steps[0].duration"},
		{"empty body", "POST", "/api/v1/sandboxes", "application/yaml", "", 400, ""},
		{"bad JSON", "POST", "/api/v1/sandboxes", "application/json", `{"apiVersion":`, 400, ""},
		{"JSON scalar", "POST", "/api/v1/sandboxes", "application/json", `[1]`, 400, ""},
		{"missing apiVersion", "POST", "/api/v1/sandboxes", "application/yaml", "kind: Sandbox\nmetadata: {name: desk}\n", 400, "apiVersion"},
		{"unknown apiVersion", "POST", "/api/v1/sandboxes", "application/yaml", "apiVersion: hvkube/v9\nkind: Sandbox\nmetadata: {name: desk}\n", 400, "apiVersion"},
		{"unknown kind", "POST", "/api/v1/sandboxes", "application/yaml", "apiVersion: hvkube/v1\nkind: Pod\nmetadata: {name: desk}\n", 400, "kind"},
		{"kind mismatch", "POST", "/api/v1/sandboxes", "application/yaml", ag + "spec: {sandboxName: x}\n", 400, "kind"},
		{"missing name", "POST", "/api/v1/sandboxes", "application/yaml", "apiVersion: hvkube/v1\nkind: Sandbox\nmetadata: {}\n", 400, "metadata.name"},
		{"name too long", "POST", "/api/v1/sandboxes", "application/yaml", "apiVersion: hvkube/v1\nkind: Sandbox\nmetadata: {name: " + strings.Repeat("x", 64) + "}\n", 400, "metadata.name"},
		{"name not DNS", "POST", "/api/v1/sandboxes", "application/yaml", "apiVersion: hvkube/v1\nkind: Sandbox\nmetadata: {name: my_desk}\n", 400, "metadata.name"},
		{"unknown top field", "POST", "/api/v1/sandboxes", "application/yaml", sb + "sepc: {}\n", 400, "sepc"},
		{"unknown nested field", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  display:\n    resolutoin: 1x1\n", 400, "spec.display.resolutoin"},
		{"wrong type string", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  resources:\n    cpu: two\n", 400, "spec.resources.cpu"},
		{"wrong type list", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  volumes: {name: x}\n", 400, "spec.volumes"},
		{"bad resolution", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  display:\n    resolution: 1920*1080\n", 400, "spec.display.resolution"},
		{"tiny resolution", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  display:\n    resolution: 10x10\n", 400, "spec.display.resolution"},
		{"bad protocol", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  display:\n    protocol: spice\n", 400, "spec.display.protocol"},
		{"bad port", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  display:\n    port: 70000\n", 400, "spec.display.port"},
		{"negative memory", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  resources:\n    memoryMB: -1\n", 400, "spec.resources.memoryMB"},
		{"relative hostPath", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  volumes:\n  - {name: w, hostPath: workflows, sandboxPath: /w}\n", 400, "spec.volumes[0].hostPath"},
		{"dotdot hostPath", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  volumes:\n  - {name: w, hostPath: 'C:\\data\\..\\Windows', sandboxPath: /w}\n", 400, "spec.volumes[0].hostPath"},
		{"duplicate volume", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  volumes:\n  - {name: w, hostPath: /a, sandboxPath: /w}\n  - {name: w, hostPath: /b, sandboxPath: /v}\n", 400, "spec.volumes[1].name"},
		{"empty startup", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  startup:\n  - {command: ''}\n", 400, "spec.startup[0].command"},
		{"bad health type", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  healthCheck: {type: ping}\n", 400, "spec.healthCheck.type"},
		{"process without name", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  healthCheck: {type: process}\n", 400, "spec.healthCheck.processName"},
		{"negative timeout", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  lifecycle: {timeoutMinutes: -5}\n", 400, "spec.lifecycle.timeoutMinutes"},
		{"bad label value", "POST", "/api/v1/sandboxes", "application/yaml", sb + "  labels: {app: 'a b'}\n", 400, "metadata.labels.app"},
		{"negative replicas", "POST", "/api/v1/sandboxpools", "application/yaml", pool("  replicas: -2\n  template: {spec: {}}\n"), 400, "spec.replicas"},
		{"minReady > replicas", "POST", "/api/v1/sandboxpools", "application/yaml", pool("  replicas: 1\n  minReady: 3\n  template: {spec: {}}\n"), 400, "spec.minReady"},
		{"bad warm tier", "POST", "/api/v1/sandboxpools", "application/yaml", pool("  replicas: 1\n  warmTier: frozen\n  template: {spec: {}}\n"), 400, "spec.warmTier"},
		{"bad maxAge", "POST", "/api/v1/sandboxpools", "application/yaml", pool("  replicas: 1\n  maxAge: forever\n  template: {spec: {}}\n"), 400, "spec.maxAge"},
		{"bad release policy", "POST", "/api/v1/sandboxpools", "application/yaml", pool("  replicas: 1\n  releasePolicy: keep\n  template: {spec: {}}\n"), 400, "spec.releasePolicy"},
		{"pool template field", "POST", "/api/v1/sandboxpools", "application/yaml", pool("  replicas: 1\n  template:\n    spec:\n      display: {resolution: wide}\n"), 400, "spec.template.spec.display.resolution"},
		{"agent without target", "POST", "/api/v1/agents", "application/yaml", ag + "spec: {type: mcp-agent}\n", 400, "spec.sandboxSelector"},
		{"agent bad type", "POST", "/api/v1/agents", "application/yaml", ag + "spec: {sandboxName: d, type: robot}\n", 400, "spec.type"},
		{"agent bad step", "POST", "/api/v1/agents", "application/yaml", ag + "spec:\n  sandboxName: d\n  type: workflow\n  task:\n    steps:\n    - {action: teleport}\n", 400, "spec.task.steps[0].action"},
		{"agent step coordinate", "POST", "/api/v1/agents", "application/yaml", ag + "spec:\n  sandboxName: d\n  task:\n    steps:\n    - {action: left_click, coordinate: [-1, 5]}\n", 400, "spec.task.steps[0].coordinate"},
		{"agent retries", "POST", "/api/v1/agents", "application/yaml", ag + "spec: {sandboxName: d, completion: {maxRetries: -1}}\n", 400, "spec.completion.maxRetries"},
		{"short form bad pool", "POST", "/api/v1/agents", "application/json", `{"name":"t","sandboxSelector":{"pool":"Bad Pool"}}`, 400, "spec.sandboxSelector.pool"},
		{"template without image", "POST", "/api/v1/templates", "application/yaml", tpl + "spec: {}\n", 400, "spec.qemu"},
		{"template relative disk", "POST", "/api/v1/templates", "application/yaml", tpl + "spec:\n  qemu: {disk: disk.qcow2}\n", 400, "spec.qemu.disk"},
		{"service bad type", "POST", "/api/v1/displayservices", "application/yaml", ds + "spec: {type: External}\n", 400, "spec.type"},
		{"service bad targetPort", "POST", "/api/v1/displayservices", "application/yaml", ds + "spec:\n  ports:\n  - {port: 5900, targetPort: any}\n", 400, "spec.ports[0].targetPort"},
		{"put name mismatch", "PUT", "/api/v1/sandboxes/other", "application/yaml", sb + "spec: {}\n", 400, "metadata.name"},
		{"scale negative", "PATCH", "/api/v1/sandboxpools/browser-workers/scale", "application/json", `{"replicas":-1}`, 400, "replicas"},
		{"scale below minReady", "PATCH", "/api/v1/sandboxpools/browser-workers/scale", "application/json", `{"replicas":1}`, 400, "replicas"},
		{"scale not a number", "PATCH", "/api/v1/sandboxpools/browser-workers/scale", "application/json", `{"replicas":"many"}`, 400, "replicas"},
		{"scale missing", "PATCH", "/api/v1/sandboxpools/browser-workers/scale", "application/json", `{}`, 400, "replicas"},
		{"scale unknown pool", "PATCH", "/api/v1/sandboxpools/nope/scale", "application/json", `{"replicas":1}`, 404, ""},
		{"bad selector", "GET", "/api/v1/sandboxes?labelSelector=a%20b%20c", "", "", 400, "labelSelector"},
		{"unknown resource", "GET", "/api/v1/widgets", "", "", 404, ""},
		{"unsupported media type", "POST", "/api/v1/sandboxes", "multipart/form-data", "x", 415, ""},
		{"body too large", "POST", "/api/v1/sandboxes", "application/yaml", sb + "spec:\n  startup:\n  - command: " + strings.Repeat("x", 70<<10) + "\n", 413, ""},
		{"stale resourceVersion", "PUT", "/api/v1/sandboxpools/browser-workers", "application/yaml", strings.Replace(poolYAML, "name: browser-workers\n", "name: browser-workers\n  resourceVersion: \"999\"\n", 1), 409, ""},
		{"events bad limit", "GET", "/api/v1/events?limit=-4", "", "", 400, "limit"},
	}
}

package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
	"github.com/hvkube/hvkube/internal/nodeca"
	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/testwait"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// TestWebhookOnKubernetes sends TestBadInput's objects straight to a real
// kube-apiserver, as kubectl apply would, with hvkube's admission webhook
// registered (WebhookConfig): each is refused naming the field the REST
// API names, and where the webhook refuses it, with the REST API's very
// text. A started agent's task cannot be changed there either. Nothing is
// stored.
func TestWebhookOnKubernetes(t *testing.T) {
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()

	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := New(Options{Store: st, ScopedKey: testKey})
	ca, err := nodeca.New(testKey.APICASeed())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hook := httptest.NewUnstartedServer(srv.AdmissionHandler())
	hook.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
	hook.StartTLS()
	t.Cleanup(hook.Close)

	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	hooks := dyn.Resource(schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"})
	cfg := &unstructured.Unstructured{Object: WebhookConfig(ns, hook.URL+WebhookPath, ca.PEM())}
	if _, err := hooks.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hooks.Delete(context.Background(), cfg.GetName(), metav1.DeleteOptions{}) })
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	create := func(obj map[string]any) error {
		u := &unstructured.Unstructured{Object: obj}
		m, err := mapper.RESTMapping(schema.GroupKind{Group: "hvkube.io", Kind: u.GetKind()}, "v1")
		if err != nil {
			return err
		}
		_, err = dyn.Resource(m.Resource).Namespace(ns).Create(ctx, u, metav1.CreateOptions{FieldValidation: "Strict"})
		return err
	}

	// The CRDs alone, with no webhook, refuse what their schema and CEL
	// rules say (deploy/crds, generated from internal/api's markers),
	// naming the field the REST API names.
	schemaRefuses := map[string]bool{}
	for _, name := range []string{"unknown top field", "unknown nested field", "wrong type string", "wrong type list",
		"name too long", "name not DNS", "bad label value", "bad protocol", "bad port", "negative memory",
		"duplicate volume", "bad health type", "process without name", "negative timeout", "negative replicas",
		"minReady > replicas", "bad warm tier", "bad release policy", "agent without target", "agent bad type",
		"agent retries", "service bad type", "bad resolution", "tiny resolution", "pool template field"} {
		schemaRefuses[name] = true
	}
	for i, tt := range badInputs() {
		obj, ok := objectOf(tt)
		if !ok || !schemaRefuses[tt.name] {
			continue
		}
		delete(schemaRefuses, tt.name)
		if !strings.HasPrefix(tt.field, "metadata.name") {
			obj["metadata"].(map[string]any)["name"] = fmt.Sprintf("schema-%d", i)
		}
		t.Run("schema/"+tt.name, func(t *testing.T) {
			err := create(obj)
			if err == nil {
				t.Fatalf("the CRD took it (the REST API refuses %s)", tt.field)
			}
			if msg := err.Error(); !namesField(msg, tt.field) {
				t.Errorf("refused without naming %s: %s", tt.field, msg)
			}
		})
	}
	for name := range schemaRefuses {
		t.Errorf("no object of TestBadInput named %q", name)
	}
	// A started agent keeps what it runs, by the CRD's transition rules.
	checkStartedAgent(t, ctx, dyn, ns, create, "started-schema")

	// The webhook takes effect a moment after it is registered.
	probe := map[string]any{"apiVersion": "hvkube.io/v1", "kind": "Sandbox", "metadata": map[string]any{"name": "probe"},
		"spec": map[string]any{"network": map[string]any{"mode": "none", "egress": map[string]any{"allow": []any{"example.com"}}}}}
	var refused error
	if !testwait.For(30*time.Second, func() bool {
		refused = create(probe)
		return refused != nil && strings.Contains(refused.Error(), "denied the request")
	}) {
		t.Fatalf("the webhook never refused: %v", refused)
	}

	rest := start(t, Options{})
	sent := 0
	for i, tt := range badInputs() {
		obj, ok := objectOf(tt)
		if !ok {
			continue
		}
		if !strings.HasPrefix(tt.field, "metadata.name") {
			obj["metadata"].(map[string]any)["name"] = fmt.Sprintf("bad-%d", i)
		}
		t.Run(tt.name, func(t *testing.T) {
			err := create(obj)
			if err == nil {
				t.Fatalf("the API server took it (the REST API refuses %s)", tt.field)
			}
			msg := err.Error()
			hooked := strings.Contains(msg, "denied the request")
			if !namesField(msg, tt.field) || hooked && !strings.Contains(msg, tt.field) {
				t.Errorf("refused without naming %s: %s", tt.field, msg)
			}
			if hooked {
				_, _, body := rest.do(t, tt.method, tt.path, tt.ctype, tt.body)
				var e struct{ Error string }
				json.Unmarshal(body, &e)
				if e.Error == "" || !strings.Contains(msg, e.Error) {
					t.Errorf("the webhook's text %q is not the REST API's %q", msg, e.Error)
				}
			}
		})
		sent++
	}
	t.Logf("%d of TestBadInput's objects sent straight to the API server", sent)
	if sent < 40 {
		t.Errorf("only %d of TestBadInput's objects sent", sent)
	}

	checkStartedAgent(t, ctx, dyn, ns, create, "started")

	// Nothing of the refused was stored.
	for _, plural := range []string{"sandboxes", "sandboxpools", "templates", "displayservices"} {
		l, err := dyn.Resource(schema.GroupVersionResource{Group: "hvkube.io", Version: "v1", Resource: plural}).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := meta.LenList(l); n != 0 {
			t.Errorf("%d %s stored", n, plural)
		}
	}

	// The webhook takes AdmissionReviews and nothing else.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.ClientConfig("127.0.0.1").RootCAs}}}
	resp, err := hc.Post(hook.URL+WebhookPath, "application/json", strings.NewReader(`{"kind":"Pod"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a body that is no review: %d", resp.StatusCode)
	}
}

// objectOf is tt's body as a custom resource, when tt creates an object
// of hvkube in its long form and the REST API refuses it for a field of
// the object (not for how it was sent).
func objectOf(tt badInput) (map[string]any, bool) {
	if tt.method != "POST" || tt.code != 400 || tt.field == "" || (tt.ctype != "application/yaml" && tt.ctype != "application/json") {
		return nil, false
	}
	switch tt.field {
	case "apiVersion", "kind", "[0].kind":
		return nil, false
	}
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(tt.body), &obj); err != nil {
		return nil, false // duplicate keys: the wire, not the object
	}
	if obj["apiVersion"] != "hvkube/v1" {
		return nil, false // the agent's short form is the REST API's own
	}
	kind, _ := obj["kind"].(string)
	if k, ok := api.LookupKind(kind); !ok || "/api/v1/"+k.Plural != tt.path {
		return nil, false
	}
	obj["apiVersion"] = "hvkube.io/v1"
	if obj["metadata"] == nil {
		obj["metadata"] = map[string]any{}
	}
	return jsonMap(obj), true
}

// jsonMap is v as JSON's types (yaml decodes numbers as int).
func jsonMap(v map[string]any) map[string]any {
	b, _ := json.Marshal(v)
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}

// namesField reports whether the API server's refusal msg names field:
// its own checks (a label's syntax, a duplicate list key) name the map
// or the list item rather than the key.
func namesField(msg, field string) bool {
	parent := field[:max(strings.LastIndex(field, "."), 0)]
	return strings.Contains(msg, field) || parent != "" && strings.Contains(msg, parent+":")
}

// checkStartedAgent creates an agent, marks it started, and checks that
// its task cannot change then.
func checkStartedAgent(t *testing.T, ctx context.Context, dyn dynamic.Interface, ns string, create func(map[string]any) error, name string) {
	t.Helper()
	agent := map[string]any{"apiVersion": "hvkube.io/v1", "kind": "Agent", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"sandboxName": "desk", "type": "workflow", "task": map[string]any{"steps": []any{map[string]any{"action": "wait", "duration": int64(1)}}}}}
	if err := create(agent); err != nil {
		t.Fatal(err)
	}
	agents := dyn.Resource(schema.GroupVersionResource{Group: "hvkube.io", Version: "v1", Resource: "agents"}).Namespace(ns)
	u, err := agents.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedField(u.Object, []any{map[string]any{"action": "wait", "duration": int64(2)}}, "spec", "task", "steps")
	if u, err = agents.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("changing a pending agent's task: %v", err)
	}
	unstructured.SetNestedField(u.Object, string(api.AgentRunning), "status", "phase")
	unstructured.SetNestedField(u.Object, int64(1), "status", "attempts")
	if u, err = agents.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedField(u.Object, []any{map[string]any{"action": "type", "text": "rm -rf /"}}, "spec", "task", "steps")
	if _, err := agents.Update(ctx, u, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.task") {
		t.Errorf("changing a started agent's task: %v, want refused naming spec.task", err)
	}
	u.Object["metadata"].(map[string]any)["labels"] = map[string]any{"seen": "yes"}
	unstructured.SetNestedField(u.Object, []any{map[string]any{"action": "wait", "duration": int64(2)}}, "spec", "task", "steps")
	if _, err := agents.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Errorf("labelling a started agent: %v", err)
	}
}

package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/secrets"
)

// secretValue is what the tests' Secret holds: it must show in no answer
// of the API, no event and no log, only in the desktop's session.
const secretValue = "hvk-s3cr3t-7f2c9d41"

const secretJSON = `{"apiVersion":"hvkube/v1","kind":"Secret","metadata":{"name":"keys"},"spec":{"stringData":{"API_KEY":"` + secretValue + `"},"data":{"OTHER":"b3RoZXItdmFsdWU="}}}`

// TestSecretsNeverLeave: a Secret's values go in and never come out of
// the API: not in the answer to its create or apply, a get, a list or a
// watch, and not to an agent's token; the store holds them sealed; the
// same manifest applied again changes nothing; bad input is a 400 that
// names the field and changes nothing.
func TestSecretsNeverLeave(t *testing.T) {
	ts := start(t, Options{Token: "admin", ScopedKey: testKey})
	code, _, body := ts.doAuth(t, "admin", "POST", "/api/v1/secrets", secretJSON)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	var got api.Secret
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Spec.Keys, ",") != "API_KEY,OTHER" {
		t.Errorf("keys = %v", got.Spec.Keys)
	}
	leaks := func(what string, b []byte) {
		t.Helper()
		for _, v := range []string{secretValue, "other-value", "b3RoZXItdmFsdWU", "v1:"} {
			if strings.Contains(string(b), v) {
				t.Errorf("%s shows %q: %.300s", what, v, b)
			}
		}
	}
	leaks("the create's answer", body)
	code, hdr, body := ts.doAuth(t, "admin", "PUT", "/api/v1/secrets/keys", secretJSON)
	if code != http.StatusOK || hdr.Get(ApplyResultHeader) != "unchanged" {
		t.Errorf("the same Secret applied again: %d %s %s", code, hdr.Get(ApplyResultHeader), body)
	}
	leaks("the apply's answer", body)
	for _, path := range []string{"/api/v1/secrets/keys", "/api/v1/secrets", "/api/v1/secrets?limit=1", "/api/v1/events"} {
		code, _, body := ts.doAuth(t, "admin", "GET", path, "")
		if code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
		leaks("GET "+path, body)
	}
	// A watch: the current Secret as ADDED, then a change.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/api/v1/secrets?watch=true", nil)
	req.Header.Set("Authorization", "Bearer admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	if !lines.Scan() {
		t.Fatal("the watch ended")
	}
	leaks("the watch's ADDED", lines.Bytes())
	if code, _, body := ts.doAuth(t, "admin", "PUT", "/api/v1/secrets/keys", strings.Replace(secretJSON, secretValue, secretValue+"-2", 1)); code != http.StatusOK {
		t.Fatalf("change: %d %s", code, body)
	}
	if !lines.Scan() {
		t.Fatal("the watch ended")
	}
	leaks("the watch's MODIFIED", lines.Bytes())

	// Stored sealed, and opened by the server's key.
	o, err := ts.st.Get(context.Background(), api.KindSecret, "keys")
	if err != nil {
		t.Fatal(err)
	}
	stored := o.(*api.Secret)
	raw, _ := json.Marshal(stored)
	if strings.Contains(string(raw), secretValue) || strings.Contains(string(raw), "other-value") {
		t.Errorf("the store holds the values in the clear: %s", raw)
	}
	s, _ := secrets.NewSealer(testKey.SecretSeed())
	if v, err := s.Open("keys", stored.Spec.Sealed); err != nil || string(v["API_KEY"]) != secretValue+"-2" {
		t.Errorf("the stored values: %v", err)
	}
	// An update without values keeps them.
	if code, _, body := ts.doAuth(t, "admin", "PUT", "/api/v1/secrets/keys", `{"apiVersion":"hvkube/v1","kind":"Secret","metadata":{"name":"keys","labels":{"team":"a"}},"spec":{}}`); code != http.StatusOK {
		t.Errorf("an update of the labels: %d %s", code, body)
	}
	if o, _ := ts.st.Get(context.Background(), api.KindSecret, "keys"); o.(*api.Secret).Spec.Sealed != stored.Spec.Sealed {
		t.Error("an update without values changed them")
	}

	// An agent's token reaches no Secret.
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "desk"
	api.Default(sb)
	if _, err := ts.st.Create(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	bindAgent(t, ts.st, "loop", "desk", 1)
	tok := attemptToken(t, ts.st, testKey, "loop")
	for _, path := range []string{"/api/v1/secrets", "/api/v1/secrets/keys"} {
		if code, _, body := ts.doAuth(t, tok, "GET", path, ""); code != http.StatusForbidden {
			t.Errorf("an agent's token: GET %s: %d %s", path, code, body)
		}
	}

	before := rvOf(t, ts.st)
	for _, c := range []struct{ body, field string }{
		{`{"apiVersion":"hvkube/v1","kind":"Secret","metadata":{"name":"bad"},"spec":{"stringData":{"not-a-name":"x"}}}`, "spec.stringData.not-a-name"},
		{`{"apiVersion":"hvkube/v1","kind":"Secret","metadata":{"name":"bad"},"spec":{"stringData":{"K":"a\u0000b"}}}`, "spec.stringData.K"},
		{`{"apiVersion":"hvkube/v1","kind":"Secret","metadata":{"name":"bad"},"spec":{}}`, "spec.stringData"},
		{`{"apiVersion":"hvkube/v1","kind":"Secret","metadata":{"name":"bad"},"spec":{"stringData":{"K":"` + strings.Repeat("x", api.MaxSecretValue+1) + `"}}}`, "spec.stringData.K"},
		{`{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"bad"},"spec":{"type":"mcp-agent","sandboxName":"desk","env":[{"name":"HVKUBE_TOKEN","value":"x"}]}}`, "spec.env[0].name"},
		{`{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"bad"},"spec":{"type":"mcp-agent","sandboxName":"desk","env":[{"name":"K","value":"x","valueFrom":{"secretKeyRef":{"name":"keys","key":"API_KEY"}}}]}}`, "spec.env[0].valueFrom"},
		{`{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"bad"},"spec":{"type":"mcp-agent","sandboxName":"desk","envFrom":[{}]}}`, "spec.envFrom[0].secretRef"},
		{`{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"bad"},"spec":{"env":[{"name":"A","value":"1"},{"name":"A","value":"2"}]}}`, "spec.env[1].name"},
	} {
		var kind api.TypeMeta
		json.Unmarshal([]byte(c.body), &kind)
		k, _ := api.LookupKind(kind.Kind)
		code, _, body := ts.doAuth(t, "admin", "POST", "/api/v1/"+k.Plural, c.body)
		if code != http.StatusBadRequest || !strings.Contains(string(body), c.field) {
			t.Errorf("%.80s: %d %s, want 400 naming %s", c.body, code, body, c.field)
		}
	}
	if after := rvOf(t, ts.st); after != before {
		t.Errorf("bad input changed the store (revision %d -> %d)", before, after)
	}
}

// TestSecretsNeedAKey: a server with no key keeps no Secrets.
func TestSecretsNeedAKey(t *testing.T) {
	ts := start(t, Options{Token: "admin"})
	if code, _, body := ts.doAuth(t, "admin", "POST", "/api/v1/secrets", secretJSON); code != http.StatusNotImplemented {
		t.Errorf("create with no key: %d %s", code, body)
	}
}

// TestWebhookRefusesSecretValues: a Secret written to the Kubernetes API
// with its values would store them in the clear: the admission webhook
// refuses it; one with values sealed by hvkube passes.
func TestWebhookRefusesSecretValues(t *testing.T) {
	srv := New(Options{ScopedKey: testKey})
	review := func(spec string) error {
		raw := []byte(`{"apiVersion":"hvkube.io/v1","kind":"Secret","metadata":{"name":"keys"},"spec":` + spec + `}`)
		return srv.review(&admissionv1.AdmissionRequest{Operation: admissionv1.Create,
			Kind: metav1.GroupVersionKind{Group: "hvkube.io", Version: "v1", Kind: "Secret"}, Object: runtime.RawExtension{Raw: raw}})
	}
	if err := review(`{"stringData":{"K":"v"}}`); api.FieldOf(err) != "spec.stringData" {
		t.Errorf("values written to Kubernetes: %v", err)
	}
	if err := review(`{"keys":["K"],"sealed":"v1:AAAA"}`); err != nil {
		t.Errorf("a sealed Secret: %v", err)
	}
}

// TestNodeGetsOnlyItsClaimsVariables: a node gets the variables of its
// own sandbox's claim by its running attempt, and nothing of another
// node's, another attempt's, or another identity's.
func TestNodeGetsOnlyItsClaimsVariables(t *testing.T) {
	ts := nodeServer(t)
	if code, _, body := ts.doAuth(t, "admin", "POST", "/api/v1/secrets", secretJSON); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	ctx := context.Background()
	for _, name := range []string{"loop1", "loop2"} {
		o, _ := ts.st.Get(ctx, api.KindAgent, name)
		a := o.(*api.Agent)
		a.Spec.Env = []api.EnvVar{{Name: "API_KEY", ValueFrom: &api.EnvVarSource{SecretKeyRef: &api.SecretKeySelector{Name: "keys", Key: "API_KEY"}}}}
		if _, _, err := ts.st.Update(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	idA := testKey.MintNodeIdentity("node-a", now, time.Hour)
	code, hdr, body := ts.doAuth(t, idA, "POST", "/api/v1/nodes/node-a/env", `{"sandbox":"desk","agent":"loop1","attempt":1}`)
	if code != http.StatusOK || !strings.Contains(string(body), "API_KEY="+secretValue) || hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("its own claim's variables: %d %s", code, body)
	}
	tok := attemptToken(t, ts.st, testKey, "loop1")
	for _, c := range []struct {
		name, tok, path, body string
		want                  int
	}{
		{"another node's sandbox", idA, "/api/v1/nodes/node-a/env", `{"sandbox":"spare"}`, http.StatusForbidden},
		{"another node's agent on its sandbox", idA, "/api/v1/nodes/node-a/env", `{"sandbox":"desk","agent":"loop2","attempt":2}`, http.StatusForbidden},
		{"as another node", idA, "/api/v1/nodes/node-b/env", `{"sandbox":"spare","agent":"loop2","attempt":2}`, http.StatusForbidden},
		{"an attempt not running", idA, "/api/v1/nodes/node-a/env", `{"sandbox":"desk","agent":"loop1","attempt":2}`, http.StatusConflict},
		{"an attempt started on no claim", idA, "/api/v1/nodes/node-a/env", `{"sandbox":"free","agent":"loop3","attempt":1}`, http.StatusForbidden},
		{"no sandbox", idA, "/api/v1/nodes/node-a/env", `{"agent":"loop1","attempt":1}`, http.StatusBadRequest},
		{"the server's token", "admin", "/api/v1/nodes/node-a/env", `{"sandbox":"desk","agent":"loop1","attempt":1}`, http.StatusUnauthorized},
		{"the agent's own token", tok, "/api/v1/nodes/node-a/env", `{"sandbox":"desk","agent":"loop1","attempt":1}`, http.StatusUnauthorized},
	} {
		code, _, body := ts.doAuth(t, c.tok, "POST", c.path, c.body)
		if code != c.want || strings.Contains(string(body), secretValue) {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}
}

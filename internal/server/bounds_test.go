package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

// TestBoundsThroughTheAPI: an object whose durations or counts are past
// their bounds, or whose YAML aliases expand far beyond the request, is
// refused with 400 naming the problem, and nothing is stored.
func TestBoundsThroughTheAPI(t *testing.T) {
	ts := start(t, Options{})
	if code, _, body := ts.do(t, "POST", "/api/v1/sandboxpools", "application/yaml", poolYAML); code != http.StatusCreated {
		t.Fatalf("create pool: %d %s", code, body)
	}
	var fan strings.Builder
	fan.WriteString("apiVersion: hvkube/v1\nkind: Agent\nmetadata: {name: fan}\nspec:\n  sandboxSelector: {pool: browser-workers}\n  task:\n    input:\n      s: &s " + strings.Repeat("x", 6<<10) + "\n      list:\n")
	for range 10000 {
		fan.WriteString("      - *s\n")
	}
	tests := []struct {
		name, method, path, ctype, body, field, detail string
	}{
		{"agent timeout", "POST", "/api/v1/agents", "application/json",
			`{"name":"slow","sandboxSelector":{"pool":"browser-workers"},"completion":{"timeoutMinutes":200000000}}`, "spec.completion.timeoutMinutes", "10080"},
		{"agent timeout in seconds", "PUT", "/api/v1/agents/slow", "application/json",
			`{"name":"slow","sandboxSelector":{"pool":"browser-workers"},"task":{"timeoutSeconds":9000000000}}`, "spec.task.timeoutSeconds", "604800"},
		{"agent ttl", "POST", "/api/v1/agents", "application/yaml",
			"name: kept\nsandboxSelector: {pool: browser-workers}\nttlSecondsAfterFinished: 9000000000000\n", "spec.ttlSecondsAfterFinished", "2592000"},
		{"sandbox lifetime", "POST", "/api/v1/sandboxes", "application/json",
			`{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"old"},"spec":{"lifecycle":{"timeoutMinutes":200000000}}}`, "spec.lifecycle.timeoutMinutes", "525600"},
		{"pool replicas", "PUT", "/api/v1/sandboxpools/browser-workers", "application/yaml",
			strings.Replace(poolYAML, "replicas: 5", "replicas: 1000000", 1), "spec.replicas", "10000"},
		{"scale", "PATCH", "/api/v1/sandboxpools/browser-workers/scale", "application/json", `{"replicas": 1000000}`, "replicas", "10000"},
		{"aliases", "POST", "/api/v1/agents", "application/yaml", fan.String(), "", "aliases expand"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := rvOf(t, ts.st)
			code, _, body := ts.do(t, tt.method, tt.path, tt.ctype, tt.body)
			var e struct {
				Error string `json:"error"`
				Field string `json:"field"`
			}
			json.Unmarshal(body, &e)
			if code != http.StatusBadRequest || e.Field != tt.field || !strings.Contains(e.Error, tt.detail) {
				t.Fatalf("%d %s; want 400 naming field %q and %q", code, body, tt.field, tt.detail)
			}
			if after := rvOf(t, ts.st); after != before {
				t.Fatalf("a refused request changed the store (revision %d -> %d)", before, after)
			}
		})
	}
	o, err := ts.st.Get(context.Background(), api.KindSandboxPool, "browser-workers")
	if err != nil {
		t.Fatal(err)
	}
	if p := o.(*api.SandboxPool); p.Metadata.Generation != 1 || p.Spec.Replicas != 5 {
		t.Fatalf("pool generation %d, replicas %d after refused changes", p.Metadata.Generation, p.Spec.Replicas)
	}
}

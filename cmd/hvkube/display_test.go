//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// TestDisplayServiceListener runs `hvkube serve` as users do: a
// DisplayService of type ClusterIP with a port gets a listener on
// loopback that serves only the display gateway, behind the token and
// Origin rules, and its status; the listener closes with the service. A
// LoadBalancer service on a server without a token is refused.
func TestDisplayServiceListener(t *testing.T) {
	t.Setenv("HVKUBE_TOKEN", "e2e-secret")
	p := startServe(t, t.TempDir(), nil, "--backend", "none")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	file := filepath.Join(t.TempDir(), "ds.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(`apiVersion: hvkube/v1
kind: DisplayService
metadata: {name: local}
spec:
  selector: {pool: web}
  type: ClusterIP
  ports: [{name: vnc, protocol: vnc, port: %d}]
  gateway: {enabled: true, auth: jwt}
`, port)), 0o644)
	mustHV(t, p, "apply", "-f", file)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	get := func(path string, hdr map[string]string) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(10 * time.Second)
	for get("/display/desk", nil) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s:\n%s", base, p.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.mu.Lock()
	opened := strings.Contains(p.logs.String(), "display listeners open")
	p.mu.Unlock()
	if !opened {
		t.Errorf("the server did not log the listener it opened")
	}
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	withOrigin := map[string]string{"Origin": "http://evil.example"}
	for k, v := range upgrade {
		withOrigin[k] = v
	}
	for _, tt := range []struct {
		path string
		hdr  map[string]string
		want int
	}{
		{"/display/desk", upgrade, http.StatusUnauthorized},
		{"/display/desk?token=eyJhbGciOiJIUzI1NiJ9.e30.AAAA", upgrade, http.StatusUnauthorized},
		{"/display/desk", withOrigin, http.StatusForbidden},
		{"/api/v1/sandboxes", map[string]string{"Authorization": "Bearer e2e-secret"}, http.StatusNotFound},
	} {
		if got := get(tt.path, tt.hdr); got != tt.want {
			t.Errorf("GET %s%s %v: %d, want %d", base, tt.path, tt.hdr, got, tt.want)
		}
	}

	var ds api.DisplayService
	for {
		json.Unmarshal([]byte(mustHV(t, p, "get", "ds", "local", "-o", "json")), &ds)
		if c := api.FindCondition(ds.Status.Conditions, "Ready"); c != nil {
			if c.Reason != "NoSandboxes" || ds.Status.ObservedGeneration != ds.Metadata.Generation {
				t.Fatalf("status %+v", ds.Status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status written: %+v", ds.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}

	mustHV(t, p, "delete", "ds", "local")
	for get("/display/desk", nil) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the listener outlived its DisplayService")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDisplayServiceNeedsToken: without a server token a LoadBalancer
// service is refused, with the reason in its status, and opens nothing.
func TestDisplayServiceNeedsToken(t *testing.T) {
	t.Setenv("HVKUBE_TOKEN", "")
	p := startServe(t, t.TempDir(), nil, "--backend", "none")
	mustHV(t, p, "apply", "-f", "../../internal/api/testdata/seed/displayservice.yaml")
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ds api.DisplayService
		json.Unmarshal([]byte(mustHV(t, p, "get", "ds", "browser-display", "-o", "json")), &ds)
		if c := api.FindCondition(ds.Status.Conditions, "Ready"); c != nil {
			if c.Status != api.ConditionFalse || c.Reason != "NoToken" || len(ds.Status.Endpoints) != 0 {
				t.Fatalf("status %+v", ds.Status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no status written")
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.mu.Lock()
	logs := p.logs.String()
	p.mu.Unlock()
	if strings.Contains(logs, "display listeners open") {
		t.Fatalf("a listener was opened:\n%s", logs)
	}
}

//go:build linux

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
)

// signupServer is the local site of the browser task: a sign-up form, and
// the sign-ups it has seen.
type signupServer struct {
	mu   sync.Mutex
	seen []string
}

func (s *signupServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch r.URL.Path {
	case "/form":
		fmt.Fprint(w, `<!doctype html><html><head><title>Sign up</title></head><body>
<form action="/signup"><label>Name <input name="name" autofocus></label><button>Sign up</button></form></body></html>`)
	case "/signup":
		s.mu.Lock()
		s.seen = append(s.seen, r.URL.RawQuery)
		s.mu.Unlock()
		fmt.Fprint(w, `<!doctype html><html><head><title>Signed up</title></head><body>Thanks</body></html>`)
	case "/signups":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		s.mu.Lock()
		fmt.Fprint(w, strings.Join(s.seen, "\n"))
		s.mu.Unlock()
	default:
		http.NotFound(w, r)
	}
}

// TestOSWorldTasksOnQEMU imports the five example OSWorld-style tasks
// (examples/osworld) with their steps and runs them end to end on pools of
// a linux-desktop and a browser-desktop template: setup, the steps typed
// into the desktop, and the evaluator's checks all pass, and the pool
// resets its sandbox between tasks (a later task checks that an earlier
// one's files are gone). A task imported without its steps fails its
// checks: it starts undone.
func TestOSWorldTasksOnQEMU(t *testing.T) {
	qemutest.RequireImage(t, "linux-desktop")
	qemutest.RequireImage(t, "browser-desktop")
	site := &signupServer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: site, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	p := startServe(t, t.TempDir(), nil)
	ctx := context.Background()
	c, err := client.New(p.url(), "")
	if err != nil {
		t.Fatal(err)
	}
	objects := filepath.Join(t.TempDir(), "pools.yaml")
	os.WriteFile(objects, []byte(fmt.Sprintf(`apiVersion: hvkube/v1
kind: Template
metadata: {name: desk}
spec:
  qemu: {image: linux-desktop}
---
apiVersion: hvkube/v1
kind: SandboxPool
metadata: {name: desk}
spec:
  replicas: 1
  template: {spec: {templateRef: desk}}
---
apiVersion: hvkube/v1
kind: Template
metadata: {name: web}
spec:
  qemu: {image: browser-desktop}
  resources: {memoryMB: 1536}
---
apiVersion: hvkube/v1
kind: SandboxPool
metadata: {name: web}
spec:
  replicas: 1
  template:
    spec:
      templateRef: web
      network: {egress: {allow: ["127.0.0.1:%d"]}}
`, port)), 0o600)
	mustHV(t, p, "apply", "-f", objects)
	mustHV(t, p, "wait", "template", "desk", "--for", "phase=Ready", "--timeout", "15m", "-q")

	examples := "../../examples/osworld"
	// run imports a task with its steps (none: "") and waits until its
	// agent ends, then deletes the agent; it returns the agent as it ended.
	run := func(t *testing.T, pool, task, steps string, extra ...string) *api.Agent {
		t.Helper()
		args := append([]string{"import", "osworld", "--pool", pool, "--apply"}, extra...)
		if steps != "" {
			args = append(args, "--steps", steps)
		}
		out := mustHV(t, p, append(args, task)...)
		name := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(out), "agent/"), " created")
		deadline := time.Now().Add(15 * time.Minute)
		for {
			o, err := c.Get(ctx, api.KindAgent, name)
			if err != nil {
				t.Fatalf("agent %s: %v", name, err)
			}
			a := o.(*api.Agent)
			if a.Status.Phase == api.AgentCompleted || a.Status.Phase == api.AgentFailed {
				if a.Status.Phase == api.AgentFailed {
					_, body := get(t, p.url()+"/api/v1/agents/"+name+"/logs", "")
					t.Logf("agent %s failed; its log:\n%s", name, body)
				}
				if _, err := c.Delete(ctx, api.KindAgent, name); err != nil {
					t.Fatal(err)
				}
				return a
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %s is still %s: %s", name, a.Status.Phase, a.Status.Message)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	failedStep := func(a *api.Agent) string {
		if a.Status.Result == nil {
			return a.Status.Message
		}
		for _, s := range a.Status.Result.Steps {
			if !s.OK {
				return s.Action + ": " + s.Error + " " + s.Output
			}
		}
		return a.Status.Message
	}

	// Without the steps that do it, a task starts undone: its checks fail.
	if a := run(t, "desk", filepath.Join(examples, "file-edit.json"), "", "--settle", "0"); a.Status.Phase != api.AgentFailed || !strings.Contains(failedStep(a), "assert") {
		t.Fatalf("file-edit without its steps: %s (%s), want a failed assert", a.Status.Phase, failedStep(a))
	}
	for _, task := range []string{"file-edit", "terminal-command", "settings-change", "rename-file"} {
		t.Run(task, func(t *testing.T) {
			a := run(t, "desk", filepath.Join(examples, task+".json"), filepath.Join(examples, task+".steps.yaml"), "--settle", "30")
			if a.Status.Phase != api.AgentCompleted {
				t.Fatalf("%s: %s: %s", task, a.Status.Phase, failedStep(a))
			}
		})
	}

	t.Run("browser-form", func(t *testing.T) {
		mustHV(t, p, "wait", "template", "web", "--for", "phase=Ready", "--timeout", "30m", "-q")
		// The task names the site's port; this one is the test's.
		b, err := os.ReadFile(filepath.Join(examples, "browser-form.json"))
		if err != nil {
			t.Fatal(err)
		}
		task := filepath.Join(t.TempDir(), "browser-form.json")
		os.WriteFile(task, []byte(strings.ReplaceAll(string(b), "10.0.2.2:8765", fmt.Sprintf("10.0.2.2:%d", port))), 0o600)
		a := run(t, "web", task, filepath.Join(examples, "browser-form.steps.yaml"), "--settle", "60")
		if a.Status.Phase != api.AgentCompleted {
			t.Fatalf("browser-form: %s: %s", a.Status.Phase, failedStep(a))
		}
		site.mu.Lock()
		defer site.mu.Unlock()
		if len(site.seen) != 1 || site.seen[0] != "name=hvkube" {
			t.Errorf("the site saw sign-ups %q, want one of hvkube", site.seen)
		}
	})
}

//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
)

// requireAutomationClients finds what the examples' clients run on: Node.js
// and npm for examples/playwright, Debian's python3-selenium for
// examples/selenium. A missing one is a skip, but under make test (CI),
// whose deps install them, a failure.
func requireAutomationClients(t *testing.T) (node, python string) {
	t.Helper()
	missing := func(what string, err error) {
		t.Helper()
		msg := fmt.Sprintf("%s is missing (%v): make deps installs it", what, err)
		if os.Getenv("CI") != "" || os.Getenv("HVKUBE_REQUIRE_BROWSER_IMAGE") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("Node.js (node)", err)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		missing("npm", err)
	}
	// Debian's Python, whose selenium the host command user can import
	// (a python3 earlier in PATH may be a user's own).
	python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import selenium").CombinedOutput(); err != nil {
		missing("python3-selenium", fmt.Errorf("%v: %s", err, out))
	}
	return node, python
}

// automationExamples copies examples/playwright (with its node_modules:
// the one make test installs there, else a fresh npm ci) and
// examples/selenium into a directory the host commands' user (nobody) can
// read, as a user installs them beside a server.
func automationExamples(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hvkube-automation-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"playwright/package.json", "playwright/package-lock.json", "playwright/form.mjs", "selenium/form.py"} {
		b, err := os.ReadFile(filepath.Join("../../examples", f))
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pw := filepath.Join(dir, "playwright")
	if _, err := os.Stat("../../examples/playwright/node_modules/playwright-core/package.json"); err == nil {
		if out, err := exec.Command("cp", "-R", "../../examples/playwright/node_modules", pw).CombinedOutput(); err != nil {
			t.Fatalf("copy node_modules: %v: %s", err, out)
		}
	} else {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = pw
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in a copy of examples/playwright: %v: %s", err, out)
		}
	}
	// Readable by every user, whatever the umask was.
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		switch {
		case err != nil || fi.Mode()&os.ModeSymlink != 0:
			return err
		case d.IsDir() || fi.Mode()&0o100 != 0:
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// formServer is the page the examples fill in: a form (name, city) on /
// whose submission /submit answers in #result, and remembers.
type formServer struct {
	mu   sync.Mutex
	sent []string // "name from city", in order
}

func (f *formServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	switch {
	case r.URL.Path == "/" && r.Method == http.MethodGet:
		io.WriteString(w, `<!doctype html><title>hvkube form</title>
<form method="post" action="/submit">
<label>Name <input id="name" name="name"></label>
<label>City <input id="city" name="city"></label>
<button id="send" type="submit">Send</button>
</form>`)
	case r.URL.Path == "/submit" && r.Method == http.MethodPost:
		got := r.PostFormValue("name") + " from " + r.PostFormValue("city")
		f.mu.Lock()
		f.sent = append(f.sent, got)
		f.mu.Unlock()
		fmt.Fprintf(w, `<!doctype html><title>thanks</title><p id="result">Thanks, %s</p>`, html.EscapeString(got))
	default:
		http.NotFound(w, r)
	}
}

func (f *formServer) submitted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sent...)
}

// TestAutomationAgentsOnQEMU runs the examples as users would: a server
// that allows host commands, a browser-desktop sandbox whose egress rules
// let it reach a form served on the host, examples/playwright as a
// playwright agent and examples/selenium as a selenium agent, both on the
// host as nobody, driving the sandbox's browser through the API's port
// forwards with their attempts' tokens. Both fill the form and complete;
// the form's server saw both. A token of an agent that does not hold the
// sandbox reaches none of its ports (403); the holder's does.
func TestAutomationAgentsOnQEMU(t *testing.T) {
	qemutest.RequireImage(t, "browser-desktop")
	if os.Geteuid() != 0 {
		t.Skip("needs root: host commands are allowed only to a server that can switch users")
	}
	nodeBin, python := requireAutomationClients(t)
	examples := automationExamples(t)

	form := &formServer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: form, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	formPort := ln.Addr().(*net.TCPAddr).Port

	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600)
	t.Setenv("HVKUBE_TOKEN", "s3cret")
	p := startServe(t, t.TempDir(), nil, "--token-file", tokenFile, "--allow-host-commands")
	ctx := context.Background()
	c, err := client.New(p.url(), "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	apply := func(yaml string) {
		t.Helper()
		f := filepath.Join(t.TempDir(), "objects.yaml")
		os.WriteFile(f, []byte(yaml), 0o600)
		mustHV(t, p, "apply", "-f", f)
	}
	apply(fmt.Sprintf(`apiVersion: hvkube/v1
kind: Template
metadata: {name: browser}
spec:
  qemu: {image: browser-desktop}
  resources: {memoryMB: 1536}
---
apiVersion: hvkube/v1
kind: Sandbox
metadata: {name: desk}
spec:
  templateRef: browser
  network: {egress: {allow: ["127.0.0.1:%d"]}}
`, formPort))
	// A cold Chromium start under emulation takes minutes on a busy host.
	mustHV(t, p, "wait", "template", "browser", "--for", "phase=Ready", "--timeout", "25m", "-q")
	mustHV(t, p, "wait", "sandbox", "desk", "--for", "phase=Running", "--timeout", "10m", "-q")

	agent := func(name string) *api.Agent {
		t.Helper()
		o, err := c.Get(ctx, api.KindAgent, name)
		if err != nil {
			t.Fatalf("get agent %s: %v", name, err)
		}
		return o.(*api.Agent)
	}
	logOf := func(name string) string {
		_, body := get(t, p.url()+"/api/v1/agents/"+name+"/logs", "s3cret")
		return body
	}
	waitDone := func(name string) *api.Agent {
		t.Helper()
		deadline := time.Now().Add(15 * time.Minute)
		for {
			a := agent(name)
			switch a.Status.Phase {
			case api.AgentCompleted:
				return a
			case api.AgentFailed:
				t.Fatalf("agent %s failed: %s: %s\nits log:\n%s", name, a.Status.Reason, a.Status.Message, logOf(name))
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %s is still %s: %s\nits log:\n%s", name, a.Status.Phase, a.Status.Message, logOf(name))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	waitFree := func() {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			o, err := c.Get(ctx, api.KindSandbox, "desk")
			if err == nil && o.(*api.Sandbox).Status.CurrentAgent == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox desk is not released: %v", err)
			}
		}
	}
	// holding runs an mcp-agent on desk and returns its attempt's token
	// once it holds the sandbox. The token lives as long as the attempt's
	// timeout, longer than the test: a token past it is not an agent's
	// token any more (401), which is not what the test looks at.
	holding := func(name string) string {
		t.Helper()
		apply(fmt.Sprintf(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: %s}
spec:
  sandboxName: desk
  type: mcp-agent
  completion: {timeoutMinutes: 60}
`, name))
		tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		var tok *client.AgentToken
		for {
			tok, err = c.AgentToken(tctx, name)
			if err == nil || !errors.Is(err, api.ErrConflict) || tctx.Err() != nil {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("agent token of %s: %v", name, err)
		}
		for deadline := time.Now().Add(5 * time.Minute); agent(name).Status.Phase != api.AgentRunning; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("agent %s does not run: %+v", name, agent(name).Status)
			}
		}
		return tok.Token
	}
	version := p.url() + "/api/v1/sandboxes/desk/ports/9222/json/version"
	complete := func(name, token string) {
		t.Helper()
		ac, err := client.New(p.url(), token)
		if err != nil {
			t.Fatal(err)
		}
		if err := ac.Complete(ctx, name, client.CompleteRequest{Output: json.RawMessage(`"done"`)}); err != nil {
			t.Fatalf("complete %s: %v", name, err)
		}
		waitFree()
	}

	// An agent's token reaches its sandbox's DevTools through the forward.
	first := holding("first-holder")
	if code, body := get(t, version, first); code != http.StatusOK || !strings.Contains(body, "/api/v1/sandboxes/desk/ports/9222/devtools/browser/") {
		t.Fatalf("GET /json/version with the holder's token: %d %s", code, body)
	}
	complete("first-holder", first)

	run := func(name, typ string, command []string, who, city string) {
		t.Helper()
		argv, _ := json.Marshal(command)
		apply(fmt.Sprintf(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: %s}
spec:
  sandboxName: desk
  type: %s
  task:
    command: %s
    input: {url: "http://10.0.2.2:%d/", name: %q, city: %q}
  completion: {timeoutMinutes: 12}
  output: {screenshots: true}
`, name, typ, argv, formPort, who, city))
		a := waitDone(name)
		res := a.Status.Result
		var out struct {
			Result string `json:"result"`
		}
		if res == nil || res.ExitCode == nil || *res.ExitCode != 0 || json.Unmarshal(res.Output, &out) != nil || out.Result != "Thanks, "+who+" from "+city {
			t.Errorf("agent %s's result: %+v (output %s)\nits log:\n%s", name, res, res.Output, logOf(name))
		}
		if len(res.Screenshots) == 0 {
			t.Errorf("agent %s kept no screenshot", name)
		}
		log := logOf(name)
		for _, want := range []string{"HVKUBE_CDP_URL=" + p.url() + "/api/v1/sandboxes/desk/ports/9222", "as nobody"} {
			if !strings.Contains(log, want) {
				t.Errorf("agent %s's log lacks %q:\n%s", name, want, log)
			}
		}
		waitFree()
	}
	run("playwright-form", "playwright", []string{nodeBin, filepath.Join(examples, "playwright/form.mjs")}, "Ada Lovelace", "London")
	run("selenium-form", "selenium", []string{python, filepath.Join(examples, "selenium/form.py")}, "Grace Hopper", "Arlington")
	if got, want := form.submitted(), []string{"Ada Lovelace from London", "Grace Hopper from Arlington"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the form received %q, want %q", got, want)
	}

	// While another agent holds the sandbox, the first holder's token
	// reaches none of its ports; the new holder's does.
	second := holding("second-holder")
	for _, port := range []string{"9222/json/version", "9515/status"} {
		url := p.url() + "/api/v1/sandboxes/desk/ports/" + port
		if code, body := get(t, url, first); code != http.StatusForbidden {
			t.Errorf("GET ports/%s with another agent's token: %d %s, want 403", port, code, body)
		}
		if code, body := get(t, url, second); code != http.StatusOK {
			t.Errorf("GET ports/%s with the holder's token: %d %s, want 200", port, code, body)
		}
	}
	complete("second-holder", second)
}

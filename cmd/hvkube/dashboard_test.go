//go:build linux

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
	"github.com/hvkube/hvkube/internal/web/webtest"
)

// TestDashboardOnQEMU drives the dashboard in headless Chromium against
// `hvkube serve` with a real desktop, with a token set: the sandbox page
// takes a screenshot, pauses, resumes and resets the sandbox; its terminal
// tab runs a shell in the guest; the live view
// shows the desktop (a canvas that is not blank), view-only until the page
// takes control, and a live-view link shows it without the server's token;
// and an agent's question is answered from the page.
func TestDashboardOnQEMU(t *testing.T) {
	qemutest.RequireImage(t, "linux-desktop")
	browser := webtest.Require(t)
	const token = "dashboard-s3cret"
	env := []string{"HVKUBE_TOKEN=" + token}
	p := startServe(t, t.TempDir(), env)
	cli := func(args ...string) {
		t.Helper()
		if out, err := hvEnv(p, env, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	cli("apply", "-f", "../../examples/template.yaml")
	cli("wait", "template", "linux-desktop", "--for", "phase=Ready", "--timeout", "10m")
	cli("apply", "-f", "../../examples/sandbox.yaml")
	cli("wait", "sandbox", "browser-agent-1", "--for", "phase=Running", "--timeout", "5m")

	cfg := webtest.Config{URL: p.url(), Token: token, Chromium: browser, Sandbox: "browser-agent-1", LongTimeoutMS: 300_000, Control: true}
	webtest.MustRun(t, "sandbox", cfg, 15*time.Minute)

	t.Run("terminal", func(t *testing.T) {
		webtest.MustRun(t, "terminal", cfg, 10*time.Minute)
	})

	t.Run("live view", func(t *testing.T) {
		webtest.MustRun(t, "live", cfg, 15*time.Minute)

		// The link hvkube console prints: a display token, no API token.
		var tok struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(apiCall(t, p, token, "POST", "/api/v1/sandboxes/browser-agent-1/display/token", ""), &tok); err != nil {
			t.Fatal(err)
		}
		link := cfg
		link.Token, link.DisplayToken = "", tok.Token
		webtest.MustRun(t, "link", link, 15*time.Minute)
	})

	t.Run("answer a human request", func(t *testing.T) {
		apiCall(t, p, token, "POST", "/api/v1/agents", `{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"helper"},"spec":{"sandboxName":"browser-agent-1","type":"mcp-agent","completion":{"type":"mcp-done"}}}`)
		cli("wait", "agent", "helper", "--for", "phase=Running", "--timeout", "5m")
		apiCall(t, p, token, "POST", "/api/v1/agents/helper/hitl", `{"question":"Which account should I use?"}`)
		cfg := cfg
		cfg.Agent, cfg.Question, cfg.Answer = "helper", "Which account should I use?", "the blue one"
		webtest.MustRun(t, "hitl", cfg, 5*time.Minute)
		var a api.Agent
		if err := json.Unmarshal(apiCall(t, p, token, "GET", "/api/v1/agents/helper", ""), &a); err != nil {
			t.Fatal(err)
		}
		if hr := a.Status.HumanRequest; hr.Pending() || hr.Answer != cfg.Answer || hr.AnsweredBy != "Test Person" {
			t.Fatalf("after answering on the page the request is %+v", hr)
		}
	})
}

// hvEnv runs the CLI against the server with extra environment.
func hvEnv(p *proc, env []string, args ...string) (string, error) {
	cmd := exec.Command(binary, append([]string{"--server", p.url()}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// apiCall sends one API request with the token and returns the body,
// failing the test on an error status.
func apiCall(t *testing.T, p *proc, token, method, path, body string) []byte {
	t.Helper()
	code, b := apiDo(t, p, token, method, path, body)
	if code >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, code, b)
	}
	return b
}

func apiDo(t *testing.T, p *proc, token, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, p.url()+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

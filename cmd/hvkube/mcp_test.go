//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
	"github.com/hvkube/hvkube/internal/mcptools"
)

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// mcpHTTP connects the SDK's client to the server's /mcp.
func mcpHTTP(t *testing.T, url, token, rev string) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "hvkube-test", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{token}}, MaxRetries: -1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: rev})
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// mcpStdio runs `hvkube mcp` as a desktop client would and connects to it.
func mcpStdio(t *testing.T, env []string, rev string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(binary, "mcp")
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "hvkube-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: rev})
	if err != nil {
		t.Fatalf("hvkube mcp: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	return res
}

func mustCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res := call(t, cs, tool, args)
	if res.IsError {
		t.Fatalf("%s %v: tool error %s", tool, args, text(res))
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// shot returns the decoded image of a screenshot or zoom result.
func shot(t *testing.T, res *mcp.CallToolResult) image.Image {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("want one image, got %d contents: %s", len(res.Content), text(res))
	}
	ic, ok := res.Content[0].(*mcp.ImageContent)
	if !ok || ic.MIMEType != "image/png" {
		t.Fatalf("want PNG image content, got %T %+v", res.Content[0], res.Content[0])
	}
	img, err := png.Decode(bytes.NewReader(ic.Data))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return img
}

func position(t *testing.T, cs *mcp.ClientSession, args map[string]any) []int {
	t.Helper()
	var out struct {
		Coordinate []int `json:"coordinate"`
	}
	res := mustCall(t, cs, "cursor_position", args)
	if err := json.Unmarshal([]byte(text(res)), &out); err != nil {
		t.Fatalf("cursor_position: %q: %v", text(res), err)
	}
	return out.Coordinate
}

// TestMCPOnQEMU drives a real desktop through MCP: over HTTP in both
// protocol revisions and over `hvkube mcp` on stdio, with the server's
// token and an agent's scoped token; an mcp-agent runs until complete_task;
// a sandbox is acquired from a pool and released. One pool sandbox serves
// the whole test.
func TestMCPOnQEMU(t *testing.T) {
	qemutest.RequireImage(t, "linux-desktop")
	dir := t.TempDir()
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600)
	t.Setenv("HVKUBE_TOKEN", "s3cret")
	p := startServe(t, dir, nil, "--token-file", tokenFile)
	ctx := context.Background()
	c, err := client.New(p.url(), "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	mustHV(t, p, "apply", "-f", "../../examples/template.yaml")
	mustHV(t, p, "wait", "template", "linux-desktop", "--for", "phase=Ready", "--timeout", "10m", "-q")
	objs := filepath.Join(t.TempDir(), "objs.yaml")
	os.WriteFile(objs, []byte(poolYAML("mcp", 1, "")+`---
apiVersion: hvkube/v1
kind: Agent
metadata: {name: mcp-task}
spec:
  sandboxSelector: {pool: mcp}
  type: mcp-agent
  completion: {type: mcp-done, timeoutMinutes: 15}
`), 0o600)
	mustHV(t, p, "apply", "-f", objs)

	// The agent loop's view: a token for its agent, printed by the CLI.
	env := strings.Fields(mustHV(t, p, "agent", "token", "mcp-task", "--timeout", "5m"))
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	sandbox, scoped := vars["HVKUBE_SANDBOX"], vars["HVKUBE_TOKEN"]
	if sandbox == "" || !strings.HasPrefix(scoped, "hvks2.") || vars["HVKUBE_MCP_URL"] != p.url()+"/mcp" {
		t.Fatalf("agent token printed %q", env)
	}
	waitRunning := func(agent string) {
		for i := 0; ; i++ {
			o, err := c.Get(ctx, api.KindAgent, agent)
			if err == nil && o.(*api.Agent).Status.Phase == api.AgentRunning {
				return
			}
			if i > 1200 {
				t.Fatalf("agent %s is not running: %v\n%s", agent, err, p.logs)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitRunning("mcp-task")

	t.Run("Tokens", func(t *testing.T) {
		for _, tok := range []string{"", "wrong"} {
			if _, err := mcpHTTP(t, p.url(), tok, ""); err == nil || !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
				t.Errorf("token %q: %v, want 401", tok, err)
			}
		}
	})

	t.Run("HTTPScopedStateless", func(t *testing.T) {
		cs, err := mcpHTTP(t, p.url(), scoped, "2026-07-28")
		if err != nil {
			t.Fatal(err)
		}
		if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" || cs.ID() != "" {
			t.Errorf("revision %s, session %q", v, cs.ID())
		}
		if b := shot(t, mustCall(t, cs, "screenshot", nil)).Bounds(); b.Dx() != 1280 || b.Dy() != 800 {
			t.Errorf("screenshot %v, want 1280x800", b)
		}
		if b := shot(t, mustCall(t, cs, "screenshot", map[string]any{"width": 640})).Bounds(); b.Dx() != 640 || b.Dy() != 400 {
			t.Errorf("screenshot at width 640: %v", b)
		}
		// Click the terminal, type a command, run it.
		mustCall(t, cs, "left_click", map[string]any{"coordinate": []int{400, 300}})
		mustCall(t, cs, "type", map[string]any{"text": "echo typed-over-mcp > /tmp/mcp"})
		mustCall(t, cs, "key", map[string]any{"text": "Return"})
		got := ""
		for i := 0; i < 50 && got != "typed-over-mcp\n"; i++ {
			res, err := c.Exec(ctx, sandbox, "cat", []string{"/tmp/mcp"}, "")
			if err == nil {
				got = res.Stdout
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got != "typed-over-mcp\n" {
			t.Errorf("typed text did not reach the terminal: %q", got)
		}
		// Coordinates in a smaller space map to the desktop and back.
		mustCall(t, cs, "mouse_move", map[string]any{"coordinate": []int{320, 200}, "width": 640})
		// The point maps to a desktop pixel under it: 640 or 641.
		if got := position(t, cs, nil); len(got) != 2 || got[0] < 640 || got[0] > 641 || got[1] < 400 || got[1] > 401 {
			t.Errorf("cursor_position after a move to 320,200 of 640 wide: %v, want [640 400] or [641 401]", got)
		}
		if got := position(t, cs, map[string]any{"width": 640}); fmt.Sprint(got) != "[320 200]" {
			t.Errorf("cursor_position at width 640: %v", got)
		}
		if b := shot(t, mustCall(t, cs, "zoom", map[string]any{"region": []int{0, 0, 100, 50}, "width": 640})).Bounds(); b.Dx() != 200 || b.Dy() != 100 {
			t.Errorf("zoom of 100x50 at width 640: %v, want 200x100 desktop pixels", b)
		}
		for _, tt := range []struct {
			tool string
			args map[string]any
			want string
		}{
			{"left_click", map[string]any{"coordinate": []int{1280, 10}}, "coordinate"},
			{"left_click", map[string]any{"coordinate": []int{700, 10}, "width": 640}, "coordinate"},
			{"key", map[string]any{"text": "ctrl+hyperdrive"}, "text"},
			{"screenshot", map[string]any{"sandbox": "someone-else"}, "forbidden"},
			{"type", map[string]any{"sandbox": "someone-else", "text": "x"}, "forbidden"},
			{"acquire_sandbox", map[string]any{"pool": "mcp"}, "forbidden"},
		} {
			res := call(t, cs, tt.tool, tt.args)
			if !res.IsError || !strings.Contains(text(res), tt.want) {
				t.Errorf("%s %v: IsError %v %q, want an error about %s", tt.tool, tt.args, res.IsError, text(res), tt.want)
			}
		}
	})

	t.Run("HTTPSessions", func(t *testing.T) {
		cs, err := mcpHTTP(t, p.url(), "s3cret", "2025-11-25")
		if err != nil {
			t.Fatal(err)
		}
		if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" || cs.ID() == "" {
			t.Errorf("revision %s, session %q", v, cs.ID())
		}
		if !strings.Contains(text(mustCall(t, cs, "list_sandboxes", nil)), `"`+sandbox+`"`) {
			t.Error("list_sandboxes does not list the pool's sandbox")
		}
		if b := shot(t, mustCall(t, cs, "screenshot", map[string]any{"sandbox": sandbox})).Bounds(); b.Dx() != 1280 {
			t.Errorf("screenshot %v", b)
		}
		if res := call(t, cs, "screenshot", nil); !res.IsError || !strings.Contains(text(res), "sandbox") {
			t.Errorf("a screenshot of no sandbox with the server's token: %q", text(res))
		}
	})

	t.Run("StdioCompletesTheAgent", func(t *testing.T) {
		stdEnv := []string{"HVKUBE_SERVER=" + p.url(), "HVKUBE_TOKEN=" + scoped, "HVKUBE_SANDBOX=" + sandbox, "HVKUBE_AGENT=mcp-task"}
		old := mcpStdio(t, stdEnv, "2025-11-25")
		if v := old.InitializeResult().ProtocolVersion; v != "2025-11-25" {
			t.Errorf("stdio revision %s", v)
		}
		mustCall(t, old, "mouse_move", map[string]any{"coordinate": []int{100, 120}})
		cs := mcpStdio(t, stdEnv, "")
		if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
			t.Errorf("stdio revision %s", v)
		}
		tools, err := cs.ListTools(ctx, nil)
		if err != nil || len(tools.Tools) != len(mcptools.ToolNames) {
			t.Fatalf("tools: %v (%d, want %d)", err, len(tools.Tools), len(mcptools.ToolNames))
		}
		if got := position(t, cs, nil); fmt.Sprint(got) != "[100 120]" {
			t.Errorf("cursor_position over stdio: %v", got)
		}
		if b := shot(t, mustCall(t, cs, "screenshot", map[string]any{"width": 1024})).Bounds(); b.Dx() != 1024 || b.Dy() != 640 {
			t.Errorf("screenshot over stdio at width 1024: %v", b)
		}
		mustCall(t, cs, "key", map[string]any{"text": "ctrl+l"})
		if res := call(t, cs, "screenshot", map[string]any{"sandbox": "someone-else"}); !res.IsError || !strings.Contains(text(res), "forbidden") {
			t.Errorf("stdio, other sandbox: %q", text(res))
		}
		// A question to a person, answered through the API as the dashboard does.
		go func() {
			for i := 0; i < 300; i++ {
				hr, err := c.HumanRequest(ctx, "mcp-task", 0)
				if err == nil && hr.Pending() {
					body, _ := json.Marshal(map[string]string{"id": hr.ID, "answer": "go ahead", "by": "tester"})
					if _, err := c.Do(ctx, http.MethodPost, "/api/v1/hitl/mcp-task/respond", body, "application/json", nil); err != nil {
						t.Errorf("respond: %v", err)
					}
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Error("the agent asked nothing")
		}()
		if got := text(mustCall(t, cs, "ask_human", map[string]any{"question": "May I finish?", "timeout_seconds": 60})); !strings.Contains(got, "go ahead") {
			t.Errorf("ask_human over stdio: %s", got)
		}
		mustCall(t, cs, "complete_task", map[string]any{"output": map[string]any{"typed": "typed-over-mcp"}})
		o, err := c.Get(ctx, api.KindAgent, "mcp-task")
		if err != nil {
			t.Fatal(err)
		}
		a := o.(*api.Agent)
		if a.Status.Phase != api.AgentCompleted || a.Status.Result == nil || string(a.Status.Result.Output) != `{"typed":"typed-over-mcp"}` {
			t.Fatalf("agent after complete_task: %s %+v", a.Status.Phase, a.Status.Result)
		}
		// Its token reaches the sandbox no more once the attempt is over.
		if res := call(t, cs, "screenshot", nil); !res.IsError || !strings.Contains(text(res), "its token no longer acts") {
			t.Fatalf("the token of a completed agent still reaches its sandbox: %q", text(res))
		}
	})

	t.Run("AcquireAndRelease", func(t *testing.T) {
		cs, err := mcpHTTP(t, p.url(), "s3cret", "")
		if err != nil {
			t.Fatal(err)
		}
		res := mustCall(t, cs, "acquire_sandbox", map[string]any{"pool": "mcp", "timeout_seconds": 240})
		var lease struct{ Sandbox, Agent string }
		json.Unmarshal([]byte(text(res)), &lease)
		if lease.Sandbox != sandbox || lease.Agent == "" {
			t.Fatalf("acquire_sandbox: %s", text(res))
		}
		shot(t, mustCall(t, cs, "screenshot", map[string]any{"sandbox": lease.Sandbox}))
		mustCall(t, cs, "release_sandbox", map[string]any{"sandbox": lease.Sandbox})
		for i := 0; ; i++ {
			if _, err := c.Get(ctx, api.KindAgent, lease.Agent); err != nil {
				break
			}
			if i > 600 {
				t.Fatalf("the lease agent %s was not deleted", lease.Agent)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

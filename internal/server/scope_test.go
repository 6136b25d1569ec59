package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/store"
)

// recordingDesk is a fake of the node's sandbox operations for these
// tests: it records what reached it (and the take-over an input carried)
// and does nothing else, so that what the server lets through is what is
// under test.
type recordingDesk struct {
	Sandboxes
	mu    sync.Mutex
	calls []string
	ctl   []string // display.ControlFrom of each input
}

func (d *recordingDesk) note(op string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, op)
	return nil
}

func (d *recordingDesk) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.calls...)
}

func (d *recordingDesk) Pause(context.Context, string) error  { return d.note("pause") }
func (d *recordingDesk) Resume(context.Context, string) error { return d.note("resume") }
func (d *recordingDesk) Save(context.Context, string) error   { return d.note("save") }
func (d *recordingDesk) Reset(context.Context, string) error  { return d.note("reset") }
func (d *recordingDesk) Exec(context.Context, string, backend.ExecRequest) (backend.ExecResult, error) {
	return backend.ExecResult{}, d.note("exec")
}
func (d *recordingDesk) ClipboardGet(context.Context, string) (string, error) {
	return "", d.note("clipboard-get")
}
func (d *recordingDesk) ClipboardSet(context.Context, string, string) error {
	return d.note("clipboard-set")
}
func (d *recordingDesk) Screenshot(ctx context.Context, name string, opts backend.ScreenshotOptions) ([]byte, string, error) {
	return []byte("image"), "image/png", d.note("screen")
}
func (d *recordingDesk) ScreenSize(context.Context, string) (int, int, error) { return 1280, 800, nil }
func (d *recordingDesk) SendInput(ctx context.Context, _ string, _ []backend.InputEvent) error {
	d.mu.Lock()
	d.ctl = append(d.ctl, display.ControlFrom(ctx))
	d.mu.Unlock()
	return d.note("input")
}
func (d *recordingDesk) DialDisplay(context.Context, string) (io.ReadWriteCloser, error) {
	return nil, fmt.Errorf("the recording desk has no display: %w", api.ErrUnsupported)
}
func (d *recordingDesk) TypeText(context.Context, string, string) error { return d.note("type") }
func (d *recordingDesk) CursorPosition(context.Context, string) (int, int, error) {
	return 0, 0, nil
}

// scopeServer is a server with the token "admin" (or none) over a
// recording desk, a sandbox "desk" of pool web and agent "loop1" running
// its first attempt on it.
func scopeServer(t *testing.T, token string) (*testServer, *recordingDesk) {
	t.Helper()
	d := &recordingDesk{}
	ts := start(t, Options{Token: token, ScopedKey: testKey, Sandboxes: d, Actions: display.NewActions(d)})
	for _, name := range []string{"desk", "spare"} {
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = name
		sb.Metadata.Labels = map[string]string{"pool": "web"}
		api.Default(sb)
		if _, err := ts.st.Create(context.Background(), sb); err != nil {
			t.Fatal(err)
		}
	}
	bindAgent(t, ts.st, "loop1", "desk", 1)
	return ts, d
}

// TestScopedTokenIsNarrow: an agent's token reaches its own agent and,
// while its attempt holds it, its sandbox; it never writes an object,
// mints a token, or touches anything else. The first request is the
// reproduced attack: the agent's loop replaced its own spec with a host
// command, and the retry ran it as the server's user.
func TestScopedTokenIsNarrow(t *testing.T) {
	for _, token := range []string{"admin", ""} {
		name := "server token"
		if token == "" {
			name = "no server token"
		}
		t.Run(name, func(t *testing.T) {
			ts, desk := scopeServer(t, token)
			tok := attemptToken(t, ts.st, testKey, "loop1")
			before := rvOf(t, ts.st)
			evil := `{"kind":"Agent","apiVersion":"hvkube/v1","metadata":{"name":"loop1"},"spec":{"sandboxSelector":{"pool":"web"},"type":"custom","task":{"command":["/bin/sh","-c","id > /tmp/x"]}}}`
			for _, tt := range []struct{ method, path, body string }{
				{"PUT", "/api/v1/agents/loop1", evil},
				{"POST", "/api/v1/agents", strings.Replace(evil, "loop1", "loop2", 1)},
				{"DELETE", "/api/v1/agents/loop1", ""},
				{"POST", "/api/v1/agents/loop1/token", ""},
				{"POST", "/api/v1/sandboxes", `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"mine"},"spec":{}}`},
				{"PUT", "/api/v1/sandboxes/desk", `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"desk","labels":{"pool":"x"}},"spec":{}}`},
				{"DELETE", "/api/v1/sandboxes/desk", ""},
				{"POST", "/api/v1/sandboxes/desk/pause", ""},
				{"POST", "/api/v1/sandboxes/desk/resume", ""},
				{"POST", "/api/v1/sandboxes/desk/save", ""},
				{"POST", "/api/v1/sandboxes/desk/reset", ""},
				{"POST", "/api/v1/sandboxes/desk/snapshot", `{"template":"stolen"}`},
				{"POST", "/api/v1/sandboxes/desk/fork", `{"count":3}`},
				{"POST", "/api/v1/sandboxes/desk/control", `{"action":"take","holder":"bot"}`},
				{"GET", "/api/v1/sandboxes/desk/logs", ""},
				{"GET", "/api/v1/sandboxes/spare", ""},
				{"POST", "/api/v1/sandboxes/spare/input", `{"action":"left_click","coordinate":[1,1]}`},
				{"POST", "/api/v1/sandboxes/spare/browser", `{"type":"tool_use","id":"t1","name":"navigate","toolset_name":"browser","input":{"url":"https://example.com/"}}`},
				{"GET", "/api/v1/sandboxes/spare/ports/9222/json/version", ""},
				{"POST", "/api/v1/sandboxes/spare/ports/4444/session", `{"capabilities":{}}`},
				{"POST", "/api/v1/sandboxes/spare/osworld/execute", `{"command":["id"]}`},
				{"GET", "/api/v1/sandboxes/spare/files?path=/etc/passwd", ""},
				{"GET", "/api/v1/sandboxes/spare/accessibility", ""},
				{"DELETE", "/api/v1/sandboxes/desk/files?path=/tmp/x", ""},
				{"GET", "/api/v1/agents", ""},
				{"GET", "/api/v1/sandboxes", ""},
				{"GET", "/api/v1/events", ""},
				{"GET", "/api/v1/nodes", ""},
				{"GET", "/api/v1/nodes/n1", ""},
				{"GET", "/api/v1/hitl", ""},
				{"PATCH", "/api/v1/sandboxpools/web/scale", `{"replicas":100}`},
				{"POST", "/api/v1/hitl/loop1/respond", `{"id":"x","answer":"yes"}`},
			} {
				code, _, body := ts.doAuth(t, tok, tt.method, tt.path, tt.body)
				if code != http.StatusForbidden {
					t.Errorf("%s %s with the agent's token: %d %s, want 403", tt.method, tt.path, code, body)
				}
			}
			if after := rvOf(t, ts.st); after != before {
				t.Fatalf("refused requests changed the store (revision %d -> %d)", before, after)
			}
			if a := ts.agent(t, "loop1"); a.Spec.Type != "mcp-agent" || len(a.Spec.Task.Command) != 0 {
				t.Fatalf("the agent's spec changed: %+v", a.Spec)
			}
			if calls := desk.seen(); len(calls) != 0 {
				t.Fatalf("refused requests reached the sandbox: %v", calls)
			}
			// What it may do.
			for _, tt := range []struct{ method, path, body string }{
				{"GET", "/api/v1/agents/loop1", ""},
				{"GET", "/api/v1/agents/loop1/result", ""},
				{"GET", "/api/v1/sandboxes/desk", ""},
				{"GET", "/api/v1/sandboxes/desk/screen", ""},
				{"POST", "/api/v1/sandboxes/desk/input", `{"action":"left_click","coordinate":[1,1]}`},
				{"POST", "/api/v1/sandboxes/desk/exec", `{"command":"true"}`},
				{"POST", "/api/v1/sandboxes/desk/clipboard", `{"text":"hi"}`},
				{"POST", "/api/v1/sandboxes/desk/display/token", ""},
			} {
				if code, _, body := ts.doAuth(t, tok, tt.method, tt.path, tt.body); code != http.StatusOK {
					t.Errorf("%s %s with the agent's token: %d %s, want 200", tt.method, tt.path, code, body)
				}
			}
			// It never sends input on a person's behalf.
			if code := ts.doControl(t, tok, "POST", "/api/v1/sandboxes/desk/input", `{"action":"left_click","coordinate":[1,1]}`, testKey.ControlKey("desk", "x")); code != http.StatusForbidden {
				t.Errorf("input with %s from the agent's token: %d, want 403", api.ControlHeader, code)
			}
			if code, _, body := ts.doAuth(t, tok, "POST", "/api/v1/agents/loop1/hitl", `{"question":"ok?"}`); code != http.StatusCreated {
				t.Errorf("ask a person: %d %s", code, body)
			}
			if code, _, body := ts.doAuth(t, tok, "GET", "/api/v1/agents/loop1/hitl", ""); code != http.StatusOK {
				t.Errorf("read its question: %d %s", code, body)
			}
			if code, _, body := ts.doAuth(t, tok, "POST", "/api/v1/agents/loop1/complete", `{"success":false}`); code != http.StatusOK {
				t.Fatalf("complete: %d %s", code, body)
			}
			// The attempt is over: the token no longer acts.
			for _, tt := range []struct{ method, path, body string }{
				{"GET", "/api/v1/sandboxes/desk/screen", ""},
				{"POST", "/api/v1/sandboxes/desk/input", `{"action":"left_click","coordinate":[1,1]}`},
				{"POST", "/api/v1/sandboxes/desk/browser", `{"type":"tool_use","id":"t1","name":"screenshot","toolset_name":"browser","input":{}}`},
				{"POST", "/api/v1/agents/loop1/complete", `{}`},
				{"POST", "/api/v1/agents/loop1/hitl", `{"question":"again?"}`},
			} {
				if code, _, body := ts.doAuth(t, tok, tt.method, tt.path, tt.body); code != http.StatusForbidden {
					t.Errorf("after the attempt, %s %s: %d %s, want 403", tt.method, tt.path, code, body)
				}
			}
		})
	}
}

// TestScopedTokenBoundToAttempt: a token names one attempt of one agent
// (by UID): a token of attempt 1 does not act for attempt 2, and a deleted
// agent's token reaches nothing of an agent re-created under its name.
func TestScopedTokenBoundToAttempt(t *testing.T) {
	ts, _ := scopeServer(t, "admin")
	first := attemptToken(t, ts.st, testKey, "loop1")
	bindAgent(t, ts.st, "loop1", "desk", 2) // the retry, on the same sandbox
	second := attemptToken(t, ts.st, testKey, "loop1")
	for _, tt := range []struct {
		tok, method, path, body string
		want                    int
	}{
		{first, "POST", "/api/v1/agents/loop1/complete", `{}`, http.StatusForbidden},
		{first, "GET", "/api/v1/sandboxes/desk/screen", "", http.StatusForbidden},
		{first, "GET", "/api/v1/agents/loop1", "", http.StatusForbidden},
		{second, "GET", "/api/v1/sandboxes/desk/screen", "", http.StatusOK},
		{second, "POST", "/api/v1/agents/loop1/complete", `{}`, http.StatusOK},
	} {
		if code, _, body := ts.doAuth(t, tt.tok, tt.method, tt.path, tt.body); code != tt.want {
			t.Errorf("%s %s: %d %s, want %d", tt.method, tt.path, code, body, tt.want)
		}
	}

	// Deleted and re-created under the same name: another agent.
	if _, _, err := ts.st.Delete(context.Background(), api.KindAgent, "loop1", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	code, _, body := ts.doAuth(t, second, "GET", "/api/v1/agents/loop1", "")
	if code != http.StatusForbidden || !strings.Contains(string(body), "no longer exists") {
		t.Fatalf("a deleted agent's token: %d %s", code, body)
	}
	bindAgent(t, ts.st, "loop1", "desk", 2)
	for _, tt := range []struct{ method, path, body string }{
		{"GET", "/api/v1/agents/loop1", ""},
		{"GET", "/api/v1/sandboxes/desk", ""},
		{"POST", "/api/v1/agents/loop1/complete", `{}`},
	} {
		code, _, body := ts.doAuth(t, second, tt.method, tt.path, tt.body)
		if code != http.StatusForbidden || !strings.Contains(string(body), "was deleted") {
			t.Errorf("the old agent's token on the new agent, %s %s: %d %s", tt.method, tt.path, code, body)
		}
	}
}

// TestScopedDisplayTokenEndsWithAttempt: a display token an agent mints
// carries its attempt: once the attempt lets the sandbox go, the token
// opens no view (today it watched the next agent's desktop for up to an
// hour), and it never outlives the agent's own token.
func TestScopedDisplayTokenEndsWithAttempt(t *testing.T) {
	ts, _ := scopeServer(t, "admin")
	o, _ := ts.st.Get(context.Background(), api.KindAgent, "loop1")
	short := testKey.Mint(authtoken.ForAttempt(o.(*api.Agent), 1), time.Now(), 90*time.Second)
	code, _, body := ts.doAuth(t, short, "POST", "/api/v1/sandboxes/desk/display/token", `{"ttlSeconds":3600}`)
	if code != http.StatusOK {
		t.Fatalf("mint: %d %s", code, body)
	}
	var out DisplayTokenResponse
	json.Unmarshal(body, &out)
	c, err := testKey.VerifyDisplay(out.Token, time.Now())
	if err != nil || c.Agent != "loop1" || c.Attempt != 1 || c.AgentUID == "" || c.ExpiresAt-c.IssuedAt > 90 {
		t.Fatalf("display token %+v %v: want bound to attempt 1 and at most 90 s", c, err)
	}
	path := "/api/v1/sandboxes/desk/display?token=" + out.Token
	// The recording desk has no display to dial: a view that passes the
	// checks gets 501, one refused 403.
	if code, msg := upgrade(t, ts.URL, path, nil); code != http.StatusNotImplemented {
		t.Fatalf("while the attempt holds the sandbox: %d %s", code, msg)
	}
	bindAgent(t, ts.st, "next", "desk", 1) // the sandbox serves another agent now
	if code, msg := upgrade(t, ts.URL, path, nil); code != http.StatusForbidden {
		t.Fatalf("after the sandbox went to another agent: %d %s, want 403", code, msg)
	}
	if code, msg := upgrade(t, ts.URL, "/api/v1/sandboxes/desk/display", map[string]string{"Authorization": "Bearer " + short}); code != http.StatusForbidden {
		t.Fatalf("the agent's own token on the display afterwards: %d %s, want 403", code, msg)
	}
}

// TestRunningAgentSpecIsFixed: once an agent has started, what it runs
// cannot change, whoever asks (409 naming the field); labels can.
func TestRunningAgentSpecIsFixed(t *testing.T) {
	ts, _ := scopeServer(t, "admin")
	put := func(spec string) (int, errorBody) {
		t.Helper()
		code, _, body := ts.doAuth(t, "admin", "PUT", "/api/v1/agents/job", `{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"job","labels":{"v":"2"}},"spec":`+spec+`}`)
		var e errorBody
		json.Unmarshal(body, &e)
		return code, e
	}
	base := `{"sandboxName":"spare","type":"workflow","task":{"steps":[{"action":"wait","duration":1}]}}`
	if code, e := put(base); code != http.StatusCreated {
		t.Fatalf("create: %d %+v", code, e)
	}
	// Pending: anything may change.
	base = `{"sandboxName":"spare","type":"workflow","task":{"steps":[{"action":"wait","duration":2}]}}`
	if code, e := put(base); code != http.StatusOK {
		t.Fatalf("change while pending: %d %+v", code, e)
	}
	bindAgent(t, ts.st, "job", "spare", 1)
	before := ts.agent(t, "job")
	for _, tt := range []struct{ spec, field string }{
		{`{"sandboxName":"spare","type":"custom","task":{"command":["/bin/true"]}}`, "spec.type"},
		{`{"sandboxName":"spare","type":"workflow","task":{"steps":[{"action":"wait","duration":3}]}}`, "spec.task"},
		{`{"sandboxName":"spare","type":"workflow","task":{"steps":[{"action":"wait","duration":2}]},"completion":{"maxRetries":5}}`, "spec.completion"},
		{`{"sandboxName":"desk","type":"workflow","task":{"steps":[{"action":"wait","duration":2}]}}`, "spec.sandboxName"},
		{`{"sandboxSelector":{"pool":"web"},"type":"workflow","task":{"steps":[{"action":"wait","duration":2}]}}`, "spec.sandboxSelector"},
	} {
		code, e := put(tt.spec)
		if code != http.StatusConflict || e.Field != tt.field {
			t.Errorf("change %s of a running agent: %d %+v, want 409 naming %s", tt.field, code, e, tt.field)
		}
	}
	if after := ts.agent(t, "job"); after.Metadata.ResourceVersion != before.Metadata.ResourceVersion {
		t.Fatalf("a refused change was written")
	}
	// The same spec with other labels goes through.
	if code, e := put(base); code != http.StatusOK {
		t.Fatalf("labels of a running agent: %d %+v", code, e)
	}
	// Through the store too (whoever asks).
	a := ts.agent(t, "job")
	a.Spec.Type = "custom"
	if _, _, err := store.Apply(context.Background(), ts.st, a); statusOf(err) != http.StatusConflict {
		t.Fatalf("store apply of a new type: %v", err)
	}
}

// TestTakeOverHolds: while a person holds a sandbox, its agent's token
// cannot act on it: the take-over's key is not in the sandbox object the
// agent reads, and the agent's token is refused input (with or without
// the take-over's id), exec, clipboard, reset, pause, save and delete.
func TestTakeOverHolds(t *testing.T) {
	ts, desk := scopeServer(t, "admin")
	tok := attemptToken(t, ts.st, testKey, "loop1")
	code, _, body := ts.doAuth(t, "admin", "POST", "/api/v1/sandboxes/desk/control", `{"action":"take","holder":"ana","agent":"loop1"}`)
	var took ControlResponse
	if err := json.Unmarshal(body, &took); code != http.StatusOK || err != nil || took.Key == "" || took.Control == nil {
		t.Fatalf("take: %d %s", code, body)
	}
	_, _, sb := ts.doAuth(t, tok, "GET", "/api/v1/sandboxes/desk", "")
	if strings.Contains(string(sb), took.Key) {
		t.Fatalf("the take-over's key is in the sandbox the agent reads: %s", sb)
	}
	input := `{"action":"left_click","coordinate":[1,1]}`
	for _, tt := range []struct {
		method, path, body, control string
		want                        int
	}{
		{"POST", "/api/v1/sandboxes/desk/input", input, "", http.StatusConflict},
		{"POST", "/api/v1/sandboxes/desk/input", input, took.Control.ID, http.StatusConflict},
		{"POST", "/api/v1/sandboxes/desk/input", input, took.Key, http.StatusConflict},
		{"POST", "/api/v1/sandboxes/desk/exec", `{"command":"true"}`, "", http.StatusConflict},
		{"POST", "/api/v1/sandboxes/desk/clipboard", `{"text":"x"}`, "", http.StatusConflict},
		{"GET", "/api/v1/sandboxes/desk/clipboard", "", "", http.StatusConflict},
		{"POST", "/api/v1/sandboxes/desk/browser", `{"type":"tool_use","id":"t1","name":"screenshot","toolset_name":"browser","input":{}}`, "", http.StatusConflict},
		{"GET", "/api/v1/sandboxes/desk/ports/9222/json/version", "", "", http.StatusConflict},
		{"POST", "/api/v1/sandboxes/desk/ports/4444/session", `{"capabilities":{}}`, "", http.StatusConflict},
		{"POST", "/api/v1/sandboxes/desk/osworld/execute", `{"command":["id"]}`, "", http.StatusConflict},
		{"GET", "/api/v1/sandboxes/desk/files?path=/etc/hostname", "", "", http.StatusConflict},
		{"POST", "/api/v1/sandboxes/desk/reset", "", "", http.StatusForbidden},
		{"POST", "/api/v1/sandboxes/desk/pause", "", "", http.StatusForbidden},
		{"POST", "/api/v1/sandboxes/desk/save", "", "", http.StatusForbidden},
		{"DELETE", "/api/v1/sandboxes/desk", "", "", http.StatusForbidden},
		{"POST", "/api/v1/sandboxes/desk/display/token", `{"control":"` + took.Key + `"}`, "", http.StatusForbidden},
	} {
		if code := ts.doControl(t, tok, tt.method, tt.path, tt.body, tt.control); code != tt.want {
			t.Errorf("%s %s (control %q) with the agent's token while ana holds it: %d, want %d", tt.method, tt.path, tt.control, code, tt.want)
		}
	}
	if calls := desk.seen(); len(calls) != 0 {
		t.Fatalf("the agent's requests reached the held sandbox: %v", calls)
	}
	// The agent still sees the screen and may finish its task.
	if code, _, body := ts.doAuth(t, tok, "GET", "/api/v1/sandboxes/desk/screen", ""); code != http.StatusOK {
		t.Fatalf("screen while held: %d %s", code, body)
	}
	// The person's own input: with the key, as theirs; the id alone is
	// what anyone reads and is refused.
	for _, tt := range []struct {
		control string
		want    int
	}{{took.Control.ID, http.StatusConflict}, {took.Key, http.StatusOK}} {
		if code := ts.doControl(t, "admin", "POST", "/api/v1/sandboxes/desk/input", input, tt.control); code != tt.want {
			t.Errorf("the person's input with %q: %d, want %d", tt.control, code, tt.want)
		}
	}
	desk.mu.Lock()
	defer desk.mu.Unlock()
	if len(desk.ctl) == 0 || desk.ctl[len(desk.ctl)-1] != took.Control.ID {
		t.Fatalf("the person's input carried take-overs %v, want %s", desk.ctl, took.Control.ID)
	}
}

// TestMCPSessionShare: an agent's token opens at most its share of MCP
// sessions; the server's token still gets one when it has (today one
// agent's token could open all of them and lock everyone out).
func TestMCPSessionShare(t *testing.T) {
	ts, _ := scopeServer(t, "admin")
	tok := attemptToken(t, ts.st, testKey, "loop1")
	for i := range MaxMCPSessionsAgent {
		if _, err := mcpConnect(t, ts.URL, tok, "2025-11-25"); err != nil {
			t.Fatalf("session %d of the agent's token: %v", i+1, err)
		}
	}
	_, err := mcpConnect(t, ts.URL, tok, "2025-11-25")
	if err == nil || !strings.Contains(err.Error(), "Service Unavailable") {
		t.Fatalf("session %d of the agent's token: %v, want 503", MaxMCPSessionsAgent+1, err)
	}
	if _, err := mcpConnect(t, ts.URL, "admin", "2025-11-25"); err != nil {
		t.Fatalf("the server's token after the agent used its share: %v", err)
	}
	// The stateless revision keeps no session and is not counted.
	if _, err := mcpConnect(t, ts.URL, tok, "2026-07-28"); err != nil {
		t.Fatalf("stateless with the agent's token: %v", err)
	}
}

// doControl sends a request with token and, when set, the take-over key
// or id control in X-Hvkube-Control, and returns the status.
func (ts *testServer) doControl(t *testing.T, token, method, path, body, control string) int {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if control != "" {
		req.Header.Set(api.ControlHeader, control)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

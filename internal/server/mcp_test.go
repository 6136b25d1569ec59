package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/testwait"
)

// bearer adds a token to every request.
type bearer struct {
	token  string
	header http.Header
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	for k, v := range b.header {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

func mcpConnect(t *testing.T, url, token, version string) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: bearer{token: token}}, MaxRetries: -1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	return res
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPOverHTTP drives /mcp of a real server (SQLite store, no VM
// backend) with the SDK's client in both protocol revisions: tokens, the
// Origin guard, the tool list, scoped tokens and completing an mcp-agent.
func TestMCPOverHTTP(t *testing.T) {
	key := authtoken.Key("0123456789abcdef0123456789abcdef")
	ts := start(t, Options{Token: "s3cret", ScopedKey: key})
	ctx := context.Background()
	for _, y := range []string{
		`{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"mine"},"spec":{}}`,
		`{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"other"},"spec":{}}`,
		`{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"task"},"spec":{"type":"mcp-agent","sandboxName":"mine","completion":{"type":"mcp-done"}}}`,
	} {
		req, _ := http.NewRequest("POST", ts.URL+"/api/v1/"+map[bool]string{true: "agents", false: "sandboxes"}[strings.Contains(y, `"Agent"`)], strings.NewReader(y))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %v %v", y, err, resp.Status)
		}
		resp.Body.Close()
	}
	// Bind and start the agent as the scheduler and the node would.
	now := time.Now()
	if _, err := reconcile.UpdateStatus(ctx, ts.st, api.KindAgent, "task", func(a *api.Agent) bool {
		a.Status.Phase, a.Status.Sandbox, a.Status.Attempts, a.Status.StartedAt = api.AgentRunning, "mine", 1, &now
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := reconcile.UpdateStatus(ctx, ts.st, api.KindSandbox, "mine", func(s *api.Sandbox) bool {
		s.Status.CurrentAgent = "task"
		return true
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("Tokens", func(t *testing.T) {
		for _, tok := range []string{"", "wrong", key.Mint(authtoken.ForAttempt(ts.agent(t, "task"), 1), now.Add(-2*time.Hour), time.Hour)} {
			for _, rev := range []string{"2026-07-28", "2025-11-25"} {
				if _, err := mcpConnect(t, ts.URL, tok, rev); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
					t.Errorf("token %q, %s: connect answered %v, want 401", tok, rev, err)
				}
			}
		}
		code, _, body := ts.do(t, "POST", "/mcp", "application/json", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		if code != http.StatusUnauthorized {
			t.Errorf("no token: %d %s", code, body)
		}
	})

	t.Run("Origin", func(t *testing.T) {
		for _, tt := range []struct {
			origin string
			code   int
		}{{"https://evil.example", http.StatusForbidden}, {"", http.StatusOK}, {ts.URL, http.StatusOK}} {
			req, _ := http.NewRequest("POST", ts.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
			req.Header.Set("Mcp-Method", "server/discover")
			req.Header.Set("Authorization", "Bearer s3cret")
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Errorf("Origin %q: %d, want %d: %s", tt.origin, resp.StatusCode, tt.code, b)
			}
		}
	})

	want := []string{"accessibility", "acquire_sandbox", "ask_human", "browser_back", "browser_click", "browser_navigate", "browser_snapshot", "browser_tabs",
		"browser_type", "complete_task", "computer", "cursor_position", "double_click", "hold_key", "key",
		"left_click", "left_click_drag", "left_mouse_down", "left_mouse_up", "list_sandboxes", "middle_click", "mouse_move",
		"release_sandbox", "right_click", "screenshot", "scroll", "triple_click", "type", "wait", "zoom"}
	for _, rev := range []string{"2026-07-28", "2025-11-25"} {
		t.Run("Revision"+rev, func(t *testing.T) {
			cs, err := mcpConnect(t, ts.URL, "s3cret", rev)
			if err != nil {
				t.Fatal(err)
			}
			if got := cs.InitializeResult().ProtocolVersion; got != rev {
				t.Errorf("protocol version %s, want %s", got, rev)
			}
			// The stateless revision has no session; the older one does.
			if hasID := cs.ID() != ""; hasID != (rev == "2025-11-25") {
				t.Errorf("session id %q in revision %s", cs.ID(), rev)
			}
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range tools.Tools {
				names = append(names, tl.Name)
				if tl.Description == "" {
					t.Errorf("%s has no description", tl.Name)
				}
			}
			slices.Sort(names)
			if !slices.Equal(names, want) {
				t.Errorf("tools %v\nwant %v", names, want)
			}
			res := callTool(t, cs, "list_sandboxes", nil)
			if res.IsError || !strings.Contains(toolText(res), `"mine"`) || !strings.Contains(toolText(res), `"other"`) {
				t.Errorf("list_sandboxes: %s", toolText(res))
			}
			// Bad input is a tool error naming the field, not a protocol error.
			for _, tt := range []struct {
				tool string
				args map[string]any
				want string
			}{
				{"left_click", map[string]any{"coordinate": []int{1, 2}}, "sandbox"},
				{"left_click", map[string]any{"sandbox": "Not A Name"}, "sandbox"},
				{"left_click", map[string]any{"sandbox": "mine", "coordinate": []int{1}}, "coordinate"},
				{"scroll", map[string]any{"sandbox": "mine", "scroll_direction": "inward"}, "scroll_direction"},
				{"screenshot", map[string]any{"sandbox": "ghost"}, "not found"},
				{"screenshot", map[string]any{"sandbox": "mine", "colour": true}, "colour"},
				{"acquire_sandbox", map[string]any{"pool": "nope"}, "not found"},
				{"ask_human", map[string]any{"sandbox": "mine", "question": " "}, "question"},
			} {
				res := callTool(t, cs, tt.tool, tt.args)
				if !res.IsError || !strings.Contains(toolText(res), tt.want) {
					t.Errorf("%s %v: IsError %v, %q; want an error about %s", tt.tool, tt.args, res.IsError, toolText(res), tt.want)
				}
			}
		})
	}

	t.Run("ScopedToken", func(t *testing.T) {
		code, _, body := ts.do(t, "POST", "/api/v1/agents/task/token", "", "")
		if code != http.StatusUnauthorized {
			t.Fatalf("token without auth: %d %s", code, body)
		}
		req, _ := http.NewRequest("POST", ts.URL+"/api/v1/agents/task/token", nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var tok AgentTokenResponse
		json.NewDecoder(resp.Body).Decode(&tok)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || tok.Sandbox != "mine" || tok.Agent != "task" || tok.MCP != ts.URL+"/mcp" || !authtoken.Is(tok.Token) {
			t.Fatalf("token: %d %+v", resp.StatusCode, tok)
		}
		if d := time.Until(tok.ExpiresAt); d < 29*time.Minute || d > 31*time.Minute {
			t.Errorf("token expires in %s, want the attempt's deadline (30m)", d)
		}
		for _, rev := range []string{"2026-07-28", "2025-11-25"} {
			cs, err := mcpConnect(t, ts.URL, tok.Token, rev)
			if err != nil {
				t.Fatal(err)
			}
			for _, tt := range []struct {
				tool string
				args map[string]any
			}{
				{"screenshot", map[string]any{"sandbox": "other"}},
				{"left_click", map[string]any{"sandbox": "other", "coordinate": []int{1, 1}}},
				{"complete_task", map[string]any{"sandbox": "other"}},
				{"release_sandbox", map[string]any{"sandbox": "other"}},
				{"acquire_sandbox", map[string]any{"pool": "any"}},
			} {
				res := callTool(t, cs, tt.tool, tt.args)
				if !res.IsError || !strings.Contains(toolText(res), "forbidden") {
					t.Errorf("%s %s with a token of sandbox mine: %q", rev, tt.tool, toolText(res))
				}
			}
			res := callTool(t, cs, "list_sandboxes", nil)
			if res.IsError || !strings.Contains(toolText(res), `"mine"`) || strings.Contains(toolText(res), `"other"`) {
				t.Errorf("%s list_sandboxes with a scoped token: %s", rev, toolText(res))
			}
		}
		// The REST API refuses the token on other sandboxes too.
		req, _ = http.NewRequest("GET", ts.URL+"/api/v1/sandboxes/other", nil)
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("REST with a scoped token on another sandbox: %d", resp.StatusCode)
		}

		cs, err := mcpConnect(t, ts.URL, tok.Token, "")
		if err != nil {
			t.Fatal(err)
		}
		// ask_human waits for a person's answer through the HITL API.
		go answerWhenAsked(t, ts.URL, "task", "blue")
		res := callTool(t, cs, "ask_human", map[string]any{"question": "Which colour?", "timeout_seconds": 20})
		if res.IsError || !strings.Contains(toolText(res), `"answer":"blue"`) {
			t.Fatalf("ask_human: %v %s", res.IsError, toolText(res))
		}
		// Nobody answers: the tool says so, and asking again waits for the same request.
		res = callTool(t, cs, "ask_human", map[string]any{"question": "Left or right?", "timeout_seconds": 1})
		if !res.IsError || !strings.Contains(toolText(res), "stays pending") {
			t.Fatalf("unanswered ask_human: %s", toolText(res))
		}
		watches := ts.tap.watches(api.KindAgent)
		go func() {
			// Once the call below waits for the same request (it watches
			// the agent): answered sooner, the call would ask anew.
			// Bounded below the call's 20 s, so the test is still running.
			if !testwait.For(10*time.Second, func() bool { return ts.tap.watches(api.KindAgent) > watches }) {
				t.Errorf("ask_human did not wait for the pending request")
				return
			}
			answerWhenAsked(t, ts.URL, "task", "left")
		}()
		res = callTool(t, cs, "ask_human", map[string]any{"question": "Left or right?", "timeout_seconds": 20})
		if res.IsError || !strings.Contains(toolText(res), `"answer":"left"`) {
			t.Fatalf("ask_human again: %s", toolText(res))
		}
		res = callTool(t, cs, "complete_task", map[string]any{"output": map[string]any{"answer": 42}})
		if res.IsError {
			t.Fatalf("complete_task: %s", toolText(res))
		}
		o, err := ts.st.Get(ctx, api.KindAgent, "task")
		if err != nil {
			t.Fatal(err)
		}
		a := o.(*api.Agent)
		if a.Status.Phase != api.AgentCompleted || a.Status.Result == nil || string(a.Status.Result.Output) != `{"answer":42}` {
			t.Fatalf("after complete_task the agent is %s, result %+v", a.Status.Phase, a.Status.Result)
		}
		res = callTool(t, cs, "complete_task", nil)
		if !res.IsError || !strings.Contains(toolText(res), "not running") {
			t.Errorf("second complete_task: %q", toolText(res))
		}
	})
}

// answerWhenAsked answers agent's pending question as a person would.
func answerWhenAsked(t *testing.T, base, agent, answer string) {
	answered := testwait.For(10*time.Second, func() bool {
		req, _ := http.NewRequest("GET", base+"/api/v1/agents/"+agent+"/hitl", nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		var hr api.HumanRequest
		json.NewDecoder(resp.Body).Decode(&hr)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !hr.Pending() {
			return false
		}
		body, _ := json.Marshal(map[string]string{"id": hr.ID, "answer": answer, "by": "tester"})
		req, _ = http.NewRequest("POST", base+"/api/v1/hitl/"+agent+"/respond", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer s3cret")
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("respond: %s", resp.Status)
			}
		}
		return true
	})
	if !answered {
		t.Errorf("agent %s asked nothing", agent)
	}
}

// TestMCPAgentTools checks spec.mcp.tools: admission refuses a name that
// is no tool, naming its index, and an agent's token may call only the
// tools its agent lists.
func TestMCPAgentTools(t *testing.T) {
	ts := start(t, Options{Token: "s3cret", ScopedKey: testKey})
	post := func(path, body string) (int, string) {
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post("/api/v1/agents", `{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"typo"},"spec":{"type":"mcp-agent","sandboxName":"mine","completion":{"type":"mcp-done"},"mcp":{"tools":["screenshot","browser_typo"]}}}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "spec.mcp.tools[1]") || !strings.Contains(body, "browser_typo") {
		t.Errorf("an unknown tool in spec.mcp.tools: %d %s", code, body)
	}
	for _, b := range []string{
		`{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"mine"},"spec":{}}`,
		`{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"limited"},"spec":{"type":"mcp-agent","sandboxName":"mine","completion":{"type":"mcp-done"},"mcp":{"tools":["list_sandboxes","browser_snapshot"]}}}`,
	} {
		path := "/api/v1/sandboxes"
		if strings.Contains(b, `"Agent"`) {
			path = "/api/v1/agents"
		}
		if code, body := post(path, b); code != http.StatusCreated {
			t.Fatalf("create: %d %s", code, body)
		}
	}
	bindAgent(t, ts.st, "limited", "mine", 1)
	tok := attemptToken(t, ts.st, testKey, "limited")
	for _, rev := range []string{"2026-07-28", "2025-11-25"} {
		cs, err := mcpConnect(t, ts.URL, tok, rev)
		if err != nil {
			t.Fatal(err)
		}
		if res := callTool(t, cs, "list_sandboxes", nil); res.IsError || !strings.Contains(toolText(res), `"mine"`) {
			t.Errorf("%s: a listed tool: %s", rev, toolText(res))
		}
		// The agent is told of its own tools only.
		list, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range list.Tools {
			names = append(names, tool.Name)
		}
		if got, want := strings.Join(names, ","), "browser_snapshot,list_sandboxes"; got != want {
			t.Errorf("%s: tools/list for the agent: %s, want %s", rev, got, want)
		}
		for _, tool := range []string{"screenshot", "browser_type", "complete_task"} {
			res := callTool(t, cs, tool, map[string]any{"selector": "#a", "text": "x"})
			if !res.IsError || !strings.Contains(toolText(res), "forbidden") || !strings.Contains(toolText(res), "tool "+tool) {
				t.Errorf("%s: %s, which spec.mcp.tools leaves out: %q", rev, tool, toolText(res))
			}
		}
		// A listed browser tool gets past the list, to a server that
		// reaches no guest.
		if res := callTool(t, cs, "browser_snapshot", nil); !res.IsError || !strings.Contains(toolText(res), "reaches no guest ports") {
			t.Errorf("%s: browser_snapshot on a server without a backend: %q", rev, toolText(res))
		}
	}
	a := ts.agent(t, "limited")
	if a.Status.Phase != api.AgentRunning {
		t.Errorf("after refused calls the agent is %s", a.Status.Phase)
	}
}

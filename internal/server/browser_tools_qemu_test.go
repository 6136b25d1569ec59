//go:build linux

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/browsertool"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/mcptools"
)

// browserTestPages is a small web site on the host for the guest's
// browser: a form with a button that counts its clicks, and a second page.
func browserTestPages() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><head><title>Order form</title></head><body>
<h1>Order</h1>
<p><label>Your name <input id="who" type="text"></label></p>
<p><button type="button" id="go" onclick="document.getElementById('out').textContent = 'pressed ' + (++window.n || (window.n = 1))">Press me</button></p>
<p id="out">not pressed</p>
<p><a href="/second">Next page</a></p>
</body></html>`)
	})
	mux.HandleFunc("/second", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><head><title>Second page</title></head><body><h1>Second</h1></body></html>`)
	})
	return mux
}

// startBrowserDesk runs a server over a real QEMU backend with one
// running sandbox "web" of the browser-desktop image, whose network lets
// the guest reach the host's port port (as 10.0.2.2:port) and nothing else.
func startBrowserDesk(t *testing.T, port int) *qemuDesk {
	t.Helper()
	tpl := &api.Template{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindTemplate}}
	tpl.Metadata.Name = "browser"
	tpl.Spec.QEMU = &api.QEMUImage{Image: "browser-desktop"}
	tpl.Spec.Resources.MemoryMB = 1536
	tpl.Spec.Network.Egress.Allow = []string{fmt.Sprintf("127.0.0.1:%d", port)}
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "web"
	sb.Spec.TemplateRef = "browser"
	// A template of the browser image boots Chromium once, which takes
	// minutes under emulation on a busy host.
	return startOnQEMU(t, tpl, sb, 40*time.Minute)
}

// TestBrowserToolsOnQEMU drives the Chromium of a real browser-desktop
// guest through the MCP browser tools, with the SDK's client in both
// protocol revisions: a page on the host (reached through the sandbox's
// egress rule) is opened, a button clicked by its accessible name, a
// field typed into by selector, the snapshot shows both and the tabs list
// the page; a link is followed to another page of the site, and
// browser_back returns. An agent's token whose
// spec.mcp.tools leaves out browser_type is refused it.
func TestBrowserToolsOnQEMU(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pages := &httptest.Server{Listener: ln, Config: &http.Server{Handler: browserTestPages(), ReadHeaderTimeout: 10 * time.Second}}
	pages.Start()
	defer pages.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	site := fmt.Sprintf("http://10.0.2.2:%d", port)
	d := startBrowserDesk(t, port)

	// call calls a tool; a tool error fails the test unless wantErr.
	call := func(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: protocol error %v", name, err)
		}
		if res.IsError {
			t.Fatalf("%s %v: %s", name, args, toolText(res))
		}
		return toolText(res)
	}
	// The browser answers its DevTools once the desktop is ready; the
	// first navigation may find it still settling.
	first := func(t *testing.T, cs *mcp.ClientSession) string {
		t.Helper()
		var last string
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "browser_navigate", Arguments: map[string]any{"sandbox": "web", "url": site + "/", "timeout_seconds": 120}})
			cancel()
			if err != nil {
				t.Fatalf("browser_navigate: protocol error %v", err)
			}
			if last = toolText(res); !res.IsError {
				return last
			}
		}
		t.Fatalf("browser_navigate never worked: %s", last)
		return ""
	}

	for _, rev := range []string{"2026-07-28", "2025-11-25"} {
		t.Run("Revision"+rev, func(t *testing.T) {
			cs, err := mcpConnect(t, d.url, "admin", rev)
			if err != nil {
				t.Fatal(err)
			}
			if got := first(t, cs); !strings.Contains(got, `"title":"Order form"`) || strings.Contains(got, `"loading":true`) {
				t.Fatalf("browser_navigate: %s", got)
			}
			if got := call(t, cs, "browser_click", map[string]any{"sandbox": "web", "name": "Press me", "role": "button"}); !strings.Contains(got, "Press me") {
				t.Errorf("browser_click: %s", got)
			}
			if got := call(t, cs, "browser_type", map[string]any{"sandbox": "web", "selector": "#who", "text": "Ada Lovelace"}); !strings.Contains(got, `"Ada Lovelace"`) {
				t.Errorf("browser_type: %s", got)
			}
			snap := call(t, cs, "browser_snapshot", map[string]any{"sandbox": "web"})
			for _, want := range []string{`- RootWebArea "Order form"`, `heading "Order"`, `textbox "Your name"`, `: Ada Lovelace`, `button "Press me"`, `pressed 1`, `link "Next page"`} {
				if !strings.Contains(snap, want) {
					t.Errorf("the snapshot has no %q:\n%s", want, snap)
				}
			}
			// The field's line holds the typed text.
			for _, line := range strings.Split(snap, "\n") {
				if strings.Contains(line, `textbox "Your name"`) && !strings.HasSuffix(line, ": Ada Lovelace") {
					t.Errorf("the field's line: %q", line)
				}
			}
			tabs := call(t, cs, "browser_tabs", map[string]any{"sandbox": "web"})
			if !strings.Contains(tabs, `"url":"`+site+`/"`) || !strings.Contains(tabs, `"current":true`) {
				t.Errorf("browser_tabs: %s", tabs)
			}
			// A link to another page of the site, and back: each waits for
			// its page. A navigation takes half a minute and more in this
			// guest under emulation, beyond the tools' default wait.
			start := time.Now()
			if got := call(t, cs, "browser_click", map[string]any{"sandbox": "web", "name": "Next page", "role": "link", "timeout_seconds": 120}); !strings.Contains(got, `"title":"Second page"`) || strings.Contains(got, `"loading":true`) {
				t.Errorf("browser_click on the link: %s", got)
			}
			t.Logf("the link's click took %s", time.Since(start).Round(time.Millisecond))
			start = time.Now()
			if got := call(t, cs, "browser_back", map[string]any{"sandbox": "web", "timeout_seconds": 120}); !strings.Contains(got, `"title":"Order form"`) || strings.Contains(got, `"loading":true`) {
				t.Errorf("browser_back: %s", got)
			}
			t.Logf("browser_back took %s", time.Since(start).Round(time.Millisecond))

			// Bad input and missing elements are tool errors that say so.
			for _, tt := range []struct {
				tool string
				args map[string]any
				want string
			}{
				{"browser_click", map[string]any{"sandbox": "web"}, "selector"},
				{"browser_click", map[string]any{"sandbox": "web", "selector": "#nothing-here"}, "#nothing-here"},
				{"browser_click", map[string]any{"sandbox": "web", "selector": "[[["}, "selector"},
				{"browser_navigate", map[string]any{"sandbox": "web", "url": "ftp://example.com/"}, "url"},
				{"browser_type", map[string]any{"sandbox": "web", "name": "Press me", "text": "x"}, "not a text field"},
				{"browser_tabs", map[string]any{"sandbox": "web", "action": "select"}, "tab"},
			} {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
				cancel()
				if err != nil {
					t.Fatalf("%s: protocol error %v", tt.tool, err)
				}
				if !res.IsError || !strings.Contains(toolText(res), tt.want) {
					t.Errorf("%s %v: IsError %v, %q; want an error about %s", tt.tool, tt.args, res.IsError, toolText(res), tt.want)
				}
			}
		})
	}

	// Anthropic's browser toolset over the same DevTools: a turn's
	// tool_use blocks in, their tool_result blocks out.
	t.Run("BrowserToolset", func(t *testing.T) {
		turn := func(t *testing.T, body string) []browsertool.Result {
			t.Helper()
			req, _ := http.NewRequest("POST", d.url+"/api/v1/sandboxes/web/browser", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer admin")
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var res []browsertool.Result
			if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &res) != nil {
				t.Fatalf("POST browser: %d %s", resp.StatusCode, b)
			}
			return res
		}
		texts := func(r browsertool.Result) string {
			var out []string
			for _, c := range r.Content {
				if m, ok := c.(map[string]any); ok && m["type"] == "text" {
					out = append(out, m["text"].(string))
				}
			}
			return strings.Join(out, "\n")
		}
		res := turn(t, `[{"type":"tool_use","id":"t1","name":"navigate","toolset_name":"browser","input":{"url":"`+site+`/"}},
			{"type":"tool_use","id":"t2","name":"read_page","toolset_name":"browser","input":{"filter":"interactive"}}]`)
		if len(res) != 2 || res[0].IsError || res[1].IsError || res[0].ToolUseID != "t1" || res[1].ToolsetName != "browser" {
			t.Fatalf("navigate and read_page: %+v", res)
		}
		page := texts(res[1])
		ref := regexp.MustCompile(`button "Press me".*\[(ref_\d+)\]`).FindStringSubmatch(page)
		if ref == nil {
			t.Fatalf("read_page has no button with a reference:\n%s", page)
		}
		res = turn(t, `[{"type":"tool_use","id":"t3","name":"left_click","toolset_name":"browser","input":{"target":{"type":"ref","ref":"`+ref[1]+`"}}},
			{"type":"tool_use","id":"t4","name":"get_page_text","toolset_name":"browser","input":{}},
			{"type":"tool_use","id":"t5","name":"screenshot","toolset_name":"browser","input":{}}]`)
		if res[0].IsError || !strings.Contains(texts(res[1]), "pressed") {
			t.Errorf("click by reference, then the page's text: %s / %s", texts(res[0]), texts(res[1]))
		}
		if img, ok := res[2].Content[0].(map[string]any); !ok || img["type"] != "image" {
			t.Errorf("screenshot: %v", res[2].Content)
		}
		// A link clicked by reference: the click's result comes once the
		// next page has loaded, and says so in its browser_state.
		link := regexp.MustCompile(`link "Next page".*\[(ref_\d+)\]`).FindStringSubmatch(page)
		if link == nil {
			t.Fatalf("read_page has no link with a reference:\n%s", page)
		}
		start := time.Now()
		res = turn(t, `[{"type":"tool_use","id":"t6","name":"left_click","toolset_name":"browser","input":{"target":{"type":"ref","ref":"`+link[1]+`"}}}]`)
		t.Logf("the link's click took %s", time.Since(start).Round(time.Millisecond))
		b, _ := json.Marshal(res[0].Content)
		if res[0].IsError || !strings.Contains(string(b), `"title":"Second page"`) {
			t.Errorf("the link's click: %s", b)
		}
		// Back to the form, as the subtests after this one find it.
		res = turn(t, `[{"type":"tool_use","id":"t7","name":"navigate","toolset_name":"browser","input":{"url":"back"}}]`)
		if res[0].IsError || !strings.Contains(texts(res[0]), "Order form") {
			t.Fatalf("navigate back: %s", texts(res[0]))
		}
	})

	// The desktop's accessibility tree names the browser window and its
	// page, through the API, the MCP tool and OSWorld's route.
	t.Run("AccessibilityAndOSWorld", func(t *testing.T) {
		req, _ := http.NewRequest("GET", d.url+"/api/v1/sandboxes/web/accessibility", nil)
		req.Header.Set("Authorization", "Bearer admin")
		resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		xml, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/xml") {
			t.Fatalf("GET accessibility: %d %s", resp.StatusCode, xml)
		}
		for _, want := range []string{"<desktop-frame", `name="Chromium"`, "Order form", "cp:screencoord="} {
			if !strings.Contains(string(xml), want) {
				t.Errorf("the accessibility tree has no %s:\n%.3000s", want, xml)
			}
		}
		cs, err := mcpConnect(t, d.url, "admin", "2026-07-28")
		if err != nil {
			t.Fatal(err)
		}
		if got := call(t, cs, "accessibility", map[string]any{"sandbox": "web"}); !strings.Contains(got, "<desktop-frame") || !strings.Contains(got, "Order form") {
			t.Errorf("the accessibility tool: %.2000s", got)
		}

		// A tree of OSWorld's own route says the same.
		_, _, body := osworldCall{method: "GET", route: "/accessibility"}.send(t, d.url, "web", "admin")
		var at map[string]string
		if err := json.Unmarshal(body, &at); err != nil || !strings.Contains(at["AT"], "Order form") {
			t.Errorf("/accessibility: %v %.2000s", err, body)
		}
	})

	// What `hvkube mcp` serves on stdio: the tools over the REST API, the
	// browser tools through the API's port forward of the guest's
	// DevTools, with the token given (here an agent's, which reaches its
	// own sandbox only).
	t.Run("Stdio", func(t *testing.T) {
		ctx := context.Background()
		for _, tt := range []struct{ name, token string }{{"server token", "admin"}, {"agent token", ""}} {
			tok := tt.token
			if tok == "" {
				a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
				a.Metadata.Name = "stdio"
				a.Spec.SandboxName, a.Spec.Type = "web", "mcp-agent"
				if err := d.srv.admit(a); err != nil {
					t.Fatal(err)
				}
				if _, err := d.st.Create(ctx, a); err != nil {
					t.Fatal(err)
				}
				bindAgent(t, d.st, "stdio", "web", 1)
				tok = attemptToken(t, d.st, testKey, "stdio")
			}
			c, err := client.New(d.url, tok)
			if err != nil {
				t.Fatal(err)
			}
			srv := mcptools.NewServer(mcptools.NewRemote(c), mcptools.Options{Version: "test"})
			st, ct := mcp.NewInMemoryTransports()
			ss, err := srv.Connect(ctx, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
			if err != nil {
				t.Fatal(err)
			}
			tabs := call(t, cs, "browser_tabs", map[string]any{"sandbox": "web"})
			if !strings.Contains(tabs, `"url":"`+site+`/"`) {
				t.Errorf("%s: browser_tabs: %s", tt.name, tabs)
			}
			if got := call(t, cs, "browser_type", map[string]any{"sandbox": "web", "selector": "#who", "text": "Grace Hopper"}); !strings.Contains(got, `"Grace Hopper"`) {
				t.Errorf("%s: browser_type: %s", tt.name, got)
			}
			if snap := call(t, cs, "browser_snapshot", map[string]any{"sandbox": "web"}); !strings.Contains(snap, `textbox "Your name"`) || !strings.Contains(snap, ": Grace Hopper") {
				t.Errorf("%s: browser_snapshot: %s", tt.name, snap)
			}
			cs.Close()
			ss.Wait()
		}
	})

	t.Run("AgentTools", func(t *testing.T) {
		a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
		a.Metadata.Name = "reader"
		a.Spec.SandboxName, a.Spec.Type = "web", "mcp-agent"
		a.Spec.MCP = &api.MCPConfig{Tools: []string{"browser_navigate", "browser_snapshot", "browser_click"}}
		if err := d.srv.admit(a); err != nil {
			t.Fatal(err)
		}
		if _, err := d.st.Create(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		bindAgent(t, d.st, "reader", "web", 1)
		tok := attemptToken(t, d.st, testKey, "reader")
		for _, rev := range []string{"2026-07-28", "2025-11-25"} {
			cs, err := mcpConnect(t, d.url, tok, rev)
			if err != nil {
				t.Fatal(err)
			}
			// A listed tool runs.
			if got := call(t, cs, "browser_navigate", map[string]any{"url": site + "/", "timeout_seconds": 120}); !strings.Contains(got, `"title":"Order form"`) || strings.Contains(got, `"loading":true`) {
				t.Errorf("%s: the agent's browser_navigate, a tool its spec lists: %s", rev, got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "browser_type", Arguments: map[string]any{"selector": "#who", "text": "not allowed"}})
			cancel()
			if err != nil {
				t.Fatalf("%s: browser_type: protocol error %v", rev, err)
			}
			if !res.IsError || !strings.Contains(toolText(res), "browser_type") || !strings.Contains(toolText(res), "forbidden") {
				t.Errorf("%s: browser_type with a token whose spec.mcp.tools leaves it out: IsError %v, %q", rev, res.IsError, toolText(res))
			}
			// Nothing was typed.
			snap := call(t, cs, "browser_snapshot", map[string]any{})
			for _, line := range strings.Split(snap, "\n") {
				if strings.Contains(line, `textbox "Your name"`) && strings.Contains(line, "not allowed") {
					t.Errorf("%s: the refused browser_type typed: %q", rev, line)
				}
			}
		}
	})
}

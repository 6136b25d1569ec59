package mcptools_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/cdp"
	"github.com/hvkube/hvkube/internal/mcptools"
)

// TestToolNames checks that ToolNames, which admission checks
// spec.mcp.tools against, are the tools the server serves.
func TestToolNames(t *testing.T) {
	f := newFake()
	scope := mcptools.Scope{}
	cs := session(t, f, &scope)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tl := range res.Tools {
		got = append(got, tl.Name)
	}
	want := slices.Clone(mcptools.ToolNames)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("served %v\nToolNames %v", got, want)
	}
}

// TestAllow checks that a tool the scope does not allow is refused before
// it runs, naming the tool.
func TestAllow(t *testing.T) {
	f := newFake()
	f.put(sandbox("sb1", "a1"))
	f.put(agent("a1", nil))
	var asked []string
	scope := mcptools.Scope{Sandbox: "sb1", Agent: "a1", Restricted: true, Allow: func(_ context.Context, tool string) error {
		asked = append(asked, tool)
		if tool != "screenshot" {
			return fmt.Errorf("%w: tool %s is not this agent's", mcptools.ErrForbidden, tool)
		}
		return nil
	}}
	cs := session(t, f, &scope)
	if got, isErr := call(t, cs, "screenshot", nil); isErr {
		t.Errorf("an allowed tool: %s", got)
	}
	if got, isErr := call(t, cs, "left_click", map[string]any{"coordinate": []int{1, 1}}); !isErr || !strings.Contains(got, "left_click") {
		t.Errorf("a tool not allowed: %q (error %v)", got, isErr)
	}
	if got := f.did(); strings.Join(got, " ") != "sb1:screenshot" {
		t.Errorf("actions that reached the desktop: %v", got)
	}
	if strings.Join(asked, " ") != "screenshot left_click" {
		t.Errorf("asked about %v", asked)
	}
	// An unrestricted caller is not asked.
	asked = nil
	scope.Restricted = false
	call(t, cs, "screenshot", map[string]any{"sandbox": "sb1"})
	if len(asked) != 0 {
		t.Errorf("asked about %v for an unrestricted caller", asked)
	}
}

// browserDesktops is fakeDesktops with a browser that nothing answers
// for: what the browser tools say when the guest has none.
type browserDesktops struct {
	*fakeDesktops
	err error // Browser's own error
}

func (d *browserDesktops) Browser(_ context.Context, sandbox string) (*cdp.Endpoint, error) {
	if d.err != nil {
		return nil, d.err
	}
	return cdp.NewEndpoint(9222, func(context.Context) (net.Conn, error) {
		return nil, fmt.Errorf("dial port %d of sandbox %s: connection refused", 9222, sandbox)
	}), nil
}

func TestBrowserToolErrors(t *testing.T) {
	f := newFake()
	f.put(sandbox("sb1", "a1"))
	scope := mcptools.Scope{}
	cs := session(t, f, &scope)
	// Bad arguments name their field, whatever the desktop can do.
	for _, tt := range []struct {
		tool string
		args map[string]any
		text string
	}{
		{"browser_navigate", map[string]any{"sandbox": "sb1"}, "url"},
		{"browser_navigate", map[string]any{"sandbox": "sb1", "url": ""}, "invalid url: required"},
		{"browser_navigate", map[string]any{"sandbox": "sb1", "url": "javascript:alert(1)"}, "invalid url"},
		{"browser_navigate", map[string]any{"sandbox": "sb1", "url": "http:///x"}, "invalid url"},
		{"browser_navigate", map[string]any{"sandbox": "sb1", "url": "https://example.com/" + strings.Repeat("a", mcptools.MaxURL)}, "invalid url"},
		{"browser_navigate", map[string]any{"sandbox": "sb1", "url": "https://example.com/", "timeout_seconds": 121}, "timeout_seconds"},
		{"browser_click", map[string]any{"sandbox": "sb1"}, "invalid selector: required"},
		{"browser_click", map[string]any{"sandbox": "sb1", "selector": "#a", "timeout_seconds": 121}, "invalid timeout_seconds"},
		{"browser_type", map[string]any{"sandbox": "sb1", "selector": "#a", "text": "x", "timeout_seconds": -1}, "invalid timeout_seconds"},
		{"browser_back", map[string]any{"sandbox": "sb1", "timeout_seconds": 500}, "invalid timeout_seconds"},
		{"browser_click", map[string]any{"sandbox": "sb1", "selector": "#a", "name": "A"}, "invalid selector"},
		{"browser_click", map[string]any{"sandbox": "sb1", "name": "A", "role": "but ton"}, "invalid role"},
		{"browser_click", map[string]any{"sandbox": "sb1", "selector": strings.Repeat("a", mcptools.MaxLocator+1)}, "invalid selector"},
		{"browser_type", map[string]any{"sandbox": "sb1", "selector": "#a", "text": strings.Repeat("a", api.MaxTypeText+1)}, "invalid text"},
		{"browser_snapshot", map[string]any{"sandbox": "sb1", "max_bytes": mcptools.MaxSnapshot + 1}, "invalid max_bytes"},
		{"browser_tabs", map[string]any{"sandbox": "sb1", "action": "shuffle"}, "invalid action"},
		{"browser_tabs", map[string]any{"sandbox": "sb1", "action": "close"}, "invalid tab"},
		{"browser_tabs", map[string]any{"sandbox": "sb1", "action": "new", "url": "gopher://x"}, "invalid url"},
		{"browser_back", nil, "invalid sandbox: required"},
	} {
		if got, isErr := call(t, cs, tt.tool, tt.args); !isErr || !strings.Contains(got, tt.text) {
			t.Errorf("%s %v: %q (error %v), want an error with %q", tt.tool, tt.args, got, isErr, tt.text)
		}
	}
	// Desktops that cannot reach a browser say so.
	if got, isErr := call(t, cs, "browser_snapshot", map[string]any{"sandbox": "sb1"}); !isErr || !strings.Contains(got, "not served here") {
		t.Errorf("without Browsers: %q (error %v)", got, isErr)
	}

	bd := &browserDesktops{fakeDesktops: f}
	bcs := sessionOver(t, bd, &scope)
	if got, isErr := call(t, bcs, "browser_snapshot", map[string]any{"sandbox": "sb1"}); !isErr || !strings.Contains(got, "no browser answers in sandbox sb1") {
		t.Errorf("nothing on the DevTools port: %q (error %v)", got, isErr)
	}
	bd.err = fmt.Errorf("sandbox sb1 has no network to reach its ports over: its network mode is none: %w", api.ErrUnsupported)
	if got, isErr := call(t, bcs, "browser_navigate", map[string]any{"sandbox": "sb1", "url": "https://example.com/"}); !isErr || !strings.Contains(got, "no network") {
		t.Errorf("no network: %q (error %v)", got, isErr)
	}

	// The browser tools need what input needs of an agent's attempt.
	scope = mcptools.Scope{Sandbox: "sb1", Agent: "a1", Restricted: true, Check: func(_ context.Context, n mcptools.Need) error {
		if n == mcptools.NeedAct {
			return errors.New("a person holds the input")
		}
		return nil
	}}
	for _, tool := range []string{"browser_snapshot", "browser_tabs", "browser_back"} {
		if got, isErr := call(t, bcs, tool, nil); !isErr || !strings.Contains(got, "forbidden: a person holds the input") {
			t.Errorf("%s while a person holds the input: %q (error %v)", tool, got, isErr)
		}
	}
}

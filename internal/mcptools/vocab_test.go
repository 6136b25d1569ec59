package mcptools_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/mcptools"
)

// layerDesktops runs the tools' actions through the real action layer, on
// a recording fake of a 1280x800 desktop: what a tool's arguments become
// on the wire is under test.
type layerDesktops struct {
	*fakeDesktops
	acts *display.Actions
	desk *recDesk
}

func (d *layerDesktops) Do(ctx context.Context, sandbox string, a api.Action, width int) (mcptools.Result, error) {
	return d.acts.Do(ctx, sandbox, a, display.Space{Width: width})
}

// recDesk is a fake display.Desktop that records the events it is sent.
type recDesk struct {
	mu     sync.Mutex
	events []string
	x, y   int
}

func (r *recDesk) Screenshot(context.Context, string, backend.ScreenshotOptions) ([]byte, string, error) {
	var b bytes.Buffer
	png.Encode(&b, image.NewGray(image.Rect(0, 0, 4, 4)))
	return b.Bytes(), "image/png", nil
}

func (r *recDesk) ScreenSize(context.Context, string) (int, int, error) { return 1280, 800, nil }

func (r *recDesk) SendInput(_ context.Context, _ string, evs []backend.InputEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range evs {
		sign := map[bool]string{true: "+", false: "-"}[e.Down]
		switch e.Kind {
		case backend.EventMove:
			r.x, r.y = e.X, e.Y
			r.events = append(r.events, fmt.Sprintf("m%d,%d", e.X, e.Y))
		case backend.EventButton:
			r.events = append(r.events, "b"+sign+e.Button)
		case backend.EventKey:
			r.events = append(r.events, "k"+sign+e.Key)
		}
	}
	return nil
}

func (r *recDesk) TypeText(context.Context, string, string) error { return errors.New("no guest") }

func (r *recDesk) CursorPosition(context.Context, string) (int, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.x, r.y, nil
}

// take returns the events recorded since the last call.
func (r *recDesk) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := strings.Join(r.events, " ")
	r.events = nil
	return s
}

// sessionOver serves the tools over d to an in-memory client; the
// caller's scope is whatever *scope holds at the call.
func sessionOver(t *testing.T, d mcptools.Desktops, scope *mcptools.Scope) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	srv := mcptools.NewServer(d, mcptools.Options{Version: "test", Scope: func(context.Context, *mcp.RequestExtra) mcptools.Scope {
		return *scope
	}})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

func TestVocabularies(t *testing.T) {
	f := newFake()
	f.put(sandbox("sb1", "a1"))
	desk := &recDesk{}
	d := &layerDesktops{fakeDesktops: f, acts: display.NewActions(desk), desk: desk}
	scope := mcptools.Scope{}
	cs := sessionOver(t, d, &scope)

	for _, tt := range []struct {
		tool string
		args map[string]any
		out  string // the answer
		evs  string // the events sent
	}{
		// The per-action tools take OpenAI's modifier keys.
		{"left_click", map[string]any{"coordinate": []int{10, 20}, "keys": []string{"CTRL"}}, "done", "m10,20 k+ctrl b+left b-left k-ctrl"},
		{"double_click", map[string]any{"coordinate": []int{10, 20}, "keys": []string{"SHIFT"}}, "done", "m10,20 k+shift b+left b-left b+left b-left k-shift"},
		{"mouse_move", map[string]any{"coordinate": []int{5, 6}, "keys": []string{"ALT"}}, "done", "k+alt m5,6 k-alt"},
		{"left_click_drag", map[string]any{"start_coordinate": []int{0, 0}, "coordinate": []int{8, 0}, "keys": []string{"CTRL"}}, "done",
			"m0,0 k+ctrl b+left m1,0 m2,0 m3,0 m4,0 m5,0 m6,0 m7,0 m8,0 b-left k-ctrl"},
		{"scroll", map[string]any{"coordinate": []int{1, 1}, "scroll_direction": "up", "scroll_amount": 1, "keys": []string{"CTRL"}}, "done",
			"m1,1 k+ctrl b+wheel-up b-wheel-up k-ctrl"},
		// The computer tool takes a batch in any vocabulary.
		{"computer", map[string]any{"actions": []any{
			map[string]any{"type": "click", "button": "left", "x": 10, "y": 20, "keys": []string{"CTRL"}},
			map[string]any{"name": "click", "args": map[string]any{"x": 999, "y": 999, "intent": "the corner"}},
			map[string]any{"action": "key", "text": "Return"},
		}}, "done", "m10,20 k+ctrl b+left b-left k-ctrl m1279,799 b+left b-left k+ret k-ret"},
		{"computer", map[string]any{"actions": []any{
			map[string]any{"type": "function_call", "name": "hotkey", "arguments": map[string]any{"keys": []string{"Control", "L"}}},
			map[string]any{"action": "cursor_position"},
		}}, `{"coordinate":[1279,799]}`, "k+ctrl k+l k-l k-ctrl"},
		{"computer", map[string]any{"width": 640, "actions": []any{
			map[string]any{"type": "move", "x": 320, "y": 200},
			map[string]any{"name": "take_screenshot"},
		}}, "image:image/png", "m641,401"},
	} {
		tt.args["sandbox"] = "sb1"
		got, isErr := call(t, cs, tt.tool, tt.args)
		if isErr || got != tt.out {
			t.Errorf("%s %v: %q (error %v), want %q", tt.tool, tt.args, got, isErr, tt.out)
		}
		if evs := desk.take(); evs != tt.evs {
			t.Errorf("%s %v: events\n got %s\nwant %s", tt.tool, tt.args, evs, tt.evs)
		}
	}

	for _, tt := range []struct {
		args map[string]any
		text string
	}{
		{map[string]any{"actions": []any{}}, "invalid actions: required"},
		{map[string]any{"actions": []any{map[string]any{"type": "wait"}, map[string]any{"name": "click", "args": map[string]any{"x": 1000, "y": 1}}}},
			"invalid actions[1].args.x: 1000 is off the 0-999 grid"},
		{map[string]any{"actions": []any{map[string]any{"type": "click", "x": 1, "y": 1, "keys": []string{"WARP"}}}}, "actions[0].keys[0]"},
		{map[string]any{"actions": []any{map[string]any{"name": "search"}}}, "search is not supported"},
		{map[string]any{"actions": []any{map[string]any{"type": "computer_call", "actions": []any{}}}}, "actions[0].actions"},
	} {
		tt.args["sandbox"] = "sb1"
		got, isErr := call(t, cs, "computer", tt.args)
		if !isErr || !strings.Contains(got, tt.text) {
			t.Errorf("computer %v: %q (error %v), want an error with %q", tt.args, got, isErr, tt.text)
		}
	}
	if evs := desk.take(); evs != "" {
		t.Errorf("bad batches sent %s", evs)
	}

	// A batch that only looks needs only to see the sandbox.
	var needs []mcptools.Need
	scope = mcptools.Scope{Sandbox: "sb1", Agent: "a1", Restricted: true, Check: func(_ context.Context, n mcptools.Need) error {
		needs = append(needs, n)
		if n == mcptools.NeedAct {
			return errors.New("a person holds the input")
		}
		return nil
	}}
	if got, isErr := call(t, cs, "computer", map[string]any{"actions": []any{map[string]any{"type": "screenshot"}, map[string]any{"name": "wait", "args": map[string]any{"seconds": 0}}}}); isErr {
		t.Errorf("a batch that looks: %s", got)
	}
	if got, isErr := call(t, cs, "computer", map[string]any{"actions": []any{map[string]any{"type": "screenshot"}, map[string]any{"name": "click", "args": map[string]any{"x": 1, "y": 1}}}}); !isErr || !strings.Contains(got, "a person holds the input") {
		t.Errorf("a batch that acts while a person holds the input: %q", got)
	}
	if fmt.Sprint(needs) != fmt.Sprint([]mcptools.Need{mcptools.NeedView, mcptools.NeedAct}) {
		t.Errorf("needs %v", needs)
	}
}

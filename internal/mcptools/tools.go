package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hvkube/hvkube/internal/api"
)

// The arguments of the tools. Field names are those of the input API
// (api.Action), so that a recorded run replays as a workflow.

type sandboxArg struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"The sandbox to act on. May be left out when the token is scoped to one agent (its sandbox is the default)."`
}

type spaceArg struct {
	Width int `json:"width,omitempty" jsonschema:"Work in a screen this many pixels wide (the desktop scaled, aspect kept): screenshots come at this width and coordinates are read in this space. Pass the same width to every call. Left out: the desktop's own pixels."`
}

type screenshotArgs struct {
	sandboxArg
	spaceArg
}

// keysArg are modifier keys held around a pointer action, as OpenAI's
// computer actions give them.
type keysArg struct {
	Keys []string `json:"keys,omitempty" jsonschema:"Modifier keys to hold down around the action and release after it, by OpenAI's names or xdotool's: [\"CTRL\"], [\"SHIFT\", \"ALT\"]."`
}

type clickArgs struct {
	sandboxArg
	spaceArg
	keysArg
	Coordinate []int  `json:"coordinate,omitempty" jsonschema:"[x, y] to click at; left out: where the pointer is."`
	Text       string `json:"text,omitempty" jsonschema:"Modifier keys to hold during the click, such as shift or ctrl+alt."`
}

type moveArgs struct {
	sandboxArg
	spaceArg
	keysArg
	Coordinate []int `json:"coordinate" jsonschema:"[x, y] to move the pointer to."`
}

type dragArgs struct {
	sandboxArg
	spaceArg
	keysArg
	StartCoordinate []int `json:"start_coordinate" jsonschema:"[x, y] where the drag starts."`
	Coordinate      []int `json:"coordinate" jsonschema:"[x, y] where the drag ends."`
}

type buttonArgs struct {
	sandboxArg
	spaceArg
	Coordinate []int `json:"coordinate,omitempty" jsonschema:"[x, y] to move to first; left out: where the pointer is."`
}

type scrollArgs struct {
	sandboxArg
	spaceArg
	keysArg
	Coordinate      []int  `json:"coordinate,omitempty" jsonschema:"[x, y] to scroll at; left out: where the pointer is."`
	ScrollDirection string `json:"scroll_direction" jsonschema:"up, down, left or right."`
	ScrollAmount    int    `json:"scroll_amount,omitempty" jsonschema:"Wheel notches (default 3)."`
	Text            string `json:"text,omitempty" jsonschema:"Modifier keys to hold while scrolling, such as ctrl."`
}

type typeArgs struct {
	sandboxArg
	Text string `json:"text" jsonschema:"The text to type (at most 4096 characters)."`
}

type keyArgs struct {
	sandboxArg
	Text string `json:"text" jsonschema:"A key or combination in xdotool style: Return, ctrl+s, alt+Tab, shift+F10."`
}

type holdKeyArgs struct {
	sandboxArg
	Text     string  `json:"text" jsonschema:"The key or combination to hold down."`
	Duration float64 `json:"duration" jsonschema:"Seconds to hold it (at most 100)."`
}

type waitArgs struct {
	sandboxArg
	Duration float64 `json:"duration" jsonschema:"Seconds to wait (at most 100)."`
}

type zoomArgs struct {
	sandboxArg
	spaceArg
	Region []int `json:"region" jsonschema:"[x0, y0, x1, y1]: the rectangle to show at the desktop's full resolution."`
}

type computerArgs struct {
	sandboxArg
	spaceArg
	Actions []map[string]any `json:"actions" jsonschema:"The actions, run in order; the first that fails stops the rest, and whatever keys and buttons they pressed are released. Each in any vocabulary: Anthropic's ({\"action\": \"left_click\", \"coordinate\": [x, y]}), OpenAI's (a computer_call's actions as they come: {\"type\": \"click\", \"x\": 10, \"y\": 20, \"keys\": [\"CTRL\"]}) or Gemini's function calls ({\"name\": \"click\", \"args\": {\"x\": 500, \"y\": 500}}, on the 0-999 grid whatever width says)."`
}

type positionOut struct {
	Coordinate []int `json:"coordinate" jsonschema:"[x, y] of the pointer, in the caller's space."`
}

// actionTool describes one computer-use tool.
type actionTool struct {
	name, desc string
}

func (t *tools) register(s *mcp.Server) {
	addAction(t, s, "screenshot", "Take a screenshot of the sandbox's screen (PNG). Coordinates of the other tools are pixels of this image.", func(a screenshotArgs) (api.Action, string, int) {
		return api.Action{Action: "screenshot"}, a.Sandbox, a.Width
	})
	for _, c := range []actionTool{
		{"left_click", "Click the left mouse button."},
		{"right_click", "Click the right mouse button."},
		{"middle_click", "Click the middle mouse button."},
		{"double_click", "Double-click the left mouse button."},
		{"triple_click", "Triple-click the left mouse button (selects a line)."},
	} {
		addAction(t, s, c.name, c.desc, func(a clickArgs) (api.Action, string, int) {
			return api.Action{Action: c.name, Coordinate: a.Coordinate, Text: a.Text, Keys: a.Keys}, a.Sandbox, a.Width
		})
	}
	addAction(t, s, "mouse_move", "Move the pointer.", func(a moveArgs) (api.Action, string, int) {
		return api.Action{Action: "mouse_move", Coordinate: a.Coordinate, Keys: a.Keys}, a.Sandbox, a.Width
	})
	addAction(t, s, "left_click_drag", "Press the left button at start_coordinate, move to coordinate, release.", func(a dragArgs) (api.Action, string, int) {
		return api.Action{Action: "left_click_drag", StartCoordinate: a.StartCoordinate, Coordinate: a.Coordinate, Keys: a.Keys}, a.Sandbox, a.Width
	})
	addAction(t, s, "left_mouse_down", "Press the left mouse button and keep it down.", func(a buttonArgs) (api.Action, string, int) {
		return api.Action{Action: "left_mouse_down", Coordinate: a.Coordinate}, a.Sandbox, a.Width
	})
	addAction(t, s, "left_mouse_up", "Release the left mouse button.", func(a buttonArgs) (api.Action, string, int) {
		return api.Action{Action: "left_mouse_up", Coordinate: a.Coordinate}, a.Sandbox, a.Width
	})
	addAction(t, s, "scroll", "Turn the mouse wheel.", func(a scrollArgs) (api.Action, string, int) {
		return api.Action{Action: "scroll", Coordinate: a.Coordinate, ScrollDirection: a.ScrollDirection, ScrollAmount: a.ScrollAmount, Text: a.Text, Keys: a.Keys}, a.Sandbox, a.Width
	})
	addAction(t, s, "type", "Type text with the keyboard.", func(a typeArgs) (api.Action, string, int) {
		return api.Action{Action: "type", Text: a.Text}, a.Sandbox, 0
	})
	addAction(t, s, "key", "Press a key or key combination.", func(a keyArgs) (api.Action, string, int) {
		return api.Action{Action: "key", Text: a.Text}, a.Sandbox, 0
	})
	addAction(t, s, "hold_key", "Hold a key or combination down for a while.", func(a holdKeyArgs) (api.Action, string, int) {
		return api.Action{Action: "hold_key", Text: a.Text, Duration: a.Duration}, a.Sandbox, 0
	})
	addAction(t, s, "wait", "Wait a while (the screen keeps changing meanwhile).", func(a waitArgs) (api.Action, string, int) {
		return api.Action{Action: "wait", Duration: a.Duration}, a.Sandbox, 0
	})
	addAction(t, s, "zoom", "Show a region of the screen at the desktop's full resolution (PNG).", func(a zoomArgs) (api.Action, string, int) {
		return api.Action{Action: "zoom", Region: a.Region}, a.Sandbox, a.Width
	})
	mcp.AddTool(s, &mcp.Tool{Name: "cursor_position", Description: "Where the pointer is.", InputSchema: schemaFor[screenshotArgs](),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, toolErrors(t.cursorPosition))
	mcp.AddTool(s, &mcp.Tool{Name: "accessibility", Description: "The desktop's accessibility tree (AT-SPI) as XML in OSWorld's format: " +
		"one element per node, named by its role, with its name, states (st:), attributes (attr:) and, when it shows, its screen position and size (cp:screencoord, cp:size). " +
		"Needs an image with the accessibility helper (browser-desktop).", InputSchema: schemaFor[sandboxArg](),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, toolErrors(t.accessibility))
	mcp.AddTool(s, &mcp.Tool{Name: "computer", Description: "Run a batch of computer-use actions in order, each in Anthropic's, OpenAI's or Gemini's " +
		"vocabulary (docs/actions.md): OpenAI's computer_call actions and Gemini's function calls can be passed as the model gave them. " +
		"Returns the last screenshot taken, the pointer's position if asked, or done.",
		InputSchema: schemaFor[computerArgs]()}, toolErrors(t.computer))
	t.registerSandboxTools(s)
	t.registerBrowserTools(s)
}

// computer runs a batch of actions in any vocabulary.
func (t *tools) computer(ctx context.Context, req *mcp.CallToolRequest, in computerArgs) (*mcp.CallToolResult, any, error) {
	if len(in.Actions) == 0 {
		return nil, nil, api.Invalid("actions", "required: at least one action")
	}
	// Read as the input API reads a body, so that fields are named by
	// their path (actions[1].args.x).
	body, err := json.Marshal(map[string]any{"actions": in.Actions})
	if err != nil {
		return nil, nil, api.Invalid("actions", "%v", err)
	}
	act, err := api.DecodeAction(body)
	if err != nil {
		return nil, nil, err
	}
	if err := api.ValidateAction("", act, 0, 0, false); err != nil {
		return nil, nil, err
	}
	need := NeedView
	for _, a := range act.Actions {
		if !viewOnly(a) {
			need = NeedAct
		}
	}
	sb, err := t.sandbox(ctx, req, in.Sandbox, need)
	if err != nil {
		return nil, nil, err
	}
	res, err := t.d.Do(ctx, sb, act, in.Width)
	if err != nil {
		return nil, nil, err
	}
	return actionResult(res), nil, nil
}

// viewOnly reports whether a looks at the sandbox without acting on it.
func viewOnly(a api.Action) bool {
	switch a.Form() {
	case api.FormOpenAI:
		return a.Type == "screenshot" || a.Type == "wait"
	case api.FormGemini:
		return a.Name == "take_screenshot" || a.Name == "wait" || a.Name == "wait_5_seconds"
	}
	return slices.Contains([]string{"screenshot", "zoom", "wait", "cursor_position"}, a.Action)
}

// actionResult is a tool's answer to what an action returned: the image,
// the pointer's position, or done.
func actionResult(res Result) *mcp.CallToolResult {
	if res.Image != nil {
		ct := res.ContentType
		if ct == "" {
			ct = "image/png"
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: res.Image, MIMEType: ct}}}
	}
	if len(res.Coordinate) == 2 {
		b, _ := json.Marshal(positionOut{Coordinate: res.Coordinate})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}
}

// addAction adds the tool name, which runs the action args make.
func addAction[In any](t *tools, s *mcp.Server, name, desc string, mk func(In) (api.Action, string, int)) {
	tool := &mcp.Tool{Name: name, Description: desc, InputSchema: schemaFor[In]()}
	if name == "screenshot" || name == "zoom" {
		tool.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: true}
	}
	mcp.AddTool(s, tool, toolErrors(func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		act, sandbox, width := mk(in)
		need := NeedAct
		if act.Action == "screenshot" || act.Action == "zoom" || act.Action == "wait" {
			need = NeedView
		}
		sb, err := t.sandbox(ctx, req, sandbox, need)
		if err != nil {
			return nil, nil, err
		}
		res, err := t.d.Do(ctx, sb, act, width)
		if err != nil {
			return nil, nil, err
		}
		return actionResult(res), nil, nil
	}))
}

func (t *tools) cursorPosition(ctx context.Context, req *mcp.CallToolRequest, in screenshotArgs) (*mcp.CallToolResult, positionOut, error) {
	sb, err := t.sandbox(ctx, req, in.Sandbox, NeedView)
	if err != nil {
		return nil, positionOut{}, err
	}
	res, err := t.d.Do(ctx, sb, api.Action{Action: "cursor_position"}, in.Width)
	if err != nil {
		return nil, positionOut{}, err
	}
	if len(res.Coordinate) != 2 {
		return nil, positionOut{}, errors.New("the desktop did not say where the pointer is")
	}
	return nil, positionOut{Coordinate: res.Coordinate}, nil
}

// AccessibilityTrees is the optional ability of a Desktops to read a
// desktop's accessibility tree.
type AccessibilityTrees interface {
	Accessibility(ctx context.Context, sandbox string) (string, error)
}

func (t *tools) accessibility(ctx context.Context, req *mcp.CallToolRequest, in sandboxArg) (*mcp.CallToolResult, any, error) {
	sb, err := t.sandbox(ctx, req, in.Sandbox, NeedView)
	if err != nil {
		return nil, nil, err
	}
	at, ok := t.d.(AccessibilityTrees)
	if !ok {
		return nil, nil, fmt.Errorf("the accessibility tool is not served here: use the server's /mcp endpoint: %w", api.ErrUnsupported)
	}
	xml, err := at.Accessibility(ctx, sb)
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: xml}}}, nil, nil
}

// toolErrors turns the errors of h into tool errors that carry the API's
// message (the SDK does that for any error; errorText adds the category).
func toolErrors[In, Out any](h mcp.ToolHandlerFor[In, Out]) mcp.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		res, out, err := h(ctx, req, in)
		if err != nil {
			var zero Out
			return nil, zero, errorText(err)
		}
		return res, out, nil
	}
}

// schemaFor is In's input schema, with the bounds that struct tags cannot
// say.
func schemaFor[In any]() *jsonschema.Schema {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("schema of %T: %v", *new(In), err))
	}
	two := 2
	four := 4
	zero := 0.0
	for name, p := range s.Properties {
		switch name {
		case "coordinate", "start_coordinate":
			p.MinItems, p.MaxItems = &two, &two
			p.Items = &jsonschema.Schema{Type: "integer", Minimum: &zero}
		case "region":
			p.MinItems, p.MaxItems = &four, &four
			p.Items = &jsonschema.Schema{Type: "integer", Minimum: &zero}
		case "width":
			lo, hi := 1.0, float64(api.MaxScreenWidth)
			p.Minimum, p.Maximum = &lo, &hi
		case "scroll_direction":
			p.Enum = []any{"up", "down", "left", "right"}
		case "scroll_amount":
			hi := float64(api.MaxScrollStep)
			p.Minimum, p.Maximum = &zero, &hi
		case "duration":
			hi := float64(api.MaxWait)
			p.Minimum, p.Maximum = &zero, &hi
		}
	}
	return s
}

// ---- sandbox tools, completion, questions ----

type listOut struct {
	Sandboxes []SandboxInfo `json:"sandboxes"`
}

// SandboxInfo is a sandbox as list_sandboxes shows it.
type SandboxInfo struct {
	Name       string `json:"name"`
	Phase      string `json:"phase,omitempty"`
	Pool       string `json:"pool,omitempty"`
	Agent      string `json:"agent,omitempty"`
	Resolution string `json:"resolution,omitempty"`
}

type acquireArgs struct {
	Pool           string `json:"pool" jsonschema:"The pool to take a sandbox from."`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"How long to wait for a free sandbox (default 60, at most 300)."`
	Minutes        int    `json:"minutes,omitempty" jsonschema:"How long the sandbox is yours before it goes back to the pool (default 30)."`
}

// Lease is a sandbox taken from a pool for an MCP client.
type Lease struct {
	Sandbox string `json:"sandbox" jsonschema:"The sandbox to pass to the other tools."`
	Agent   string `json:"agent" jsonschema:"The mcp-agent that holds it; release_sandbox or complete_task ends it."`
}

type releaseArgs struct {
	Sandbox string `json:"sandbox" jsonschema:"The sandbox acquire_sandbox gave."`
}

type completeArgs struct {
	sandboxArg
	Output  any    `json:"output,omitempty" jsonschema:"The task's result: any JSON value."`
	Success *bool  `json:"success,omitempty" jsonschema:"Whether the task succeeded (default true). false fails the attempt (it is retried while completion.maxRetries allows)."`
	Message string `json:"message,omitempty" jsonschema:"Why it failed, when success is false."`
}

type askArgs struct {
	sandboxArg
	Question       string `json:"question" jsonschema:"What to ask the person watching the desktop."`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"How long to wait for the answer (default 120, at most 300). Without an answer by then the question stays pending: call ask_human again with the same question to keep waiting."`
}

type answerOut struct {
	Answer string `json:"answer"`
}

func (t *tools) registerSandboxTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "list_sandboxes", Description: "List the sandboxes this token reaches: name, phase, pool and agent.",
		InputSchema: &jsonschema.Schema{Type: "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, toolErrors(t.list))
	mcp.AddTool(s, &mcp.Tool{Name: "acquire_sandbox", Description: "Take a free sandbox from a pool: it is held by a new mcp-agent until release_sandbox or complete_task. Waits (bounded) for one to be free.",
		InputSchema: schemaFor[acquireArgs]()}, toolErrors(t.acquire))
	mcp.AddTool(s, &mcp.Tool{Name: "release_sandbox", Description: "Give back a sandbox taken with acquire_sandbox; it goes back to its pool (reset to clean, by the pool's policy).",
		InputSchema: schemaFor[releaseArgs](), Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}}, toolErrors(t.release))
	mcp.AddTool(s, &mcp.Tool{Name: "complete_task", Description: "Finish the task of the mcp-agent that holds the sandbox, with its output. The agent becomes Completed (or, with success false, its attempt fails) and the sandbox is released.",
		InputSchema: schemaFor[completeArgs](), Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}}, toolErrors(t.complete))
	mcp.AddTool(s, &mcp.Tool{Name: "ask_human", Description: "Ask the person watching the desktop a question and wait for the answer. The agent shows WaitingForHuman meanwhile; the person may take control of the desktop before answering.",
		InputSchema: schemaFor[askArgs]()}, toolErrors(t.askHuman))
}

func ptr[T any](v T) *T { return &v }

func (t *tools) list(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, listOut, error) {
	sc := t.scope(ctx, req)
	var objs []api.Object
	if sc.Restricted {
		if _, err := t.sandbox(ctx, req, sc.Sandbox, NeedView); err != nil {
			return nil, listOut{}, err
		}
		o, err := t.d.Get(ctx, api.KindSandbox, sc.Sandbox)
		if err != nil {
			return nil, listOut{}, err
		}
		objs = []api.Object{o}
	} else {
		var err error
		if objs, err = t.d.List(ctx, api.KindSandbox); err != nil {
			return nil, listOut{}, err
		}
	}
	out := listOut{Sandboxes: []SandboxInfo{}}
	for _, o := range objs {
		sb := o.(*api.Sandbox)
		out.Sandboxes = append(out.Sandboxes, SandboxInfo{Name: sb.Metadata.Name, Phase: sb.Status.Phase, Pool: sb.Metadata.Labels["pool"],
			Agent: sb.Status.CurrentAgent, Resolution: sb.Status.Resolution})
	}
	return nil, out, nil
}

func (t *tools) acquire(ctx context.Context, req *mcp.CallToolRequest, in acquireArgs) (*mcp.CallToolResult, Lease, error) {
	if sc := t.scope(ctx, req); sc.Restricted {
		return nil, Lease{}, fmt.Errorf("%w: this token reaches only sandbox %q; it cannot take another", ErrForbidden, sc.Sandbox)
	}
	wait := DefaultAcquireWait
	if in.TimeoutSeconds < 0 || time.Duration(in.TimeoutSeconds)*time.Second > MaxAcquireWait {
		return nil, Lease{}, api.Invalid("timeout_seconds", "%d is out of range 0..%d", in.TimeoutSeconds, int(MaxAcquireWait/time.Second))
	} else if in.TimeoutSeconds > 0 {
		wait = time.Duration(in.TimeoutSeconds) * time.Second
	}
	l, err := Acquire(ctx, t.d, in.Pool, wait, in.Minutes)
	return nil, l, err
}

func (t *tools) release(ctx context.Context, req *mcp.CallToolRequest, in releaseArgs) (*mcp.CallToolResult, any, error) {
	if sc := t.scope(ctx, req); sc.Restricted {
		// Releasing deletes the lease agent: an agent's token deletes
		// nothing. It ends its attempt with complete_task.
		return nil, nil, fmt.Errorf("%w: an agent's token cannot release its sandbox; end the task with complete_task", ErrForbidden)
	}
	sb, err := t.sandbox(ctx, req, in.Sandbox, NeedAct)
	if err != nil {
		return nil, nil, err
	}
	agent, err := Release(ctx, t.d, sb)
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("released sandbox %s (agent %s deleted)", sb, agent)}}}, nil, nil
}

func (t *tools) complete(ctx context.Context, req *mcp.CallToolRequest, in completeArgs) (*mcp.CallToolResult, any, error) {
	agent, err := t.agent(ctx, req, in.Sandbox)
	if err != nil {
		return nil, nil, err
	}
	c := Completion{Success: in.Success == nil || *in.Success, Message: in.Message}
	if len(c.Message) > MaxCompleteMessage {
		return nil, nil, api.Invalid("message", "%d bytes: at most %d", len(c.Message), MaxCompleteMessage)
	}
	if in.Output != nil {
		b, err := json.Marshal(in.Output)
		if err != nil {
			return nil, nil, api.Invalid("output", "%v", err)
		}
		c.Output = b
	}
	if err := t.d.Complete(ctx, agent, c); err != nil {
		return nil, nil, err
	}
	verb := "completed"
	if !c.Success {
		verb = "failed"
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("agent %s %s", agent, verb)}}}, nil, nil
}

func (t *tools) askHuman(ctx context.Context, req *mcp.CallToolRequest, in askArgs) (*mcp.CallToolResult, answerOut, error) {
	q := strings.TrimSpace(in.Question)
	switch {
	case q == "":
		return nil, answerOut{}, api.Invalid("question", "required")
	case len(in.Question) > MaxQuestion:
		return nil, answerOut{}, api.Invalid("question", "%d bytes: at most %d", len(in.Question), MaxQuestion)
	case in.TimeoutSeconds < 0 || time.Duration(in.TimeoutSeconds)*time.Second > MaxAskWait:
		return nil, answerOut{}, api.Invalid("timeout_seconds", "%d is out of range 0..%d", in.TimeoutSeconds, int(MaxAskWait/time.Second))
	}
	wait := DefaultAskWait
	if in.TimeoutSeconds > 0 {
		wait = time.Duration(in.TimeoutSeconds) * time.Second
	}
	agent, err := t.agent(ctx, req, in.Sandbox)
	if err != nil {
		return nil, answerOut{}, err
	}
	ans, err := t.d.AskHuman(ctx, agent, in.Question, wait)
	if errors.Is(err, ErrNoAnswer) {
		return nil, answerOut{}, fmt.Errorf("nobody answered within %s; the question stays pending: call ask_human again with the same question to keep waiting", wait)
	}
	if err != nil {
		return nil, answerOut{}, err
	}
	return nil, answerOut{Answer: ans}, nil
}

// Package mcptools serves hvkube's desktops as MCP tools: one tool per
// computer-use action (screenshot, left_click, type, key, …, named as the
// action), computer (a batch of actions in Anthropic's, OpenAI's or
// Gemini's vocabulary), the sandbox tools (list_sandboxes,
// acquire_sandbox, release_sandbox), complete_task, ask_human, and the
// browser tools (browser_navigate, browser_click, …), which drive the
// guest's Chromium over CDP. The tools work on a Desktops, which the
// server implements in process and `hvkube mcp` over the REST API.
//
// Every tool takes the sandbox as an argument, as the stateless MCP
// revision (2026-07-28) has it; a caller whose token is scoped to one
// agent gets its sandbox by default and is refused any other. Bad input,
// a refusal or a failed action is a tool error (IsError) carrying the
// API's message, never a protocol error.
package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/display"
)

// Result is what an action returns: the action layer's own.
type Result = display.Result

// Completion ends an mcp-agent's attempt (POST /agents/NAME/complete).
type Completion struct {
	Success bool
	Output  json.RawMessage
	Message string
}

// Objects reads and writes hvkube objects with the API's rules (defaults,
// validation, finalizers). Errors wrap the api error categories.
type Objects interface {
	Get(ctx context.Context, kind, name string) (api.Object, error)
	List(ctx context.Context, kind string) ([]api.Object, error)
	Create(ctx context.Context, o api.Object) (api.Object, error)
	Delete(ctx context.Context, kind, name string) error
}

// Desktops is what the tools act on.
type Desktops interface {
	Objects
	// Do runs one computer-use action, or a batch, in any vocabulary
	// api.Action takes, on a sandbox. width, when not 0, is the caller's
	// screen space: screenshots are scaled to it and pixel coordinates
	// are read in it (Gemini's are on their grid).
	Do(ctx context.Context, sandbox string, a api.Action, width int) (Result, error)
	// Complete ends the running attempt of an mcp-agent.
	Complete(ctx context.Context, agent string, c Completion) error
	// AskHuman puts a question to a person for agent and waits up to wait
	// for the answer. It returns ErrNoAnswer (with the question still
	// pending) when none came in time.
	AskHuman(ctx context.Context, agent, question string, wait time.Duration) (string, error)
}

// ErrNoAnswer: nobody answered a question in time; it stays pending.
var ErrNoAnswer = errors.New("no answer yet")

// Scope is what a caller may reach.
type Scope struct {
	// Sandbox and Agent are the caller's own, if it has them: the
	// defaults of the sandbox and agent arguments.
	Sandbox, Agent string
	// Restricted callers reach their Sandbox and Agent and nothing else.
	Restricted bool
	// Check, when set, says whether a restricted caller may do what n
	// needs now (its attempt still runs and holds the sandbox; nobody else
	// holds the sandbox's input). nil: the sandbox's current agent must be
	// the caller's Agent.
	Check func(ctx context.Context, n Need) error
	// Allow, when set, says whether a restricted caller may call the
	// tool named at all (an mcp-agent's spec.mcp.tools). Its refusal is
	// the call's tool error, and nothing is done; tools/list leaves out
	// the tools it refuses. nil: every tool.
	Allow func(ctx context.Context, tool string) error
}

// Need is what a tool call needs of a restricted caller's attempt.
type Need int

const (
	// NeedAgent: speak for the agent (complete_task, ask_human).
	NeedAgent Need = iota
	// NeedView: see the sandbox (screenshot, zoom, cursor_position, wait).
	NeedView
	// NeedAct: act on the sandbox (input, the browser tools).
	NeedAct
)

// ToolNames are the names of the tools NewServer serves.
var ToolNames = []string{
	"screenshot", "left_click", "right_click", "middle_click", "double_click", "triple_click", "mouse_move",
	"left_click_drag", "left_mouse_down", "left_mouse_up", "scroll", "type", "key", "hold_key", "wait", "zoom",
	"cursor_position", "accessibility", "computer", "list_sandboxes", "acquire_sandbox", "release_sandbox", "complete_task", "ask_human",
	"browser_navigate", "browser_click", "browser_type", "browser_snapshot", "browser_back", "browser_tabs",
}

// Options configure NewServer.
type Options struct {
	Version string
	Logger  *slog.Logger
	// Scope tells what the caller of a request (its token, in extra) may
	// reach; nil is everything.
	Scope func(ctx context.Context, extra *mcp.RequestExtra) Scope
}

// Bounds on the tools that wait.
const (
	DefaultAcquireWait = 60 * time.Second
	MaxAcquireWait     = 300 * time.Second
	DefaultAskWait     = 120 * time.Second
	MaxAskWait         = 300 * time.Second
	MaxQuestion        = 4096
	MaxCompleteMessage = 4096
)

// NewServer returns an MCP server with hvkube's tools over d.
func NewServer(d Desktops, opts Options) *mcp.Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "hvkube", Title: "hvkube desktops", Version: opts.Version}, &mcp.ServerOptions{
		Logger: opts.Logger,
		Instructions: "Computer-use tools for hvkube's desktop sandboxes. Each tool acts on the sandbox named by its " +
			"`sandbox` argument (left out when the token is scoped to one). Take a screenshot to see the screen; " +
			"coordinates are pixels of the screenshot, in the space its `width` sets. Finish an mcp-agent's task with complete_task.",
	})
	t := &tools{d: d, opts: opts}
	t.register(s)
	s.AddReceivingMiddleware(t.allowTools)
	return s
}

// allowTools refuses a tool call that the caller's scope does not allow,
// before the tool sees it, and leaves such tools out of the caller's
// tools/list.
func (t *tools) allowTools(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch r := req.(type) {
		case *mcp.CallToolRequest:
			if r.Params == nil {
				break
			}
			if sc := t.scopeOf(ctx, r.Extra); sc.Restricted && sc.Allow != nil {
				if err := sc.Allow(ctx, r.Params.Name); err != nil {
					return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: errorText(err).Error()}}}, nil
				}
			}
		case *mcp.ListToolsRequest:
			res, err := next(ctx, method, req)
			list, ok := res.(*mcp.ListToolsResult)
			sc := t.scopeOf(ctx, r.Extra)
			if err != nil || !ok || !sc.Restricted || sc.Allow == nil {
				return res, err
			}
			kept := make([]*mcp.Tool, 0, len(list.Tools))
			for _, tool := range list.Tools {
				if sc.Allow(ctx, tool.Name) == nil {
					kept = append(kept, tool)
				}
			}
			out := *list
			out.Tools = kept
			return &out, nil
		}
		return next(ctx, method, req)
	}
}

type tools struct {
	d    Desktops
	opts Options
}

func (t *tools) scope(ctx context.Context, req *mcp.CallToolRequest) Scope {
	if req == nil {
		return t.scopeOf(ctx, nil)
	}
	return t.scopeOf(ctx, req.Extra)
}

func (t *tools) scopeOf(ctx context.Context, extra *mcp.RequestExtra) Scope {
	if t.opts.Scope == nil {
		return Scope{}
	}
	return t.opts.Scope(ctx, extra)
}

// ErrForbidden: the caller's token does not reach what it named.
var ErrForbidden = errors.New("forbidden")

// sandbox resolves the sandbox a call acts on, for what n needs.
func (t *tools) sandbox(ctx context.Context, req *mcp.CallToolRequest, given string, n Need) (string, error) {
	sc := t.scope(ctx, req)
	if given == "" {
		given = sc.Sandbox
	}
	if given == "" {
		return "", api.Invalid("sandbox", "required: the sandbox to act on (list_sandboxes lists them; acquire_sandbox takes one from a pool)")
	}
	if err := api.ValidateName("sandbox", given); err != nil {
		return "", err
	}
	if sc.Restricted && given != sc.Sandbox {
		return "", fmt.Errorf("%w: this token reaches only sandbox %q, not %q", ErrForbidden, sc.Sandbox, given)
	}
	if sc.Restricted && sc.Check != nil {
		if err := sc.Check(ctx, n); err != nil {
			return "", fmt.Errorf("%w: %w", ErrForbidden, err)
		}
		return given, nil
	}
	if sc.Restricted && sc.Agent != "" {
		// An agent's token outlives its hold on the sandbox (it expires
		// at the attempt's deadline); the sandbox may be another's now.
		o, err := t.d.Get(ctx, api.KindSandbox, given)
		if err != nil {
			return "", err
		}
		if cur := o.(*api.Sandbox).Status.CurrentAgent; cur != sc.Agent {
			return "", fmt.Errorf("%w: agent %s no longer holds sandbox %s", ErrForbidden, sc.Agent, given)
		}
	}
	return given, nil
}

// agent resolves the agent a call speaks for: the caller's own, or the
// one that holds the sandbox.
func (t *tools) agent(ctx context.Context, req *mcp.CallToolRequest, sandbox string) (string, error) {
	sc := t.scope(ctx, req)
	if sc.Restricted && sc.Check != nil {
		if sandbox != "" && sandbox != sc.Sandbox {
			return "", fmt.Errorf("%w: this token reaches only sandbox %q, not %q", ErrForbidden, sc.Sandbox, sandbox)
		}
		if err := sc.Check(ctx, NeedAgent); err != nil {
			return "", fmt.Errorf("%w: %w", ErrForbidden, err)
		}
		return sc.Agent, nil
	}
	sb, err := t.sandbox(ctx, req, sandbox, NeedAgent)
	if sc.Agent != "" && (sandbox == "" || sb == sc.Sandbox) {
		return sc.Agent, nil
	}
	if err != nil {
		return "", err
	}
	o, err := t.d.Get(ctx, api.KindSandbox, sb)
	if err != nil {
		return "", err
	}
	a := o.(*api.Sandbox).Status.CurrentAgent
	if a == "" {
		return "", fmt.Errorf("sandbox %s has no agent: there is no task to complete or to ask about: %w", sb, api.ErrConflict)
	}
	return a, nil
}

// errorText is how an error reads in a tool result: the API's message,
// marked as bad input when it is.
func errorText(err error) error {
	var fe *api.FieldError
	if errors.As(err, &fe) && errors.Is(err, api.ErrInvalid) {
		return fmt.Errorf("invalid %w", err)
	}
	return err
}

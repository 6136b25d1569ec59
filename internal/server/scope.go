package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
)

// What an agent's scoped token reaches. The least trusted party in the
// system is the agent loop that holds such a token (a model that reads web
// pages), so the token is narrow:
//
//   - its own agent: read it, its result, logs and files; complete the
//     attempt; ask a person (hitl);
//   - its attempt's sandbox, while (and only while) that attempt holds it:
//     read the object, the screen, the accessibility tree and the live
//     view; send input, run programs, read and write guest files, use the
//     clipboard, OSWorld's guest API (guestapi.go), reach the guest's TCP
//     ports (port forwards, ports.go), open a terminal (terminal.go) —
//     unless a person holds the sandbox;
//   - MCP, whose tools apply the same rules per call.
//
// It never creates, replaces, patches or deletes an object, never mints a
// token that outlives its attempt, never pauses, saves, resets or takes
// control of a sandbox. Everything else is refused with 403.

// need is what a request of a scoped token needs of the token's attempt.
type need int

const (
	needRefused     need = iota // the token never reaches this
	needAgentRead               // the agent, as it is now: its latest attempt is the token's
	needAgentWrite              // the attempt is running
	needSandboxRead             // the attempt holds the sandbox
	needSandboxAct              // … and no person holds it
	needMCP                     // the tools check per call
)

// scopedNeed says what the request method path of a token of scope sc
// needs, or needRefused.
func scopedNeed(method, path string, sc authtoken.Scope) need {
	if path == "/mcp" {
		return needMCP
	}
	get := method == http.MethodGet || method == http.MethodHead
	if rest, ok := strings.CutPrefix(path, "/api/v1/agents/"+sc.Agent); ok && (rest == "" || rest[0] == '/') {
		switch {
		case get && (rest == "" || rest == "/result" || rest == "/logs" || rest == "/hitl" || strings.HasPrefix(rest, "/files/")):
			return needAgentRead
		case method == http.MethodPost && (rest == "/complete" || rest == "/hitl" || rest == "/heartbeat"):
			return needAgentWrite
		}
		return needRefused
	}
	if rest, ok := strings.CutPrefix(path, "/api/v1/sandboxes/"+sc.Sandbox); ok && (rest == "" || rest[0] == '/') {
		switch {
		case get && (rest == "" || rest == "/screen" || rest == "/display" || rest == "/accessibility"):
			return needSandboxRead
		case method == http.MethodPost && rest == "/display/token":
			return needSandboxRead // a view of the attempt's own, no input (displayToken)
		case method == http.MethodPost && (rest == "/input" || rest == "/exec" || rest == "/clipboard" || rest == "/browser"):
			return needSandboxAct
		case get && rest == "/clipboard":
			return needSandboxAct // what a person copies while they hold it is theirs
		case rest == "/files" && (get || method == http.MethodPut):
			return needSandboxAct // the guest's files are as much as exec
		case get && rest == "/terminal":
			return needSandboxAct // a shell in the guest is exec
		case strings.HasPrefix(rest, "/osworld/"):
			return needSandboxAct // OSWorld's guest API runs programs, as exec does
		case strings.HasPrefix(rest, "/ports/"):
			// Every method: automation clients POST and open WebSockets,
			// and drive the guest as input does.
			return needSandboxAct
		}
	}
	return needRefused
}

// scopeError is a scoped token's request that its attempt may not make now.
func scopeError(code int, format string, args ...any) error {
	return &httpError{code: code, err: fmt.Errorf(format, args...)}
}

// checkScope checks that the attempt of sc may do what n says now: the
// agent is the one the token was minted for (same UID), the attempt is the
// token's, and for the sandbox, the attempt holds it (and, to act, no
// person does). Its errors carry the status to answer.
//
// It reads the agent and the sandbox from the server's watch caches
// (Options.Cached), and the store only to confirm a refusal: a token's
// request then costs the store nothing while its attempt runs, and one
// whose attempt started a moment ago, before the caches brought it, is
// not refused for that. What a lagging cache lets through for that
// moment the node refuses itself (it keeps the take-overs).
func (s *Server) checkScope(ctx context.Context, sc authtoken.Scope, n need) error {
	if s.opts.Cached != nil {
		cached := func(_ context.Context, kind, name string) (api.Object, error) {
			if o, ok := s.opts.Cached(kind, name); ok {
				return o, nil
			}
			return nil, api.ErrNotFound
		}
		if s.checkScopeWith(ctx, cached, sc, n) == nil {
			return nil
		}
	}
	return s.checkScopeWith(ctx, s.opts.Store.Get, sc, n)
}

func (s *Server) checkScopeWith(ctx context.Context, get func(ctx context.Context, kind, name string) (api.Object, error), sc authtoken.Scope, n need) error {
	if n == needRefused {
		return scopeError(http.StatusForbidden, "an agent's token reaches only its own agent (%s) and, while its attempt holds it, sandbox %s", sc.Agent, sc.Sandbox)
	}
	if n == needMCP {
		return nil
	}
	o, err := get(ctx, api.KindAgent, sc.Agent)
	if errors.Is(err, api.ErrNotFound) {
		return scopeError(http.StatusForbidden, "agent %s no longer exists: its token reaches nothing", sc.Agent)
	}
	if err != nil {
		return err
	}
	a := o.(*api.Agent)
	switch {
	case a.Metadata.UID != sc.UID:
		return scopeError(http.StatusForbidden, "this token is of an agent %s that was deleted: it reaches nothing of the agent of that name now", sc.Agent)
	case a.Metadata.DeletionTimestamp != nil:
		return scopeError(http.StatusForbidden, "agent %s is being deleted: its token reaches nothing", sc.Agent)
	}
	running := a.Status.Phase == api.AgentRunning && a.Status.Attempts == sc.Attempt && a.Status.Sandbox == sc.Sandbox
	if n == needAgentRead {
		upcoming := a.Status.Phase == api.AgentScheduled && a.Status.Attempts+1 == sc.Attempt
		if a.Status.Attempts == sc.Attempt || upcoming {
			return nil
		}
		return scopeError(http.StatusForbidden, "this token is of attempt %d of agent %s, which is at attempt %d", sc.Attempt, sc.Agent, a.Status.Attempts)
	}
	if !running {
		return scopeError(http.StatusForbidden, "attempt %d of agent %s is not running (agent %s, attempt %d): its token no longer acts", sc.Attempt, sc.Agent, orPending(a.Status.Phase), a.Status.Attempts)
	}
	if n == needAgentWrite {
		return nil
	}
	so, err := get(ctx, api.KindSandbox, sc.Sandbox)
	if errors.Is(err, api.ErrNotFound) {
		return scopeError(http.StatusForbidden, "sandbox %s no longer exists", sc.Sandbox)
	}
	if err != nil {
		return err
	}
	sb := so.(*api.Sandbox)
	if sb.Status.CurrentAgent != sc.Agent {
		return scopeError(http.StatusForbidden, "agent %s's token no longer reaches sandbox %s: the agent does not hold it", sc.Agent, sc.Sandbox)
	}
	if c := sb.Status.Control; n == needSandboxAct && c != nil {
		return scopeError(http.StatusConflict, "%s holds sandbox %s's input since %s: an agent may not act on it until they hand it back", c.Holder, sc.Sandbox, c.Since.Format(time.RFC3339))
	}
	return nil
}

// callerKey is the context key of the scope of the request's token.
type callerKey struct{}

// withScope marks ctx as a request made with a scoped token of sc.
func withScope(ctx context.Context, sc authtoken.Scope) context.Context {
	return context.WithValue(ctx, callerKey{}, sc)
}

// scopeOf returns the scope of the request's token, if it was a scoped
// token.
func scopeOf(ctx context.Context) (authtoken.Scope, bool) {
	sc, ok := ctx.Value(callerKey{}).(authtoken.Scope)
	return sc, ok
}

// verifyScoped returns the scope of a bearer token in the Authorization
// header h, if it is a valid scoped token.
func (s *Server) verifyScoped(h string) (authtoken.Scope, bool) {
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || !authtoken.Is(tok) || s.opts.ScopedKey == nil {
		return authtoken.Scope{}, false
	}
	sc, err := s.opts.ScopedKey.Verify(tok, time.Now())
	return sc, err == nil
}

package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/cdp"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/mcptools"
	"github.com/hvkube/hvkube/internal/osworld"
	"github.com/hvkube/hvkube/internal/store"
)

// MCP at /mcp speaks Streamable HTTP in both revisions clients use:
//
//   - 2026-07-28, stateless: every request says its revision in the
//     Mcp-Protocol-Version header and stands alone; the sandbox travels
//     as a tool argument.
//   - 2025-11-25 (and older): initialize opens a session (Mcp-Session-Id),
//     kept until the client deletes it or it idles for MCPSessionIdle.
//
// Requests pass the guard (a foreign Origin is refused) and the bearer
// token check like any other; a scoped token reaches /mcp, and its tools
// reach only its own sandbox and agent. The SDK's DNS-rebinding check
// stays on as well.

// Bounds on MCP sessions. An agent's token has a share of its own, and
// agents' tokens together leave room for the server's token: no agent can
// lock people (or other agents) out of MCP by opening sessions.
const (
	MCPSessionIdle       = 30 * time.Minute
	MaxMCPSessions       = 1000
	MaxMCPSessionsAgent  = 8   // per agent's token
	MCPSessionsForServer = 100 // of MaxMCPSessions, kept for the server's token
	statelessMCPRev      = "2026-07-28"
)

func (s *Server) mcpRoutes() {
	// The SDK logs every connection at Info; keep its warnings.
	log := slog.New(minLevel{s.log.Handler(), slog.LevelWarn})
	srv := mcptools.NewServer(&serverDesktops{s: s}, mcptools.Options{Version: s.opts.Version, Logger: log, Scope: s.mcpScope})
	get := func(*http.Request) *mcp.Server { return srv }
	owners := &mcpOwners{m: map[string]string{}}
	stateless := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: true, Logger: log, MaxRequestBodyBytes: s.opts.MaxBody})
	sessions := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{SessionTimeout: MCPSessionIdle, Logger: log, MaxRequestBodyBytes: s.opts.MaxBody})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			// Read the body here, within the body deadline, and lift the
			// deadline: a tool call may take minutes (ask_human).
			body, err := s.readBody(w, r)
			if err != nil {
				s.failBody(w, r, err)
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		if v := r.Header.Get("Mcp-Protocol-Version"); v >= statelessMCPRev {
			stateless.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			owner := s.mcpOwner(r)
			if err := owners.admit(srv, owner); err != nil {
				writeError(w, http.StatusServiceUnavailable, err)
				return
			}
			w = &sessionCapture{ResponseWriter: w, note: func(id string) { owners.add(id, owner) }}
		}
		sessions.ServeHTTP(w, r)
	})
	s.mux.Handle("/mcp", s.mcpAuth(h))
	s.mux.HandleFunc("POST /api/v1/agents/{name}/token", s.agentToken)
}

// minLevel drops records below its level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}
func (h minLevel) WithGroup(g string) slog.Handler { return minLevel{h.Handler.WithGroup(g), h.min} }

// mcpOwner names whose token opens a session: an agent's attempt, or ""
// for the server's token (and an open server).
func (s *Server) mcpOwner(r *http.Request) string {
	if sc, ok := s.verifyScoped(r.Header.Get("Authorization")); ok {
		return "agent/" + sc.Agent + "/" + sc.UID
	}
	return ""
}

// mcpOwners remembers who opened each MCP session, to give every agent's
// token a share of the sessions.
type mcpOwners struct {
	mu sync.Mutex        // guards m
	m  map[string]string // session ID -> owner
}

func (o *mcpOwners) add(id, owner string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[id] = owner
}

// admit decides whether owner may open one more session of srv's: it
// forgets sessions that ended (closed or idled out), then counts.
func (o *mcpOwners) admit(srv *mcp.Server, owner string) error {
	live := map[string]bool{}
	for ss := range srv.Sessions() {
		live[ss.ID()] = true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	mine, agents := 0, 0
	for id, who := range o.m {
		switch {
		case !live[id]:
			delete(o.m, id)
			continue
		case who == owner:
			mine++
		}
		if who != "" {
			agents++
		}
	}
	switch {
	case len(live) >= MaxMCPSessions:
		return fmt.Errorf("%d MCP sessions are open: close some (DELETE /mcp) or use the stateless revision %s", MaxMCPSessions, statelessMCPRev)
	case owner != "" && mine >= MaxMCPSessionsAgent:
		return fmt.Errorf("this agent's token has %d MCP sessions open, its share: close one (DELETE /mcp) or use the stateless revision %s", mine, statelessMCPRev)
	case owner != "" && agents >= MaxMCPSessions-MCPSessionsForServer:
		return fmt.Errorf("agents' tokens hold %d MCP sessions, all they may: close some or use the stateless revision %s", agents, statelessMCPRev)
	}
	return nil
}

// sessionCapture notes the session ID the SDK answers an initialize with.
type sessionCapture struct {
	http.ResponseWriter
	note func(id string)
	done bool
}

func (c *sessionCapture) WriteHeader(code int) {
	if !c.done {
		c.done = true
		if id := c.Header().Get("Mcp-Session-Id"); id != "" && code < 300 {
			c.note(id)
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *sessionCapture) Write(b []byte) (int, error) {
	if !c.done {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(b)
}

func (c *sessionCapture) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (c *sessionCapture) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// mcpAuth puts the caller's token into the request for the tools (and
// for the SDK, which ties a session to the token that opened it).
// authenticate has already refused wrong tokens when the server has one.
func (s *Server) mcpAuth(next http.Handler) http.Handler {
	withToken := auth.RequireBearerToken(s.verifyMCPToken, nil)(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if s.opts.Token == "" && (!ok || !authtoken.Is(tok)) {
			next.ServeHTTP(w, r) // an open server: no token needed
			return
		}
		withToken.ServeHTTP(w, r)
	})
}

func (s *Server) verifyMCPToken(_ context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
	now := time.Now()
	if s.opts.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.Token)) == 1 {
		return &auth.TokenInfo{UserID: "hvkube", Expiration: now.Add(time.Hour)}, nil
	}
	if authtoken.Is(tok) && s.opts.ScopedKey != nil {
		if sc, err := s.opts.ScopedKey.Verify(tok, now); err == nil {
			return &auth.TokenInfo{UserID: "agent/" + sc.Agent + "/" + sc.Sandbox, Expiration: time.Unix(sc.Expires, 0),
				Extra: map[string]any{"scope": sc}}, nil
		}
	}
	if s.opts.Token == "" {
		return &auth.TokenInfo{Expiration: now.Add(time.Hour)}, nil
	}
	return nil, fmt.Errorf("%w: missing or wrong bearer token", auth.ErrInvalidToken)
}

// mcpScope is what the token of an MCP request reaches.
func (s *Server) mcpScope(_ context.Context, extra *mcp.RequestExtra) mcptools.Scope {
	if extra == nil || extra.TokenInfo == nil {
		return mcptools.Scope{}
	}
	sc, ok := extra.TokenInfo.Extra["scope"].(authtoken.Scope)
	if !ok {
		return mcptools.Scope{}
	}
	return mcptools.Scope{Sandbox: sc.Sandbox, Agent: sc.Agent, Restricted: true, Check: s.checkTool(sc), Allow: s.allowTool(sc)}
}

// allowTool limits the agent of sc to the tools its spec.mcp.tools lists
// (all of them when it lists none). An agent that is gone, or another of
// the same name, is left to checkTool, which refuses it whatever it calls.
func (s *Server) allowTool(sc authtoken.Scope) func(ctx context.Context, tool string) error {
	return func(ctx context.Context, tool string) error {
		o, err := s.opts.Store.Get(ctx, api.KindAgent, sc.Agent)
		if errors.Is(err, api.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err // refused: the list cannot be read
		}
		a := o.(*api.Agent)
		if a.Metadata.UID != sc.UID || a.Spec.MCP == nil || len(a.Spec.MCP.Tools) == 0 || slices.Contains(a.Spec.MCP.Tools, tool) {
			return nil
		}
		return fmt.Errorf("%w: agent %s may not call tool %s: its spec.mcp.tools lists only %s", mcptools.ErrForbidden, sc.Agent, tool, strings.Join(a.Spec.MCP.Tools, ", "))
	}
}

// checkTool is the per-call check of MCP tools for the attempt of sc: the
// same rules as the REST API's (scope.go).
func (s *Server) checkTool(sc authtoken.Scope) func(ctx context.Context, n mcptools.Need) error {
	return func(ctx context.Context, n mcptools.Need) error {
		need := needSandboxAct
		switch n {
		case mcptools.NeedAgent:
			need = needAgentWrite
		case mcptools.NeedView:
			need = needSandboxRead
		}
		return s.checkScope(ctx, sc, need)
	}
}

// AgentTokenResponse answers POST /agents/{name}/token: a token that
// reaches the agent and its sandbox until the attempt's deadline, and the
// addresses to use it at.
type AgentTokenResponse struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	Server    string    `json:"server"`
	MCP       string    `json:"mcp"`
	Agent     string    `json:"agent"`
	Sandbox   string    `json:"sandbox"`
}

// agentToken mints a scoped token for an agent bound to a sandbox: how an
// external agent loop (an mcp-agent) gets its MCP endpoint and credentials.
func (s *Server) agentToken(w http.ResponseWriter, r *http.Request) {
	if s.opts.ScopedKey == nil {
		writeError(w, http.StatusNotImplemented, errors.New("this server mints no scoped tokens"))
		return
	}
	o, err := s.opts.Store.Get(r.Context(), api.KindAgent, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	a := o.(*api.Agent)
	if a.Status.Sandbox == "" || agentstate.Finished(a) || a.Metadata.DeletionTimestamp != nil {
		s.fail(w, r, fmt.Errorf("agent %s is %s: a token is minted for an agent bound to a sandbox (Scheduled or Running): %w", a.Metadata.Name, orPending(a.Status.Phase), api.ErrConflict))
		return
	}
	now := time.Now()
	deadline := now.Add(agentstate.Timeout(a))
	if a.Status.StartedAt != nil {
		deadline = a.Status.StartedAt.Add(agentstate.Timeout(a))
	}
	if !deadline.After(now) {
		s.fail(w, r, fmt.Errorf("agent %s is past its deadline: %w", a.Metadata.Name, api.ErrConflict))
		return
	}
	// A Scheduled agent's token is for the attempt about to start.
	attempt := a.Status.Attempts
	if a.Status.Phase != api.AgentRunning {
		attempt++
	}
	tok := s.opts.ScopedKey.Mint(authtoken.ForAttempt(a, attempt), now, deadline.Sub(now))
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	base := scheme + "://" + r.Host
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, AgentTokenResponse{Token: tok, ExpiresAt: time.Unix(deadline.Unix(), 0).UTC(), Server: base, MCP: base + "/mcp",
		Agent: a.Metadata.Name, Sandbox: a.Status.Sandbox})
}

// serverDesktops is mcptools.Desktops in the server's process.
type serverDesktops struct{ s *Server }

func (d *serverDesktops) Get(ctx context.Context, kind, name string) (api.Object, error) {
	return d.s.opts.Store.Get(ctx, kind, name)
}

func (d *serverDesktops) List(ctx context.Context, kind string) ([]api.Object, error) {
	objs, _, err := d.s.opts.Store.List(ctx, kind, api.Selector{})
	return objs, err
}

func (d *serverDesktops) Create(ctx context.Context, o api.Object) (api.Object, error) {
	if err := d.s.admit(o); err != nil {
		return nil, err
	}
	return d.s.opts.Store.Create(ctx, o)
}

func (d *serverDesktops) Delete(ctx context.Context, kind, name string) error {
	_, _, err := d.s.opts.Store.Delete(ctx, kind, name, store.DeleteOptions{})
	return err
}

func (d *serverDesktops) Do(ctx context.Context, sandbox string, a api.Action, width int) (mcptools.Result, error) {
	if _, err := d.s.opts.Store.Get(ctx, api.KindSandbox, sandbox); err != nil {
		return mcptools.Result{}, err
	}
	if d.s.opts.Actions == nil {
		return mcptools.Result{}, fmt.Errorf("this server runs without a VM backend (start it with --backend qemu): %w", api.ErrUnsupported)
	}
	return d.s.opts.Actions.Do(ctx, sandbox, a, display.Space{Width: width})
}

// Accessibility reads the sandbox's accessibility tree as GET
// .../accessibility does.
func (d *serverDesktops) Accessibility(ctx context.Context, sandbox string) (string, error) {
	info, err := d.s.desktopOf(ctx, sandbox)
	if err != nil {
		return "", err
	}
	if d.s.opts.Sandboxes == nil {
		return "", fmt.Errorf("this server runs without a VM backend (start it with --backend qemu): %w", api.ErrUnsupported)
	}
	if err := linuxOnly(info, "the accessibility tree"); err != nil {
		return "", err
	}
	return osworld.Accessibility(ctx, sandboxGuest{d.s.opts.Sandboxes, sandbox})
}

// Browser reaches the DevTools of the sandbox's browser through the
// node's port dialer, over the sandbox's own network, as the port
// forwards do (ports.go): never through this server's HTTP.
func (d *serverDesktops) Browser(ctx context.Context, sandbox string) (*cdp.Endpoint, error) {
	o, err := d.s.opts.Store.Get(ctx, api.KindSandbox, sandbox)
	if err != nil {
		return nil, err
	}
	pd, ok := d.s.opts.Sandboxes.(PortDialer)
	if !ok {
		return nil, fmt.Errorf("the browser tools reach a guest's browser over its network, and this server's backend reaches no guest ports: %w", api.ErrUnsupported)
	}
	sb := o.(*api.Sandbox)
	if err := mcptools.NoBrowser(sb); err != nil {
		return nil, err
	}
	port := sb.Status.Automation.CDP
	return cdp.NewEndpoint(port, func(ctx context.Context) (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, portDialTimeout)
		defer cancel()
		c, err := pd.DialPort(dctx, sandbox, port)
		if err != nil {
			return nil, err
		}
		return newIdleConn(c, portDialTimeout+cdp.CallTimeout), nil
	}), nil
}

func (d *serverDesktops) Complete(ctx context.Context, agent string, c mcptools.Completion) error {
	_, err := d.s.completeAttempt(ctx, agent, CompleteRequest{Success: &c.Success, Output: c.Output, Message: c.Message}, "MCP (complete_task)")
	return err
}

func (d *serverDesktops) AskHuman(ctx context.Context, agent, question string, wait time.Duration) (string, error) {
	return mcptools.AskOver(ctx, serverHuman{d.s}, agent, question, wait)
}

// serverHuman is the human-in-the-loop API's operations, the ones its
// routes call, so that a question asked over MCP is the same as one asked
// over REST (validation, condition, events).
type serverHuman struct{ s *Server }

func (h serverHuman) Ask(ctx context.Context, agent, question string) (*api.HumanRequest, error) {
	return h.s.ask(ctx, agent, question)
}

func (h serverHuman) Latest(ctx context.Context, agent string, wait time.Duration) (*api.HumanRequest, error) {
	return h.s.latestRequest(ctx, agent, min(wait, MaxHumanWait*time.Second))
}

package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/gateway"
)

// The live display: a sandbox's VNC stream over a WebSocket.
//
//	GET  /api/v1/sandboxes/{name}/display          the API's gateway
//	POST /api/v1/sandboxes/{name}/display/token    a display token for it
//	GET  /display/{sandbox}                        the gateway of DisplayServices
//
// Browsers cannot set headers on a WebSocket, so besides the usual bearer
// token these take a display token as ?token= (and only these: elsewhere a
// token in the URL is not read). They authorize their requests themselves
// (authenticate lets them through); the guard applies as everywhere, so a
// cross-origin upgrade is refused before it gets here.

// controlCheckTTL bounds how long a viewer keeps sending input after
// control moved away from it.
const controlCheckTTL = 250 * time.Millisecond

func (s *Server) displayRoutes() {
	m := s.mux
	m.HandleFunc("GET /api/v1/sandboxes/{name}/display", s.display)
	m.HandleFunc("POST /api/v1/sandboxes/{name}/display/token", s.displayToken)
	m.HandleFunc("GET /display/{sandbox}", s.gatewayDisplay(""))
}

// isDisplayPath reports whether r is for a display WebSocket endpoint,
// which authorizes itself.
func isDisplayPath(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if name, ok := strings.CutPrefix(r.URL.Path, "/display/"); ok {
		return name != "" && !strings.Contains(name, "/")
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v1/sandboxes/")
	name, ok2 := strings.CutSuffix(rest, "/display")
	return ok && ok2 && name != "" && !strings.Contains(name, "/")
}

// viewer is who opens a display.
type viewer struct {
	// control is the take-over ID the viewer's display token carries.
	control string
	// agent, when set, is the attempt whose token opened the display:
	// the view lasts only while that attempt holds the sandbox.
	agent *authtoken.Scope
}

// holdCheckEvery is how often an agent's view of a display checks that
// its attempt still holds the sandbox.
const holdCheckEvery = time.Second

// What a display asks of a viewer without credentials.
type displayAuth int

const (
	authAsAPI    displayAuth = iota // what the API asks: the server's token, if it has one
	authRequired                    // a token, always (DisplayService auth jwt)
	authOpen                        // nothing (DisplayService auth none, from loopback)
)

// authorizeDisplay decides whether r may open sandbox's display: with a
// display token for it (?token=), the server's token, or a scoped token of
// the sandbox; without credentials as mode says. Credentials that are
// given are checked whatever the mode. It answers 401 for missing, wrong
// or expired credentials and 403 for credentials of another sandbox.
func (s *Server) authorizeDisplay(r *http.Request, sandbox string, mode displayAuth) (viewer, *httpError) {
	unauthorized := func(format string, args ...any) (viewer, *httpError) {
		return viewer{}, &httpError{http.StatusUnauthorized, fmt.Errorf(format, args...)}
	}
	if tok := r.URL.Query().Get("token"); tok != "" {
		if s.opts.ScopedKey == nil || !authtoken.IsDisplay(tok) {
			return unauthorized("?token= is not a display token: get one with POST /api/v1/sandboxes/%s/display/token", sandbox)
		}
		c, err := s.opts.ScopedKey.VerifyDisplay(tok, time.Now())
		switch {
		case errors.Is(err, authtoken.ErrExpired):
			return unauthorized("the display token expired at %s: get a new one", time.Unix(c.ExpiresAt, 0).UTC().Format(time.RFC3339))
		case err != nil:
			return unauthorized("the display token is not valid (wrong signature or malformed)")
		case c.Sandbox != sandbox:
			return viewer{}, &httpError{http.StatusForbidden, fmt.Errorf("the display token is for sandbox %q, not %q", c.Sandbox, sandbox)}
		}
		if sc, ok := c.AgentScope(); ok {
			return s.agentViewer(r.Context(), sc)
		}
		return viewer{control: c.Control}, nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		if s.opts.Token != "" && subtle.ConstantTimeCompare([]byte(h), []byte("Bearer "+s.opts.Token)) == 1 {
			return viewer{}, nil
		}
		if sc, ok := s.verifyScoped(h); ok {
			if sc.Sandbox != sandbox {
				return viewer{}, &httpError{http.StatusForbidden, fmt.Errorf("this token reaches only sandbox %q", sc.Sandbox)}
			}
			return s.agentViewer(r.Context(), sc)
		}
		if s.opts.Token != "" || mode == authRequired {
			return unauthorized("wrong bearer token")
		}
	}
	switch {
	case mode == authRequired:
		return unauthorized("a display token is required: add ?token= (hvkube display url %s)", sandbox)
	case mode == authAsAPI && s.opts.Token != "":
		return unauthorized("missing bearer token or ?token= display token")
	}
	return viewer{}, nil
}

// agentViewer is the viewer of an agent's attempt sc, if the attempt holds
// its sandbox now.
func (s *Server) agentViewer(ctx context.Context, sc authtoken.Scope) (viewer, *httpError) {
	if err := s.checkScope(ctx, sc, needSandboxRead); err != nil {
		var he *httpError
		if errors.As(err, &he) {
			return viewer{}, he
		}
		return viewer{}, &httpError{statusOf(err), err}
	}
	return viewer{agent: &sc}, nil
}

// display answers GET /api/v1/sandboxes/{name}/display.
func (s *Server) display(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	v, herr := s.authorizeDisplay(r, name, authAsAPI)
	if herr != nil {
		s.refuseDisplay(w, r, herr)
		return
	}
	// Checked after the credentials, as authenticate would have.
	s.withSandboxes(func(w http.ResponseWriter, r *http.Request) {
		s.serveDisplay(w, r, name, v)
	})(w, r)
}

func (s *Server) refuseDisplay(w http.ResponseWriter, r *http.Request, herr *httpError) {
	s.log.Info("display refused", "path", r.URL.Path, "status", herr.code, "why", herr.err)
	if herr.code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="hvkube"`)
	}
	refuse(w, herr.code, herr.err)
}

// serveDisplay carries the sandbox's display to the viewer.
func (s *Server) serveDisplay(w http.ResponseWriter, r *http.Request, name string, v viewer) {
	if !isWebSocket(r) {
		writeError(w, http.StatusUpgradeRequired, fmt.Errorf("this endpoint is a WebSocket carrying VNC (RFB): open it with a VNC viewer such as noVNC"))
		return
	}
	o := gateway.Options{Sandbox: name, Logger: s.log}
	if v.agent != nil {
		// An agent's view ends when its attempt stops holding the sandbox.
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		go s.whileScopeHolds(ctx, cancel, *v.agent, needSandboxRead, "display session")
		r = r.WithContext(ctx)
	}
	if v.control != "" {
		o.Control = gateway.ControlCache(controlCheckTTL, func(ctx context.Context) bool {
			return s.holdsControl(ctx, name, v.control)
		})
	}
	err := gateway.Serve(w, r, func(ctx context.Context) (io.ReadWriteCloser, error) {
		return s.opts.Sandboxes.DialDisplay(ctx, name)
	}, o)
	if err != nil {
		s.fail(w, r, err)
	}
}

// holdsControl reports whether id is sandbox's current take-over.
func (s *Server) holdsControl(ctx context.Context, sandbox, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	o, err := s.opts.Store.Get(ctx, api.KindSandbox, sandbox)
	if err != nil {
		return false
	}
	c := o.(*api.Sandbox).Status.Control
	return c != nil && c.ID != "" && subtle.ConstantTimeCompare([]byte(c.ID), []byte(id)) == 1
}

// controlToken mints the display token handed to whoever takes control:
// it lets the live view send input for as long as the take-over lasts,
// up to the longest a display token lives.
func controlToken(key authtoken.Key) func(ctx context.Context, sandbox, controlID string) (string, error) {
	return func(ctx context.Context, sandbox, controlID string) (string, error) {
		tok, _ := key.MintDisplay(authtoken.DisplayClaims{Sandbox: sandbox, Control: controlID}, time.Now(), authtoken.MaxDisplayTTL)
		return tok, nil
	}
}

// DisplayTokenRequest is the optional body of POST …/display/token.
type DisplayTokenRequest struct {
	// Control is the key of the sandbox's current take-over (what taking
	// control answered), for a token whose viewer may send input.
	Control    string `json:"control,omitempty"`
	TTLSeconds int    `json:"ttlSeconds,omitempty"`
}

// DisplayTokenResponse is a display token and where to use it.
type DisplayTokenResponse struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	// URL is the display's WebSocket, token included.
	URL string `json:"url"`
	// Page is the dashboard's page of the sandbox, token included (in the
	// fragment, which browsers do not send to servers).
	Page string `json:"page"`
}

// displayToken answers POST /api/v1/sandboxes/{name}/display/token.
func (s *Server) displayToken(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req DisplayTokenRequest
	if !s.decodeOptional(w, r, &req) {
		return
	}
	if req.TTLSeconds < 0 || time.Duration(req.TTLSeconds)*time.Second > authtoken.MaxDisplayTTL {
		s.fail(w, r, api.Invalid("ttlSeconds", "%d is out of range 1..%d", req.TTLSeconds, int(authtoken.MaxDisplayTTL/time.Second)))
		return
	}
	if s.opts.ScopedKey == nil {
		writeError(w, http.StatusNotImplemented, errors.New("this server has no key to sign display tokens"))
		return
	}
	o, err := s.opts.Store.Get(r.Context(), api.KindSandbox, name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	claims := authtoken.DisplayClaims{Sandbox: name}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	sc, scoped := scopeOf(r.Context())
	if scoped {
		// An agent's view lasts while its attempt holds the sandbox, and
		// its token no longer than the agent's own.
		claims = claims.ForScope(sc)
		if ttl == 0 {
			ttl = authtoken.DefaultDisplayTTL
		}
		ttl = min(ttl, time.Until(time.Unix(sc.Expires, 0)).Truncate(time.Second))
		if ttl < time.Second {
			writeError(w, http.StatusForbidden, errors.New("the agent's token expires within a second"))
			return
		}
	}
	if req.Control != "" {
		// Input through the display is for the person who took control,
		// never for an agent's own scoped token.
		if scoped {
			writeError(w, http.StatusForbidden, api.Invalid("control", "an agent's token never gets a display token that sends input"))
			return
		}
		c := o.(*api.Sandbox).Status.Control
		if c == nil || !s.opts.ScopedKey.CheckControlKey(name, c.ID, req.Control) {
			writeError(w, http.StatusConflict, api.Invalid("control", "not the key of the current take-over of sandbox %s: take control first (POST /api/v1/sandboxes/%s/control)", name, name))
			return
		}
		claims.Control = c.ID
	}
	tok, exp := s.opts.ScopedKey.MintDisplay(claims, time.Now(), ttl)
	ws, page := "ws", "http"
	if r.TLS != nil {
		ws, page = "wss", "https"
	}
	q := url.Values{"token": {tok}}.Encode()
	writeJSON(w, http.StatusOK, DisplayTokenResponse{
		Token:     tok,
		ExpiresAt: exp.UTC(),
		URL:       fmt.Sprintf("%s://%s/api/v1/sandboxes/%s/display?%s", ws, r.Host, url.PathEscape(name), q),
		Page:      fmt.Sprintf("%s://%s/#/sandboxes/%s?%s", page, r.Host, url.PathEscape(name), q),
	})
}

// gatewayDisplay answers GET /display/{sandbox} for the sandboxes that a
// DisplayService with the gateway enabled selects: only service (when
// set), or any of them. auth jwt needs a token (a display token, or the
// server's); auth none lets requests from loopback in without one.
func (s *Server) gatewayDisplay(service string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("sandbox")
		// Credentials are checked before "not found" is told, so that
		// the gateway does not list sandboxes to anyone who asks.
		o, err := s.opts.Store.Get(r.Context(), api.KindSandbox, name)
		open := false
		if err == nil {
			open, err = s.gatewayAuth(r.Context(), service, o.GetMeta().Labels)
		}
		mode := authRequired
		if open && fromLoopback(r) {
			mode = authOpen
		}
		v, herr := s.authorizeDisplay(r, name, mode)
		if herr != nil {
			s.refuseDisplay(w, r, herr)
			return
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if s.opts.Sandboxes == nil {
			writeError(w, http.StatusNotImplemented, fmt.Errorf("%s needs a VM backend, and this server runs without one", r.URL.Path))
			return
		}
		s.serveDisplay(w, r, name, v)
	}
}

// gatewayAuth finds the DisplayServices (service only, when set) whose
// gateway serves a sandbox with labels: ErrNotFound when none does; open
// when one of them asks no token (auth none).
func (s *Server) gatewayAuth(ctx context.Context, service string, labels map[string]string) (open bool, err error) {
	items, _, err := s.opts.Store.List(ctx, api.KindDisplayService, api.Selector{})
	if err != nil {
		return false, err
	}
	found := false
	for _, it := range items {
		ds := it.(*api.DisplayService)
		if service != "" && ds.Metadata.Name != service {
			continue
		}
		if ds.Metadata.DeletionTimestamp != nil || !ds.Spec.Selects(labels) {
			continue
		}
		if reason, _ := ds.Spec.GatewayProblem(s.opts.Token != ""); reason != "" {
			continue
		}
		found = true
		if ds.Spec.Gateway.Auth == "none" {
			open = true
		}
	}
	if !found {
		return false, fmt.Errorf("no DisplayService with the gateway enabled selects this sandbox: %w", api.ErrNotFound)
	}
	return open, nil
}

// fromLoopback reports whether r came from this host.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// DisplayHandler serves the display listener of one DisplayService: only
// GET /display/{sandbox} for the sandboxes it selects, behind the same
// guard and token rules as the server's own; hosts are the names the
// listener may be reached by.
func (s *Server) DisplayHandler(service string, hosts HostPolicy) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /display/{sandbox}", s.gatewayDisplay(service))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("this listener serves only GET /display/{sandbox} (DisplayService %s)", service))
	})
	return s.guardHosts(hosts, mux)
}

// Package server serves hvkube's REST API: objects of every kind under
// /api/v1, watches as newline-delimited JSON (or server-sent events), the
// audit log, the sandbox display and control endpoints, MCP at /mcp, and
// health checks.
package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/browsertool"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/hostpath"
	"github.com/hvkube/hvkube/internal/metrics"
	"github.com/hvkube/hvkube/internal/nodeca"
	"github.com/hvkube/hvkube/internal/osworld"
	"github.com/hvkube/hvkube/internal/secrets"
	"github.com/hvkube/hvkube/internal/store"
)

// DefaultMaxBody bounds request bodies.
const DefaultMaxBody = 4 << 20

// Options configure a Server.
type Options struct {
	Store store.API
	// Cached, when set, reads an object from this server's watch caches
	// (false: not cached): the scope checks of an agent's token read
	// there, and confirm only a refusal on the store.
	Cached func(kind, name string) (api.Object, bool)
	Logger *slog.Logger
	// Token, when set, is required as "Authorization: Bearer TOKEN" on every
	// API call.
	Token string
	// MaxBody bounds request bodies; DefaultMaxBody when 0.
	MaxBody int64
	// Sandboxes runs sandbox operations (pause, screen, input, …); nil
	// answers them with 501.
	Sandboxes Sandboxes
	// Actions is the action layer over the same sandboxes: the screen and
	// input endpoints (and MCP) act through it.
	Actions *display.Actions
	// Agents serves the files the node keeps of agents; nil answers 501.
	Agents Agents
	// Ready reports whether the server is ready to serve (controllers
	// started, backend reachable); nil means ready once the store answers.
	Ready func(ctx context.Context) error
	// Version is reported by /version.
	Version string
	// Backend describes the VM backend for /version and /healthz: its
	// name, this node's name, and the accelerator in use and why.
	Backend BackendInfo
	// Hosts are the names a request's Host may carry (see guard.go); the
	// loopback names only when zero.
	Hosts HostPolicy
	// BodyTimeout bounds the time a client takes to send a request body
	// (DefaultBodyTimeout when 0).
	BodyTimeout time.Duration
	// ReadHeaderTimeout, IdleTimeout and ShutdownGrace configure Serve
	// (the Default… values when 0).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	ShutdownGrace     time.Duration
	// ScopedKey checks the scoped tokens of agents' programs.
	ScopedKey authtoken.Key
	// AllowedRoots are the host directories that host paths in objects
	// (template image files, volume hostPaths) must lie under.
	AllowedRoots hostpath.Roots
	// Metrics, when set, is served at /metrics (behind the token, like
	// the API) and times screenshots and input.
	Metrics *metrics.Metrics
	// ControlToken mints the display token handed to a person who takes
	// control of a sandbox: it carries the take-over's ID, so that the
	// live view may send input. Nil hands out none.
	ControlToken func(ctx context.Context, sandbox, controlID string) (string, error)
	// NodeIdentity says which node a node agent's identity names
	// (nodeauth.go); nil takes no nodes.
	NodeIdentity func(ctx context.Context, tok string) (string, error)
	// Webhook serves the admission webhook (AdmissionHandler) on the TLS
	// listeners: with the Kubernetes store, whose API server sends it
	// writes of hvkube's kinds.
	Webhook bool
	// Sealer seals Secrets' values and opens them for the nodes that run
	// a claim; by default one of a key derived from ScopedKey. Nil keeps
	// no Secrets (their routes answer 501).
	Sealer *secrets.Sealer
}

// BackendInfo describes the server's VM backend.
type BackendInfo struct {
	Name        string `json:"backend,omitempty"`
	Node        string `json:"node,omitempty"`
	Accel       string `json:"accel,omitempty"`
	AccelReason string `json:"accelReason,omitempty"`
	// Accelerator, when set, answers Accel and AccelReason at each
	// request: a backend may turn from kvm to tcg while it runs.
	Accelerator func() (accel, reason string) `json:"-"`
}

// now is b with the accelerator in use now.
func (b BackendInfo) now() BackendInfo {
	if b.Accelerator != nil {
		b.Accel, b.AccelReason = b.Accelerator()
	}
	return b
}

// Timeouts used when Options leave them 0.
const (
	DefaultBodyTimeout       = 30 * time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultShutdownGrace     = 10 * time.Second
)

// Server is the HTTP API.
type Server struct {
	opts  Options
	log   *slog.Logger
	mux   *http.ServeMux
	hosts HostPolicy
	// recordings are OSWorld's /start_recording's, until /end_recording.
	recordings osworld.Recordings
	// browsers runs the browser toolset's calls (browsertool.go), and
	// keeps the references each sandbox's tabs handed out.
	browsers *browsertool.Executor
	// The node API's authority (nodeauth.go), made once.
	caOnce sync.Once
	ca     *nodeca.CA
	caErr  error
}

// New builds the server and its routes.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBody == 0 {
		opts.MaxBody = DefaultMaxBody
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&opts.BodyTimeout, DefaultBodyTimeout}, {&opts.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {&opts.IdleTimeout, DefaultIdleTimeout}, {&opts.ShutdownGrace, DefaultShutdownGrace}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if opts.ControlToken == nil && opts.ScopedKey != nil {
		opts.ControlToken = controlToken(opts.ScopedKey)
	}
	if opts.Sealer == nil && opts.ScopedKey != nil {
		opts.Sealer, _ = secrets.NewSealer(opts.ScopedKey.SecretSeed())
	}
	s := &Server{opts: opts, log: opts.Logger, mux: http.NewServeMux(), hosts: opts.Hosts, browsers: browsertool.NewExecutor()}
	if s.hosts.names == nil {
		s.hosts, _ = NewHostPolicy("", nil)
	}
	s.routes()
	return s
}

// Handler returns the server's root handler: the guard (guard.go), then
// authentication, then the routes.
//
// With Options.Webhook, a request that came over TLS to WebhookPath is the
// Kubernetes API server's admission review: AdmissionHandler answers it,
// ahead of the Host check and the token (the API server sends neither).
func (s *Server) Handler() http.Handler {
	api := s.guard(s.authenticate(s.bodyDeadline(s.mux)))
	if !s.opts.Webhook {
		return api
	}
	hook := s.AdmissionHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && r.URL.Path == WebhookPath {
			hook.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET /healthz", s.healthz)
	m.HandleFunc("GET /readyz", s.readyz)
	m.HandleFunc("GET /version", s.version)

	m.HandleFunc("GET /api/v1/events", s.listEvents)
	m.HandleFunc("GET /api/v1/{resource}", s.list)
	m.HandleFunc("POST /api/v1/{resource}", s.create)
	m.HandleFunc("GET /api/v1/{resource}/{name}", s.get)
	m.HandleFunc("PUT /api/v1/{resource}/{name}", s.put)
	m.HandleFunc("DELETE /api/v1/{resource}/{name}", s.delete)
	m.HandleFunc("PATCH /api/v1/sandboxpools/{name}/scale", s.scale)
	m.HandleFunc("GET /api/v1/agents/{name}/result", s.agentResult)
	s.sandboxRoutes()
	s.agentRoutes()
	s.hitlRoutes()
	s.mcpRoutes()
	s.nodeRoutes()
	s.terminalRoutes()
	if s.opts.Metrics != nil {
		m.Handle("GET /metrics", s.opts.Metrics.Handler())
	}
	s.webRoutes()
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no API route for %s %s", r.Method, r.URL.Path))
	})
}

// authenticate checks the bearer token on everything but the health
// checks and the dashboard's files: the server's token reaches everything;
// a scoped token (minted for one attempt of an agent) only what scope.go
// allows, whether or not the server has a token of its own.
func (s *Server) authenticate(next http.Handler) http.Handler {
	want := []byte("Bearer " + s.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case dashboardPath(r.URL.Path), r.URL.Path == "/healthz", r.URL.Path == "/readyz":
			next.ServeHTTP(w, r)
			return
		case isDisplayPath(r): // authorizes itself (display.go)
			next.ServeHTTP(w, r)
			return
		case isTerminalTicket(r): // authorizes itself (terminal.go)
			next.ServeHTTP(w, r)
			return
		case isNodePath(r): // only a node's identity (nodeauth.go)
			next.ServeHTTP(w, r)
			return
		}
		got := r.Header.Get("Authorization")
		if s.opts.Token != "" && subtle.ConstantTimeCompare([]byte(got), want) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		if sc, ok := s.verifyScoped(got); ok {
			if err := s.checkScope(r.Context(), sc, scopedNeed(r.Method, r.URL.Path, sc)); err != nil {
				var he *httpError
				if errors.As(err, &he) {
					refuse(w, he.code, he.err)
				} else {
					s.fail(w, r, err)
				}
				return
			}
			next.ServeHTTP(w, r.WithContext(withScope(r.Context(), sc)))
			return
		}
		if s.opts.Token == "" {
			next.ServeHTTP(w, r) // started with --insecure-no-token
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="hvkube"`)
		refuse(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token: set HVKUBE_TOKEN"))
	})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
	if s.opts.Token == "" {
		io.WriteString(w, "auth: none: started with --insecure-no-token; anyone who reaches this address controls the server\n")
	}
	if b := s.opts.Backend.now(); b.Name != "" {
		fmt.Fprintf(w, "backend: %s on node %s", b.Name, b.Node)
		if b.Accel != "" {
			fmt.Fprintf(w, ", %s (%s)", b.Accel, b.AccelReason)
		}
		io.WriteString(w, "\n")
	} else {
		io.WriteString(w, "backend: none (objects are kept; no VMs run)\n")
	}
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err := s.opts.Store.Ping(ctx)
	if err == nil && s.opts.Ready != nil {
		err = s.opts.Ready(ctx)
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("not ready: %w", err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Version    string `json:"version"`
		APIVersion string `json:"apiVersion"`
		BackendInfo
	}{s.opts.Version, api.Version, s.opts.Backend.now()})
}

// errorBody is the JSON shape of every error.
type errorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// statusOf maps error categories to HTTP status codes, in one place.
func statusOf(err error) int {
	var mbe *http.MaxBytesError
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.code
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, api.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, context.Canceled):
		return 499 // the client went away
	case errors.Is(err, api.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, api.ErrAlreadyExists), errors.Is(err, api.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, api.ErrUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, api.ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, api.ErrGone):
		return http.StatusGone
	case errors.Is(err, api.ErrNoSpace):
		return http.StatusInsufficientStorage
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := statusOf(err)
	if code >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	} else {
		s.log.Debug("request rejected", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	}
	writeError(w, code, err)
}

func writeError(w http.ResponseWriter, code int, err error) {
	msg := err.Error()
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		msg = fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)
	}
	writeJSON(w, code, errorBody{Error: msg, Field: api.FieldOf(err)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	if o, ok := v.(api.Object); ok {
		v = secrets.Redacted(o) // a Secret's values never leave
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.Encode(v)
}

// readBody reads a request body within the size limit and its deadline
// (bodyDeadline), then lifts the deadline. The guard has checked its
// content type.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		w.Header().Set("Connection", "close")
		return nil, &httpError{code: http.StatusRequestTimeout, err: fmt.Errorf("the request body did not arrive within %s", s.opts.BodyTimeout)}
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// httpError carries an explicit status code.
type httpError struct {
	code int
	err  error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

func (s *Server) failBody(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	if errors.As(err, &he) {
		writeError(w, he.code, he.err)
		return
	}
	s.fail(w, r, err)
}

package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/cdp"
)

// Port forwards: HTTP and WebSocket to a TCP port inside a sandbox's
// guest, for automation clients (Playwright's connectOverCDP, Selenium's
// remote WebDriver) and servers that run in the guest.
//
//	ANY /api/v1/sandboxes/{name}/ports/{port}[/{path...}]
//
// goes to http://localhost:PORT/PATH?QUERY inside the guest, over the
// sandbox's own network (PortDialer): the API opens no listener for it.
// The guard and authentication apply as everywhere (an agent's token
// reaches only its own sandbox's ports, and not while a person holds it:
// scope.go); a token in the URL is not read. What the guest gets is the
// client's request without hvkube's credentials: no Authorization, no
// X-Hvkube-* headers, no Origin (the guard has checked it, and it names
// hvkube, which the guest's servers do not know: Chromium's DevTools
// refuses WebSocket upgrades with an Origin it was not told to allow), an
// X-Guest-Authorization header as its Authorization (the guest service's
// own credentials, such as VLC's password), and Host localhost:PORT (DevTools answers only a Host that is localhost
// or an address). What comes back streams unchanged, but for DevTools'
// target lists (/json/version, /json/list, /json, /json/new), whose
// WebSocket URLs name the guest's own localhost: they are rewritten to the
// forward's.
//
// Each request gets a connection of its own to the guest, which ends with
// it (no keep-alive, so no connection is ever shared between requests, let
// alone sandboxes); a WebSocket keeps its connection until either side
// closes it.

// Bounds of port forwards; variables so that tests can shorten them.
var (
	// portDialTimeout bounds the connection to the guest's port: 504
	// past it.
	portDialTimeout = 10 * time.Second
	// portIdleTimeout ends a forwarded connection with no bytes either
	// way for that long. CDP sessions are quiet while an agent waits (on
	// a person, say), so it is long.
	portIdleTimeout = 30 * time.Minute
	// maxPortConns bounds the forwarded connections (requests in flight
	// and open WebSockets) of one sandbox: 503 past it.
	maxPortConns = 64
)

// forwardCSP is added to every forwarded answer: a guest's page opened in
// a browser runs as an origin of its own, never as the API's (whose pages
// may change the server).
const forwardCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// portForwards serves the port forwards of a Server.
type portForwards struct {
	s    *Server
	open connLimit // forwarded connections by sandbox
}

func (s *Server) portRoutes() {
	f := &portForwards{s: s, open: connLimit{max: func() int { return maxPortConns }}}
	s.mux.HandleFunc("/api/v1/sandboxes/{name}/ports/{port}", f.serve)
	s.mux.HandleFunc("/api/v1/sandboxes/{name}/ports/{port}/{path...}", f.serve)
}

// connLimit counts long-lived connections (port forwards, terminals) by
// sandbox, up to max() each.
type connLimit struct {
	max  func() int
	mu   sync.Mutex
	open map[string]int
}

// acquire takes one of sandbox's connections, or reports that it has
// them all.
func (l *connLimit) acquire(sandbox string) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[sandbox] >= l.max() {
		return nil, false
	}
	if l.open == nil {
		l.open = map[string]int{}
	}
	l.open[sandbox]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.open[sandbox]--; l.open[sandbox] <= 0 {
			delete(l.open, sandbox)
		}
	}, true
}

// parsePort reads a port of the path: decimal digits, 1..65535.
func parsePort(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || v[0] < '0' || v[0] > '9' || n < 1 || n > 65535 {
		return 0, api.Invalid("port", "%q is not a TCP port (1..65535)", v)
	}
	return n, nil
}

// guestPath is the escaped path of r below its forward's prefix
// (/api/v1/sandboxes/NAME/ports/PORT), "/" when there is none.
func guestPath(r *http.Request) string {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/api/v1/sandboxes/")
	for range 3 { // NAME, ports, PORT
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			return "/"
		}
		rest = rest[i+1:]
	}
	return "/" + rest
}

func (f *portForwards) serve(w http.ResponseWriter, r *http.Request) {
	s := f.s
	name := r.PathValue("name")
	if r.Method == http.MethodConnect {
		writeError(w, http.StatusMethodNotAllowed, errors.New("a port forward carries HTTP and WebSocket requests, not CONNECT"))
		return
	}
	sc, scoped := scopeOf(r.Context())
	if scoped && sc.Sandbox != name {
		writeError(w, http.StatusForbidden, fmt.Errorf("this token reaches only sandbox %q", sc.Sandbox))
		return
	}
	s.withSandboxes(func(w http.ResponseWriter, r *http.Request) {
		port, err := parsePort(r.PathValue("port"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		pd, ok := s.opts.Sandboxes.(PortDialer)
		if !ok {
			writeError(w, http.StatusNotImplemented, errors.New("port forwards need a backend that reaches guest ports, and this server's has none"))
			return
		}
		release, ok := f.open.acquire(name)
		if !ok {
			writeError(w, http.StatusServiceUnavailable, fmt.Errorf("sandbox %s has %d forwarded connections open, the most it may: close one first", name, maxPortConns))
			return
		}
		defer release()
		// The body is read within the API's bounds (size, deadline)
		// before anything reaches the guest.
		if hasBody(r) && !isWebSocket(r) {
			body, err := s.readBody(w, r)
			if err != nil {
				s.failBody(w, r, err)
				return
			}
			r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		if scoped {
			go s.whileScopeHolds(ctx, cancel, sc, needSandboxAct, "port forward")
		}
		fw := &forward{s: s, pd: pd, name: name, port: port, host: r.Host, tls: r.TLS != nil}
		fw.serve(w, r.WithContext(ctx))
	})(w, r)
}

// whileScopeHolds cancels ctx, with the refusal as its cause, once the
// attempt of sc may no longer do what n says; it checks every
// holdCheckEvery until ctx ends. what names the session it ends, for the
// log (a display session, a port forward).
func (s *Server) whileScopeHolds(ctx context.Context, cancel context.CancelCauseFunc, sc authtoken.Scope, n need, what string) {
	t := time.NewTicker(holdCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.checkScope(cctx, sc, n)
		ccancel()
		var he *httpError
		if errors.As(err, &he) {
			s.log.Info(what+" ended: the agent's attempt may no longer use the sandbox", "sandbox", sc.Sandbox, "agent", sc.Agent, "why", he.err)
			cancel(he)
			return
		}
	}
}

// forward is one forwarded request.
type forward struct {
	s    *Server
	pd   PortDialer
	name string
	port int
	host string // the request's Host: the forward's own address
	tls  bool
}

func (fw *forward) serve(w http.ResponseWriter, r *http.Request) {
	conn, err := fw.dial(r.Context())
	if err != nil {
		fw.failDial(w, r, err)
		return
	}
	// The connection dialled above serves the request; should the
	// transport dial again, it gets a new one.
	var first atomic.Pointer[net.Conn]
	first.Store(&conn)
	defer func() {
		if c := first.Swap(nil); c != nil {
			(*c).Close()
		}
	}()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			if c := first.Swap(nil); c != nil {
				return *c, nil
			}
			return fw.dial(ctx)
		},
		DisableKeepAlives:      true,
		DisableCompression:     true, // Accept-Encoding and what answers it pass unchanged
		MaxResponseHeaderBytes: 64 << 10,
	}
	defer tr.CloseIdleConnections()
	gpath := guestPath(r)
	upath, err := url.PathUnescape(gpath)
	if err != nil {
		upath = gpath
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(fw.port)), Path: upath, RawPath: gpath, RawQuery: r.URL.RawQuery}
			pr.Out.Host = "localhost:" + strconv.Itoa(fw.port)
			stripCredentials(pr.Out.Header)
			// The guest service's own credentials (VLC's web interface asks
			// for a password) come in GuestAuthorizationHeader, since the
			// request's Authorization is hvkube's.
			if v := r.Header.Values(GuestAuthorizationHeader); len(v) == 1 {
				pr.Out.Header.Set("Authorization", v[0])
			}
			pr.Out.Header.Del(GuestAuthorizationHeader)
		},
		Transport:      tr,
		FlushInterval:  -1,
		ModifyResponse: fw.modifyResponse,
		ErrorHandler:   fw.proxyError,
		ErrorLog:       slog.NewLogLogger(fw.s.log.Handler(), slog.LevelDebug),
	}
	rp.ServeHTTP(w, r)
}

// dial connects to the guest's port within portDialTimeout; the
// connection ends after portIdleTimeout without traffic.
func (fw *forward) dial(ctx context.Context) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, portDialTimeout)
	defer cancel()
	c, err := fw.pd.DialPort(dctx, fw.name, fw.port)
	if err != nil {
		return nil, err
	}
	return newIdleConn(c, portIdleTimeout), nil
}

// failDial answers a dial that failed: the error's category when it has
// one (409 not running, 501 no network, …), 504 when the guest did not
// answer in time, 502 otherwise (nothing listens there).
func (fw *forward) failDial(w http.ResponseWriter, r *http.Request, err error) {
	code := statusOf(err)
	switch {
	case r.Context().Err() != nil:
		fw.ended(w, r)
		return
	case code != http.StatusInternalServerError && code != http.StatusGatewayTimeout:
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		code, err = http.StatusGatewayTimeout, fmt.Errorf("port %d of sandbox %s did not answer within %s", fw.port, fw.name, portDialTimeout)
	default:
		code, err = http.StatusBadGateway, fmt.Errorf("no connection to port %d of sandbox %s: %w", fw.port, fw.name, err)
	}
	fw.s.log.Debug("port forward refused", "sandbox", fw.name, "port", fw.port, "status", code, "err", err)
	writeError(w, code, err)
}

// proxyError answers what failed after the dial: the guest closed the
// connection, sent no valid answer, or went quiet.
func (fw *forward) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		fw.ended(w, r)
		return
	}
	code := http.StatusBadGateway
	if isTimeout(err) {
		code = http.StatusGatewayTimeout
	}
	fw.s.log.Debug("port forward failed", "sandbox", fw.name, "port", fw.port, "status", code, "err", err)
	writeError(w, code, fmt.Errorf("port %d of sandbox %s: %w", fw.port, fw.name, err))
}

// ended answers a request whose context ended: the refusal that ended it
// (the agent's attempt let the sandbox go), or nothing when the client
// left.
func (fw *forward) ended(w http.ResponseWriter, r *http.Request) {
	var he *httpError
	if errors.As(context.Cause(r.Context()), &he) {
		writeError(w, he.code, he.err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// GuestAuthorizationHeader carries, through a port forward, the
// Authorization header meant for the guest's service: it reaches the guest
// as its Authorization.
const GuestAuthorizationHeader = "X-Guest-Authorization"

// stripCredentials removes from a forwarded request what is hvkube's: the
// bearer token (the server's or an agent's), hvkube's own headers, and the
// Origin the guard checked.
func stripCredentials(h http.Header) {
	h.Del("Authorization")
	h.Del("Origin")
	for k := range h {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-hvkube-") || strings.HasPrefix(lk, "hvkube-") {
			delete(h, k)
		}
	}
}

// modifyResponse marks the guest's answer as an origin of its own and
// rewrites DevTools' target lists.
func (fw *forward) modifyResponse(resp *http.Response) error {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return nil
	}
	resp.Header.Add("Content-Security-Policy", forwardCSP)
	return cdp.RewriteTargetList(resp, resp.Request.URL.Path, fw.wsURL, fw.frontendURL)
}

// loopbackPort returns the port of hostport when it names the guest's
// own loopback (what DevTools puts in its URLs).
func loopbackPort(hostport string) (string, bool) {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", false
	}
	if h != "localhost" && !(net.ParseIP(h) != nil && net.ParseIP(h).IsLoopback()) {
		return "", false
	}
	if _, err := parsePort(p); err != nil {
		return "", false
	}
	return p, true
}

// prefix is the forward of the guest's port (a string of digits) on this
// server, without the scheme: HOST/api/v1/sandboxes/NAME/ports/PORT.
func (fw *forward) prefix(port string) string {
	return fw.host + "/api/v1/sandboxes/" + url.PathEscape(fw.name) + "/ports/" + port
}

// wsURL maps a WebSocket URL of the guest's loopback (ws://localhost:9222/
// devtools/browser/ID) to the forward of its port; any other URL is left.
func (fw *forward) wsURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") {
		return s
	}
	port, ok := loopbackPort(u.Host)
	if !ok {
		return s
	}
	scheme := "ws"
	if fw.tls {
		scheme = "wss"
	}
	out := scheme + "://" + fw.prefix(port) + u.EscapedPath()
	if u.RawQuery != "" {
		out += "?" + u.RawQuery
	}
	return out
}

// frontendURL maps the DevTools frontend's URL: its ws= (or wss=)
// parameter, HOST:PORT/PATH of the guest's loopback, to the forward, and
// a path on the guest's server (/devtools/inspector.html) to the same path
// through this forward.
func (fw *forward) frontendURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	q := u.Query()
	for _, key := range []string{"ws", "wss"} {
		v := q.Get(key)
		hostport, rest, _ := strings.Cut(v, "/")
		port, ok := loopbackPort(hostport)
		if !ok {
			continue
		}
		q.Del(key)
		nk := "ws"
		if fw.tls {
			nk = "wss"
		}
		q.Set(nk, fw.prefix(port)+"/"+rest)
		u.RawQuery = q.Encode()
	}
	if u.Scheme == "" && u.Host == "" && strings.HasPrefix(u.Path, "/") {
		p := strings.TrimPrefix(fw.prefix(strconv.Itoa(fw.port)), fw.host)
		u.Path, u.RawPath = p+u.Path, ""
	}
	return u.String()
}

// idleConn ends a forwarded connection after idle with no bytes either
// way: every read waits until idle has passed since the latest byte in
// either direction, not since it began, so a long upload does not end a
// quiet download and the other way round.
type idleConn struct {
	net.Conn
	idle time.Duration
	last atomic.Int64 // UnixNano of the latest byte either way
}

func newIdleConn(c net.Conn, idle time.Duration) *idleConn {
	ic := &idleConn{Conn: c, idle: idle}
	ic.last.Store(time.Now().UnixNano())
	return ic
}

func (c *idleConn) deadline() time.Time { return time.Unix(0, c.last.Load()).Add(c.idle) }

func (c *idleConn) Read(p []byte) (int, error) {
	for {
		c.Conn.SetReadDeadline(c.deadline())
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.last.Store(time.Now().UnixNano())
		}
		if n == 0 && isTimeout(err) && time.Now().Before(c.deadline()) {
			continue // the other direction moved meanwhile
		}
		return n, err
	}
}

func (c *idleConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// A server on loopback is reachable from every web page its user opens, so
// the guard answers only requests that name this server and, for anything
// that changes state, come from no web page or from one of its own:
//
//   - Host must be one of the server's own names (DNS rebinding points a
//     page's own name at 127.0.0.1; its requests then carry that name):
//     421 otherwise.
//   - A request that changes state (any method but GET, HEAD and OPTIONS,
//     and every WebSocket upgrade, which browsers send cross-origin
//     without asking) must not come from another origin: an Origin header
//     that is not this server's own, or Sec-Fetch-Site other than
//     same-origin or none, gets 403.
//   - A read that a page on another site embeds (an <img> or <script> of
//     an API URL; Sec-Fetch-Site cross-site or same-site, and not a
//     top-level navigation) gets 403 as well.
//   - A request body must be JSON or YAML (or raw bytes, for guest files):
//     the content types a page may send without asking first (text/plain,
//     forms) get 415, but for the forms of OSWorld's guest API from a
//     client that is no browser.
//
// Clients that are not browsers (the CLI, curl, SDKs) send no Origin and
// no Sec-Fetch-* headers and are not affected. Rejections close the
// connection right after the answer (refuse), so that a body nobody will
// read is not waited for.

// HostPolicy is the set of names a request's Host may carry.
type HostPolicy struct {
	names map[string]bool
	any   bool
}

// LoopbackHosts are always the server's own names.
var LoopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// NewHostPolicy allows the loopback names, the host of addr (the listen
// address) and extra (--allowed-hosts). When addr listens on every
// interface, the addresses of this host's interfaces and its host name are
// allowed too. An extra entry "*" allows any Host (behind a proxy that
// checks it).
func NewHostPolicy(addr string, extra []string) (HostPolicy, error) {
	p := HostPolicy{names: map[string]bool{}}
	add := func(h string) {
		h = strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
		if h != "" {
			p.names[h] = true
		}
	}
	for _, h := range LoopbackHosts {
		add(h)
	}
	for _, h := range extra {
		h = strings.TrimSpace(h)
		if h == "*" {
			p.any = true
			continue
		}
		if strings.ContainsAny(h, "/ ") {
			return HostPolicy{}, fmt.Errorf("--allowed-hosts: %q is not a host name", h)
		}
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		add(h)
	}
	if addr != "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return HostPolicy{}, fmt.Errorf("--addr %q: %w", addr, err)
		}
		add(host)
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			if addrs, err := net.InterfaceAddrs(); err == nil {
				for _, a := range addrs {
					if n, ok := a.(*net.IPNet); ok {
						add(n.IP.String())
					}
				}
			}
			if hn, err := osHostname(); err == nil {
				add(hn)
			}
		}
	}
	return p, nil
}

// Allows reports whether hostport (a Host header) names this server.
func (p HostPolicy) Allows(hostport string) bool {
	if p.any {
		return true
	}
	h := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		h = hh
	}
	h = strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
	return p.names[h]
}

// isWebSocket reports whether r asks to upgrade to a WebSocket.
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

func changesState(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return isWebSocket(r)
	}
	return true
}

// writeContentTypes are the request body types the API reads.
var writeContentTypes = map[string]bool{
	"application/json": true, "application/merge-patch+json": true,
	"application/yaml": true, "application/x-yaml": true, "text/yaml": true, "text/x-yaml": true,
	// Guest files (PUT .../files): not a type a page may send unasked.
	"application/octet-stream": true,
}

// formContentTypes are the bodies of OSWorld's guest API (/file,
// /setup/upload, /window_size), which a page may send unasked: they are
// taken only on those routes, and only from a client that is no browser
// (no Origin, no Sec-Fetch-Site): OSWorld's controllers.
var formContentTypes = map[string]bool{"application/x-www-form-urlencoded": true, "multipart/form-data": true}

// osworldForm reports whether r is a form sent to OSWorld's guest API by
// a client that is not a browser.
func osworldForm(r *http.Request, ct string) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v1/sandboxes/")
	_, route, _ := strings.Cut(rest, "/")
	return ok && formContentTypes[ct] && strings.HasPrefix(route, "osworld/") &&
		r.Header.Get("Origin") == "" && r.Header.Get("Sec-Fetch-Site") == ""
}

// mediaType is r's Content-Type without parameters, lower case.
func mediaType(r *http.Request) string {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(ct))
}

// hasBody reports whether r carries a request body.
func hasBody(r *http.Request) bool {
	return r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}

// guardError is a request the guard refuses, and why.
type guardError struct {
	code int
	msg  string
}

// check applies the rules above to r, with hosts the server's names.
func (s *Server) check(hosts HostPolicy, r *http.Request) *guardError {
	if !hosts.Allows(r.Host) {
		return &guardError{http.StatusMisdirectedRequest, fmt.Sprintf("Host %q is not a name of this server: use 127.0.0.1 or localhost, or start the server with --allowed-hosts", r.Host)}
	}
	site := strings.ToLower(r.Header.Get("Sec-Fetch-Site"))
	if changesState(r) {
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
			return &guardError{http.StatusForbidden, fmt.Sprintf("requests from the web page at %s may not change this server (cross-origin %s refused)", o, r.Method)}
		}
		if site != "" && site != "same-origin" && site != "none" {
			return &guardError{http.StatusForbidden, fmt.Sprintf("a %s request from another site (Sec-Fetch-Site: %s) may not change this server", r.Method, site)}
		}
		if !isWebSocket(r) {
			ct := mediaType(r)
			if (ct != "" && !writeContentTypes[ct] && !osworldForm(r, ct)) || (ct == "" && hasBody(r)) {
				if ct == "" {
					ct = "none"
				}
				return &guardError{http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %s is not accepted: send application/json or application/yaml", ct)}
			}
		}
		return nil
	}
	if (site == "cross-site" || site == "same-site") && !strings.EqualFold(r.Header.Get("Sec-Fetch-Mode"), "navigate") {
		return &guardError{http.StatusForbidden, fmt.Sprintf("pages on other sites may not read from this server (Sec-Fetch-Site: %s, Sec-Fetch-Mode: %s)", site, r.Header.Get("Sec-Fetch-Mode"))}
	}
	return nil
}

// sameOrigin reports whether the Origin header origin is this server as
// reached through host (the request's Host).
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false // "null" (sandboxed frames, file: pages) included
	}
	return strings.EqualFold(u.Host, host)
}

// guard refuses what check refuses, before authentication and before a
// body is read.
func (s *Server) guard(next http.Handler) http.Handler {
	return s.guardHosts(s.hosts, next)
}

// guardHosts is guard with hosts as the server's names.
func (s *Server) guardHosts(hosts HostPolicy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e := s.check(hosts, r); e != nil {
			level := slog.LevelDebug
			if e.code != http.StatusUnsupportedMediaType {
				level = slog.LevelWarn // a web page, or a name that is not ours
			}
			s.log.Log(r.Context(), level, "request refused", "method", r.Method, "path", r.URL.Path, "host", r.Host, "origin", r.Header.Get("Origin"), "status", e.code, "why", e.msg)
			refuse(w, e.code, errors.New(e.msg))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refuse answers an early rejection (the guard's, authentication's) and
// closes the connection right after the answer, without reading the
// request body: a Connection: close answer alone is not enough, as
// net/http still reads up to 256 KB of an announced body before it closes,
// for as long as a client takes to trickle it in. The answer carries its
// length and is followed by a half-close, so the client sees all of it and
// then the end of the connection at once; the connection is released when
// the client closes its side, or after refuseLinger.
func refuse(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Connection", "close")
	held := &heldAnswer{header: w.Header(), code: http.StatusOK}
	writeError(held, code, err)
	w.Header().Set("Content-Length", strconv.Itoa(held.body.Len()))
	w.WriteHeader(held.code)
	w.Write(held.body.Bytes())
	rc := http.NewResponseController(w)
	if rc.Flush() == nil {
		if conn, _, err := rc.Hijack(); err == nil {
			closeAfterAnswer(conn)
			return
		}
	}
	// Not a connection of its own to close (HTTP/2): the server closes
	// after the answer, and a past deadline makes its read of the body
	// end at once.
	rc.SetReadDeadline(time.Now())
}

// refuseLinger is how long a refused connection stays half-open after the
// answer, and refuseDrain how much of the client's body is discarded
// meanwhile: closing a connection with unread data resets it, and a reset
// can make the client lose the answer it has not read yet (net/http waits
// as long for the same reason).
const (
	refuseLinger = 500 * time.Millisecond
	refuseDrain  = 256 << 10
)

// closeAfterAnswer half-closes conn, whose answer is written, and closes it
// once the client has closed its side, or after refuseLinger.
func closeAfterAnswer(conn net.Conn) {
	defer conn.Close()
	hc, ok := conn.(interface{ CloseWrite() error })
	if !ok || hc.CloseWrite() != nil {
		return
	}
	conn.SetReadDeadline(time.Now().Add(refuseLinger))
	io.CopyN(io.Discard, conn, refuseDrain)
}

// heldAnswer keeps an answer back so that its length is known before it
// is sent.
type heldAnswer struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (a *heldAnswer) Header() http.Header         { return a.header }
func (a *heldAnswer) WriteHeader(code int)        { a.code = code }
func (a *heldAnswer) Write(b []byte) (int, error) { return a.body.Write(b) }

// bodyDeadline bounds the time a client may take to send its request body:
// a body that trickles in holds a connection and a goroutine. Streams of
// the server's own (watches) and WebSocket upgrades carry no body and are
// not bounded. readBody lifts the deadline once the body is in, so that
// the server still notices a client that goes away during long work.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hasBody(r) && !isWebSocket(r) {
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

var osHostname = os.Hostname

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/cdp"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/testwait"
)

// The port forwards through the real server and a real node over the fake
// backend, whose guest ports lead to a server of the test (guestApp).

// guestSaw is what guestApp's /echo answers: the request as it arrived
// in the guest.
type guestSaw struct {
	Method, Path, RawPath, Query, Host, Body string
	Authorization, Origin, Control           string
}

// guestApp is the test's server "inside" the guest: /echo answers what it
// got, /ws echoes WebSocket messages after a first one that names the
// Authorization it saw, and /json/… answer as Chromium's DevTools does on
// port 9222 (and, like it, only to a Host that is localhost or an
// address), with /devtools/… its WebSockets (echoes).
func guestApp(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/echo/", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		json.NewEncoder(w).Encode(guestSaw{
			Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Query: r.URL.RawQuery, Host: r.Host, Body: string(b),
			Authorization: r.Header.Get("Authorization"), Origin: r.Header.Get("Origin"), Control: r.Header.Get(api.ControlHeader),
		})
	})
	echo := func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		ctx := r.Context()
		if err := c.Write(ctx, websocket.MessageText, []byte("auth="+r.Header.Get("Authorization"))); err != nil {
			return
		}
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := c.Write(ctx, typ, b); err != nil {
				return
			}
		}
	}
	mux.HandleFunc("/ws", echo)
	mux.HandleFunc("/devtools/", echo)
	devtools := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if h, _, _ := strings.Cut(r.Host, ":"); h != "localhost" && h != "127.0.0.1" {
				http.Error(w, "Host header is specified and is not an IP address or localhost.", http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json; charset=UTF-8")
			io.WriteString(w, body)
		}
	}
	version := devtools(`{"Browser": "Chrome/130.0", "Protocol-Version": "1.3", "webSocketDebuggerUrl": "ws://localhost:9222/devtools/browser/b-1"}`)
	mux.HandleFunc("/json/version", version)
	mux.HandleFunc("/json/version/", version)
	mux.HandleFunc("/json/list", devtools(`[{"id": "P1", "type": "page", "url": "https://example.com/<a>", "devtoolsFrontendUrl": "/devtools/inspector.html?ws=localhost:9222/devtools/page/P1", "webSocketDebuggerUrl": "ws://localhost:9222/devtools/page/P1"}, {"id": "W1", "type": "worker", "webSocketDebuggerUrl": "ws://10.0.2.2:9222/devtools/page/W1"}]`))
	return mux
}

// portRig is a server with the token "admin" and the test key over a real
// node on the fake backend, with sandboxes "box" and "other" Running and
// their guest ports 8080 and 9222 leading to guestApp.
type portRig struct {
	*testServer
	be    *fake.Backend
	nd    *node.Node
	delay atomic.Int64 // of the fake's dials
}

func newPortRig(t *testing.T) *portRig {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &portRig{}
	r.be = fake.New(fake.Options{Delay: func(op string) time.Duration {
		if op == fake.OpDialPort {
			return time.Duration(r.delay.Load())
		}
		return 0
	}})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r.nd = node.New(node.Options{Store: st, Backend: r.be, Name: "n1", DataDir: t.TempDir(), Logger: log, DefaultTemplate: "desk"})
	if err := r.nd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	mgr := reconcile.NewManager(st, log, time.Second)
	r.nd.Register(mgr)
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	guest := httptest.NewServer(guestApp(t))
	srv := httptest.NewServer(New(Options{Store: st, Logger: log, Token: "admin", ScopedKey: testKey, Sandboxes: r.nd, Actions: r.nd.Actions()}).Handler())
	t.Cleanup(func() {
		srv.Close()
		guest.Close()
		mgr.Stop()
		r.nd.Stop()
		st.Close()
	})
	r.testServer = &testServer{Server: srv, st: st}
	if code, _, body := r.doAuth(t, "admin", "POST", "/api/v1/templates", `{"apiVersion":"hvkube/v1","kind":"Template","metadata":{"name":"desk"},"spec":{"qemu":{"image":"linux-desktop"}}}`); code != http.StatusCreated {
		t.Fatalf("template: %d %s", code, body)
	}
	for _, name := range []string{"box", "other"} {
		if code, _, body := r.doAuth(t, "admin", "POST", "/api/v1/sandboxes", `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"`+name+`"},"spec":{"templateRef":"desk"}}`); code != http.StatusCreated {
			t.Fatalf("sandbox %s: %d %s", name, code, body)
		}
		for _, port := range []int{8080, 9222} {
			r.be.ServePort(name, port, guest.Listener.Addr().String())
		}
	}
	for _, name := range []string{"box", "other"} {
		r.waitPhase(t, name, api.SandboxRunning)
	}
	return r
}

func (r *portRig) waitPhase(t *testing.T, name, phase string) {
	t.Helper()
	var o api.Object
	var err error
	if !testwait.For(10*time.Second, func() bool {
		o, err = r.st.Get(context.Background(), api.KindSandbox, name)
		return err == nil && o.(*api.Sandbox).Status.Phase == phase
	}) {
		t.Fatalf("sandbox %s is not %s: %v %+v", name, phase, err, o)
	}
}

// send makes a request with token (none when "") and headers hdr.
func (r *portRig) send(t *testing.T, token, method, path, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, r.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// dialWS opens a WebSocket through the server at path with token; on
// failure it returns the status and the error's text.
func (r *portRig) dialWS(t *testing.T, token, path string) (*websocket.Conn, int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hdr := http.Header{}
	if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(r.URL, "http")+path, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		if resp == nil {
			t.Fatalf("dial %s: %v", path, err)
		}
		var e errorBody
		json.NewDecoder(resp.Body).Decode(&e)
		return nil, resp.StatusCode, e.Error
	}
	t.Cleanup(func() { c.CloseNow() })
	c.SetReadLimit(1 << 20)
	return c, http.StatusSwitchingProtocols, ""
}

// echo sends msg over c and reads the answer.
func echo(t *testing.T, c *websocket.Conn, msg string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// greeting reads guestApp's first WebSocket message.
func greeting(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPortForwardHTTP: a GET and a POST with a body reach the server in
// the guest with their path (escapes kept) and query, Host
// localhost:PORT, and none of hvkube's credentials; the answer comes back
// as the guest gave it, marked as an origin of its own.
func TestPortForwardHTTP(t *testing.T) {
	r := newPortRig(t)
	for _, tt := range []struct {
		name, method, path, body string
		hdr                      map[string]string
		want                     guestSaw
	}{
		{"GET", "GET", "/api/v1/sandboxes/box/ports/8080/echo/a%2Fb/c?q=1&next=%2Fx", "",
			map[string]string{"Origin": r.URL},
			guestSaw{Method: "GET", Path: "/echo/a/b/c", RawPath: "/echo/a%2Fb/c", Query: "q=1&next=%2Fx", Host: "localhost:8080"}},
		{"POST with a body", "POST", "/api/v1/sandboxes/box/ports/9222/echo/session", `{"capabilities":{}}`,
			map[string]string{"Content-Type": "application/json; charset=utf-8", api.ControlHeader: "key", "X-Hvkube-Other": "x"},
			guestSaw{Method: "POST", Path: "/echo/session", RawPath: "/echo/session", Host: "localhost:9222", Body: `{"capabilities":{}}`}},
		{"DELETE", "DELETE", "/api/v1/sandboxes/other/ports/8080/echo/session/1", "", nil,
			guestSaw{Method: "DELETE", Path: "/echo/session/1", RawPath: "/echo/session/1", Host: "localhost:8080"}},
		// The guest service's password (VLC's) in X-Guest-Authorization
		// reaches it as its Authorization; hvkube's never does.
		{"the guest's own credentials", "GET", "/api/v1/sandboxes/box/ports/8080/echo/requests/status.xml", "",
			map[string]string{GuestAuthorizationHeader: "Basic OnBhc3N3b3Jk"},
			guestSaw{Method: "GET", Path: "/echo/requests/status.xml", RawPath: "/echo/requests/status.xml", Host: "localhost:8080", Authorization: "Basic OnBhc3N3b3Jk"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := r.send(t, "admin", tt.method, tt.path, tt.body, tt.hdr)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			var got guestSaw
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			if got != tt.want {
				t.Fatalf("the guest saw\n %+v\nwant\n %+v", got, tt.want)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox") {
				t.Fatalf("Content-Security-Policy %q, want sandbox", csp)
			}
		})
	}
	// The forward's own root is the guest's.
	resp, body := r.send(t, "admin", "GET", "/api/v1/sandboxes/box/ports/8080", "", nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "404 page not found") {
		t.Fatalf("the guest's root: %d %s, want guestApp's 404", resp.StatusCode, body)
	}
}

// TestPortForwardWebSocket: a WebSocket opens through the forward (no
// Authorization reaching the guest) and echoes.
func TestPortForwardWebSocket(t *testing.T) {
	r := newPortRig(t)
	c, code, msg := r.dialWS(t, "admin", "/api/v1/sandboxes/box/ports/8080/ws")
	if c == nil {
		t.Fatalf("dial: %d %s", code, msg)
	}
	if got := greeting(t, c); got != "auth=" {
		t.Fatalf("the guest saw %q, want no Authorization", got)
	}
	for _, m := range []string{"hello", strings.Repeat("x", 100<<10)} {
		if got := echo(t, c, m); got != m {
			t.Fatalf("echo of %d bytes: %d bytes back", len(m), len(got))
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// TestPortForwardDevTools: DevTools' target lists name the guest's own
// localhost; through the forward they name the forward, and a client
// that follows them as Playwright's connectOverCDP does (…/json/version/,
// then the WebSocket with the same headers) reaches the browser.
func TestPortForwardDevTools(t *testing.T) {
	r := newPortRig(t)
	host := strings.TrimPrefix(r.URL, "http://")
	prefix := "/api/v1/sandboxes/box/ports/9222"

	resp, body := r.send(t, "admin", "GET", prefix+"/json/version/", "", nil)
	var version map[string]string
	if err := json.Unmarshal(body, &version); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("/json/version: %d %s", resp.StatusCode, body)
	}
	wantWS := "ws://" + host + prefix + "/devtools/browser/b-1"
	if version["webSocketDebuggerUrl"] != wantWS || version["Browser"] != "Chrome/130.0" {
		t.Fatalf("/json/version: %s, want webSocketDebuggerUrl %s and the rest as it was", body, wantWS)
	}
	ws, err := url.Parse(version["webSocketDebuggerUrl"])
	if err != nil {
		t.Fatal(err)
	}
	c, code, msg := r.dialWS(t, "admin", ws.Path)
	if c == nil {
		t.Fatalf("the browser's WebSocket: %d %s", code, msg)
	}
	greeting(t, c)
	if got := echo(t, c, `{"id":1,"method":"Browser.getVersion"}`); got != `{"id":1,"method":"Browser.getVersion"}` {
		t.Fatalf("echo: %s", got)
	}

	resp, body = r.send(t, "admin", "GET", prefix+"/json/list", "", nil)
	var list []map[string]string
	if err := json.Unmarshal(body, &list); resp.StatusCode != http.StatusOK || err != nil || len(list) != 2 {
		t.Fatalf("/json/list: %d %s", resp.StatusCode, body)
	}
	if got, want := list[0]["webSocketDebuggerUrl"], "ws://"+host+prefix+"/devtools/page/P1"; got != want {
		t.Fatalf("page URL %s, want %s", got, want)
	}
	if got := list[0]["url"]; got != "https://example.com/<a>" {
		t.Fatalf("the page's own url changed: %s", got)
	}
	if got, want := list[1]["webSocketDebuggerUrl"], "ws://10.0.2.2:9222/devtools/page/W1"; got != want {
		t.Fatalf("a URL of another host changed: %s, want %s", got, want)
	}
	fe, err := url.Parse(list[0]["devtoolsFrontendUrl"])
	if err != nil || fe.Path != prefix+"/devtools/inspector.html" || fe.Query().Get("ws") != host+prefix+"/devtools/page/P1" {
		t.Fatalf("devtoolsFrontendUrl %s, want the inspector and its ws= through the forward", list[0]["devtoolsFrontendUrl"])
	}
}

// TestPortForwardErrors: what a forward answers when it cannot forward,
// always as the API's JSON errors.
func TestPortForwardErrors(t *testing.T) {
	r := newPortRig(t)
	old := portDialTimeout
	portDialTimeout = 200 * time.Millisecond
	defer func() { portDialTimeout = old }()
	view, _ := testKey.MintDisplay(authtoken.DisplayClaims{Sandbox: "box"}, time.Now(), time.Minute)
	for _, tt := range []struct {
		name, token, path string
		setup             func()
		code              int
		field, contains   string
	}{
		{"no token", "", "/api/v1/sandboxes/box/ports/8080/echo/", nil, http.StatusUnauthorized, "", ""},
		{"a display token in the URL", "", "/api/v1/sandboxes/box/ports/8080/echo/?token=" + view, nil, http.StatusUnauthorized, "", ""},
		{"the server's token in the URL", "", "/api/v1/sandboxes/box/ports/8080/echo/?token=admin", nil, http.StatusUnauthorized, "", ""},
		{"port 0", "admin", "/api/v1/sandboxes/box/ports/0/", nil, http.StatusBadRequest, "port", ""},
		{"port 65536", "admin", "/api/v1/sandboxes/box/ports/65536/", nil, http.StatusBadRequest, "port", ""},
		{"port +80", "admin", "/api/v1/sandboxes/box/ports/+80/", nil, http.StatusBadRequest, "port", ""},
		{"port name", "admin", "/api/v1/sandboxes/box/ports/http/", nil, http.StatusBadRequest, "port", ""},
		{"unknown sandbox", "admin", "/api/v1/sandboxes/nope/ports/8080/", nil, http.StatusNotFound, "", ""},
		{"refused", "admin", "/api/v1/sandboxes/box/ports/8081/", nil, http.StatusBadGateway, "", "port 8081"},
		{"no answer in time", "admin", "/api/v1/sandboxes/box/ports/8080/echo/", func() { r.delay.Store(int64(time.Minute)) }, http.StatusGatewayTimeout, "", "did not answer"},
		{"paused", "admin", "/api/v1/sandboxes/box/ports/8080/echo/", func() {
			r.delay.Store(0)
			if code, _, body := r.doAuth(t, "admin", "POST", "/api/v1/sandboxes/box/pause", ""); code != http.StatusOK {
				t.Fatalf("pause: %d %s", code, body)
			}
		}, http.StatusConflict, "", "Paused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup()
			}
			resp, body := r.send(t, tt.token, "GET", tt.path, "", nil)
			var e errorBody
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
				t.Fatalf("%d: not a JSON error: %s", resp.StatusCode, body)
			}
			if resp.StatusCode != tt.code || e.Field != tt.field || !strings.Contains(e.Error, tt.contains) {
				t.Fatalf("%d %+v, want %d naming field %q and saying %q", resp.StatusCode, e, tt.code, tt.field, tt.contains)
			}
		})
	}

	t.Run("no backend", func(t *testing.T) {
		ts := start(t, Options{})
		ts.do(t, "POST", "/api/v1/sandboxes", "application/json", `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"box"},"spec":{}}`)
		if code, _, body := ts.do(t, "GET", "/api/v1/sandboxes/box/ports/8080/", "", ""); code != http.StatusNotImplemented {
			t.Fatalf("%d %s, want 501", code, body)
		}
	})
	t.Run("backend without the ability", func(t *testing.T) {
		nd := node.New(node.Options{Store: r.st, Backend: struct{ backend.Backend }{r.be}, Name: "n1"})
		defer nd.Stop()
		srv := httptest.NewServer(New(Options{Store: r.st, Sandboxes: nd}).Handler())
		defer srv.Close()
		ts := &testServer{Server: srv, st: r.st}
		code, _, body := ts.do(t, "GET", "/api/v1/sandboxes/other/ports/8080/echo/", "", "")
		if code != http.StatusNotImplemented {
			t.Fatalf("%d %s, want 501", code, body)
		}
	})
	t.Run("Sandboxes without the ability", func(t *testing.T) {
		ts, _ := scopeServer(t, "admin")
		if code, _, body := ts.doAuth(t, "admin", "GET", "/api/v1/sandboxes/desk/ports/8080/", ""); code != http.StatusNotImplemented {
			t.Fatalf("%d %s, want 501", code, body)
		}
	})
}

// TestPortForwardBounds: a sandbox has at most maxPortConns forwarded
// connections (503 past it, and one again once one closes), and a
// connection without traffic for portIdleTimeout ends.
func TestPortForwardBounds(t *testing.T) {
	r := newPortRig(t)
	oldMax, oldIdle := maxPortConns, portIdleTimeout
	maxPortConns, portIdleTimeout = 2, 500*time.Millisecond
	defer func() { maxPortConns, portIdleTimeout = oldMax, oldIdle }()
	const path = "/api/v1/sandboxes/box/ports/8080/ws"
	var open []*websocket.Conn
	for range 2 {
		c, code, msg := r.dialWS(t, "admin", path)
		if c == nil {
			t.Fatalf("dial: %d %s", code, msg)
		}
		greeting(t, c)
		open = append(open, c)
	}
	if _, code, msg := r.dialWS(t, "admin", path); code != http.StatusServiceUnavailable {
		t.Fatalf("a third WebSocket: %d %s, want 503", code, msg)
	}
	if resp, body := r.send(t, "admin", "GET", "/api/v1/sandboxes/box/ports/8080/echo/", "", nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a request past the bound: %d %s, want 503", resp.StatusCode, body)
	}
	if resp, body := r.send(t, "admin", "GET", "/api/v1/sandboxes/other/ports/8080/echo/", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("another sandbox's forward: %d %s", resp.StatusCode, body)
	}
	// Quiet for longer than the idle timeout: both end.
	for i, c := range open {
		closed(t, c, fmt.Sprintf("WebSocket %d after the idle timeout", i))
	}
	// Their slots are free again.
	var resp *http.Response
	var body []byte
	if !testwait.For(5*time.Second, func() bool {
		resp, body = r.send(t, "admin", "GET", "/api/v1/sandboxes/box/ports/8080/echo/", "", nil)
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("after the WebSockets ended: %d %s", resp.StatusCode, body)
	}
}

// TestPortForwardScoped: an agent's token reaches its own sandbox's
// ports, with every method; not another sandbox's (403), not while a
// person holds its sandbox (409), and not once its attempt has ended
// (403); a WebSocket it has open ends when either happens.
func TestPortForwardScoped(t *testing.T) {
	r := newPortRig(t)
	bindAgent(t, r.st, "loop1", "box", 1)
	tok := attemptToken(t, r.st, testKey, "loop1")
	for _, tt := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/api/v1/sandboxes/box/ports/9222/json/version", http.StatusOK},
		{"POST", "/api/v1/sandboxes/box/ports/8080/echo/session", http.StatusOK},
		{"PUT", "/api/v1/sandboxes/box/ports/9222/echo/new", http.StatusOK},
		{"DELETE", "/api/v1/sandboxes/box/ports/8080/echo/session/1", http.StatusOK},
		{"GET", "/api/v1/sandboxes/other/ports/8080/echo/", http.StatusForbidden},
		{"POST", "/api/v1/sandboxes/other/ports/8080/echo/", http.StatusForbidden},
	} {
		resp, body := r.send(t, tok, tt.method, tt.path, `{}`, map[string]string{"Content-Type": "application/json"})
		if resp.StatusCode != tt.code {
			t.Errorf("%s %s with the agent's token: %d %s, want %d", tt.method, tt.path, resp.StatusCode, body, tt.code)
		}
		if tt.code == http.StatusOK && strings.Contains(string(body), tok) {
			t.Errorf("%s %s: the guest saw the agent's token: %s", tt.method, tt.path, body)
		}
	}
	c, code, msg := r.dialWS(t, tok, "/api/v1/sandboxes/box/ports/8080/ws")
	if c == nil {
		t.Fatalf("the agent's WebSocket: %d %s", code, msg)
	}
	if got := greeting(t, c); got != "auth=" {
		t.Fatalf("the guest saw %q, want no Authorization", got)
	}
	if _, code, _ := r.dialWS(t, tok, "/api/v1/sandboxes/other/ports/8080/ws"); code != http.StatusForbidden {
		t.Fatalf("the agent's WebSocket to another sandbox: %d, want 403", code)
	}

	// A person takes the sandbox over, then hands it back.
	setControl := func(c *api.SandboxControl) {
		if _, err := reconcile.UpdateStatus(context.Background(), r.st, api.KindSandbox, "box", func(sb *api.Sandbox) bool {
			sb.Status.Control = c
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	setControl(&api.SandboxControl{ID: "take-1", Holder: "ana", Since: time.Now()})
	if resp, body := r.send(t, tok, "GET", "/api/v1/sandboxes/box/ports/9222/json/version", "", nil); resp.StatusCode != http.StatusConflict {
		t.Fatalf("while ana holds the sandbox: %d %s, want 409", resp.StatusCode, body)
	}
	if resp, body := r.send(t, "admin", "GET", "/api/v1/sandboxes/box/ports/9222/json/version", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the server's token while ana holds the sandbox: %d %s", resp.StatusCode, body)
	}
	closed(t, c, "the agent's WebSocket after ana took the sandbox over")
	setControl(nil)

	// The attempt ends: the token reaches nothing more, and its open
	// WebSocket closes.
	c, code, msg = r.dialWS(t, tok, "/api/v1/sandboxes/box/ports/8080/ws")
	if c == nil {
		t.Fatalf("the agent's WebSocket after ana handed the sandbox back: %d %s", code, msg)
	}
	greeting(t, c)
	if code, _, body := r.doAuth(t, tok, "POST", "/api/v1/agents/loop1/complete", `{"success":true}`); code != http.StatusOK {
		t.Fatalf("complete: %d %s", code, body)
	}
	if resp, body := r.send(t, tok, "GET", "/api/v1/sandboxes/box/ports/9222/json/version", "", nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("after the attempt: %d %s, want 403", resp.StatusCode, body)
	}
	closed(t, c, "the agent's WebSocket after its attempt ended")
}

// closed fails unless c is closed within a few seconds (the hold is
// checked every second).
func closed(t *testing.T, c *websocket.Conn, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := c.Read(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("%s: %v, want closed", what, err)
	}
}

// TestPortForwardOpensNoListener: forwarding opens no listening socket on
// the host: the guest is reached through the backend's DialPort only.
func TestPortForwardOpensNoListener(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	r := newPortRig(t)
	before := listeningSockets(t)
	c, code, msg := r.dialWS(t, "admin", "/api/v1/sandboxes/box/ports/8080/ws")
	if c == nil {
		t.Fatalf("dial: %d %s", code, msg)
	}
	greeting(t, c)
	if resp, body := r.send(t, "admin", "GET", "/api/v1/sandboxes/box/ports/9222/json/version", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	for inode := range listeningSockets(t) {
		if !before[inode] {
			t.Fatalf("a forward opened a listening socket (inode %s)", inode)
		}
	}
	if n := r.be.Count(fake.OpDialPort); n != 2 {
		t.Fatalf("%d dials through the backend, want 2", n)
	}
}

// listeningSockets returns the inodes of the TCP sockets this process
// listens on.
func listeningSockets(t *testing.T) map[string]bool {
	t.Helper()
	listening := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 9 && f[3] == "0A" { // TCP_LISTEN
				listening[f[9]] = true
			}
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	ours := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err != nil {
			continue
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			if inode = strings.TrimSuffix(inode, "]"); listening[inode] {
				ours[inode] = true
			}
		}
	}
	if len(ours) == 0 {
		t.Skip("no listening sockets of this process found in /proc")
	}
	return ours
}

// TestRewriteDevTools: the rewriting of DevTools' answers on its own.
func TestRewriteDevTools(t *testing.T) {
	fw := &forward{name: "box", port: 9222, host: "hv.example:8443", tls: true}
	for _, tt := range []struct{ in, want string }{
		{"ws://localhost:9222/devtools/browser/x", "wss://hv.example:8443/api/v1/sandboxes/box/ports/9222/devtools/browser/x"},
		{"ws://127.0.0.1:9333/devtools/page/y", "wss://hv.example:8443/api/v1/sandboxes/box/ports/9333/devtools/page/y"},
		{"ws://[::1]:9222/devtools/page/z?a=b", "wss://hv.example:8443/api/v1/sandboxes/box/ports/9222/devtools/page/z?a=b"},
		{"ws://10.0.2.15:9222/devtools/page/y", "ws://10.0.2.15:9222/devtools/page/y"},
		{"ws://localhost/devtools/page/y", "ws://localhost/devtools/page/y"},
		{"http://localhost:9222/json", "http://localhost:9222/json"},
		{"not a url\x7f", "not a url\x7f"},
	} {
		if got := fw.wsURL(tt.in); got != tt.want {
			t.Errorf("wsURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	got := fw.frontendURL("https://chrome-devtools-frontend.appspot.com/serve_rev/@abc/inspector.html?ws=localhost:9222/devtools/page/P1")
	u, _ := url.Parse(got)
	if u.Host != "chrome-devtools-frontend.appspot.com" || u.Query().Get("wss") != "hv.example:8443/api/v1/sandboxes/box/ports/9222/devtools/page/P1" || u.Query().Has("ws") {
		t.Errorf("frontendURL: %s", got)
	}
	if _, ok := cdp.RewriteTargets([]byte(`"a string"`), fw.wsURL, fw.frontendURL); ok {
		t.Error("a JSON string was rewritten")
	}
	if _, ok := cdp.RewriteTargets([]byte(`<html>`), fw.wsURL, fw.frontendURL); ok {
		t.Error("HTML was rewritten")
	}
	out, ok := cdp.RewriteTargets([]byte(`{"webSocketDebuggerUrl":"ws://localhost:9222/devtools/browser/x","n":12345678901234567890}`), fw.wsURL, fw.frontendURL)
	if !ok || !strings.Contains(string(out), "12345678901234567890") || !strings.Contains(string(out), "wss://hv.example:8443/") {
		t.Errorf("rewritten: %s %v", out, ok)
	}
}

// TestGuestPath: the path below a forward's prefix, escapes kept.
func TestGuestPath(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/api/v1/sandboxes/box/ports/80", "/"},
		{"/api/v1/sandboxes/box/ports/80/", "/"},
		{"/api/v1/sandboxes/box/ports/80/a/b", "/a/b"},
		{"/api/v1/sandboxes/box/ports/80/a%2Fb%20c", "/a%2Fb%20c"},
	} {
		req := httptest.NewRequest("GET", tt.in, nil)
		if got := guestPath(req); got != tt.want {
			t.Errorf("guestPath(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

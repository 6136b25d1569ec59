package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/testwait"
)

// served is a Server answering on a real listener through Serve, with its
// own timeouts, as `hvkube serve` runs it.
type served struct {
	addr     string
	st       *store.Store
	stop     func() error
	accepted func() int // connections the server has taken
}

// countingListener counts the connections Accept hands the server.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func serveReal(t *testing.T, opts Options) *served {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Store = st
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: tcp}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(opts).Serve(ctx, ln) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() {
		stop()
		st.Close()
	})
	return &served{addr: ln.Addr().String(), st: st, stop: stop, accepted: func() int { return int(ln.n.Load()) }}
}

const sandboxJSON = `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"desk"}}`

// TestBrowserOriginSafety sends what browsers send: pages of other origins
// and DNS-rebound names are refused, with or without a token, and nothing
// changes; the server's own pages, the CLI and curl are served.
func TestBrowserOriginSafety(t *testing.T) {
	for _, token := range []string{"", "s3cret"} {
		hosts, err := NewHostPolicy("127.0.0.1:0", []string{"hvkube.internal"})
		if err != nil {
			t.Fatal(err)
		}
		srv := serveReal(t, Options{Token: token, Hosts: hosts})
		self := "http://" + srv.addr
		_, port, _ := net.SplitHostPort(srv.addr)
		tests := []struct {
			name, method, path, host, ctype, body string
			headers                               map[string]string
			code                                  int
		}{
			{name: "cross-origin simple POST", method: "POST", path: "/api/v1/sandboxes", ctype: "text/plain", body: sandboxJSON,
				headers: map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, code: 403},
			{name: "cross-origin POST, old browser", method: "POST", path: "/api/v1/sandboxes", ctype: "text/plain", body: sandboxJSON,
				headers: map[string]string{"Origin": "http://evil.example"}, code: 403},
			{name: "cross-origin JSON POST", method: "POST", path: "/api/v1/sandboxes", ctype: "application/json", body: sandboxJSON,
				headers: map[string]string{"Origin": "http://evil.example"}, code: 403},
			{name: "form POST without Origin", method: "POST", path: "/api/v1/sandboxes", ctype: "application/x-www-form-urlencoded", body: "a=b", code: 415},
			{name: "bodiless cross-origin POST", method: "POST", path: "/api/v1/sandboxes/desk/pause",
				headers: map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, code: 403},
			{name: "cross-site fetch metadata only", method: "DELETE", path: "/api/v1/sandboxes/desk",
				headers: map[string]string{"Sec-Fetch-Site": "cross-site"}, code: 403},
			{name: "same-site page of another port", method: "POST", path: "/api/v1/sandboxes", ctype: "application/json", body: sandboxJSON,
				headers: map[string]string{"Origin": "http://127.0.0.1:3000", "Sec-Fetch-Site": "same-site"}, code: 403},
			{name: "sandboxed frame (Origin null)", method: "POST", path: "/api/v1/sandboxes", ctype: "application/json", body: sandboxJSON,
				headers: map[string]string{"Origin": "null"}, code: 403},
			{name: "DNS rebinding read", method: "GET", path: "/api/v1/sandboxes", host: "evil.example:" + port, code: 421},
			{name: "DNS rebinding write", method: "POST", path: "/api/v1/sandboxes", host: "evil.example:" + port, ctype: "application/json", body: sandboxJSON,
				headers: map[string]string{"Origin": "http://evil.example:" + port, "Sec-Fetch-Site": "same-origin"}, code: 421},
			{name: "DNS rebinding health", method: "GET", path: "/healthz", host: "evil.example", code: 421},
			{name: "cross-site image embed", method: "GET", path: "/api/v1/sandboxes", headers: map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}, code: 403},
			{name: "cross-origin WebSocket", method: "GET", path: "/api/v1/sandboxes/desk/display",
				headers: map[string]string{"Origin": "http://evil.example", "Upgrade": "websocket", "Connection": "Upgrade"}, code: 403},
			{name: "form to OSWorld's API from a page", method: "POST", path: "/api/v1/sandboxes/desk/osworld/file", ctype: "application/x-www-form-urlencoded", body: "file_path=/etc/passwd",
				headers: map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, code: 403},
			{name: "form to OSWorld's API from the server's own page", method: "POST", path: "/api/v1/sandboxes/desk/osworld/file", ctype: "application/x-www-form-urlencoded", body: "file_path=/etc/passwd",
				headers: map[string]string{"Origin": self, "Sec-Fetch-Site": "same-origin"}, code: 415},
			{name: "form to OSWorld's API, fetch metadata only", method: "POST", path: "/api/v1/sandboxes/desk/osworld/setup/upload", ctype: "multipart/form-data; boundary=x", body: "--x--",
				headers: map[string]string{"Sec-Fetch-Site": "same-origin"}, code: 415},
			{name: "form to exec", method: "POST", path: "/api/v1/sandboxes/desk/exec", ctype: "application/x-www-form-urlencoded", body: "command=id", code: 415},
			{name: "text to OSWorld's API", method: "POST", path: "/api/v1/sandboxes/desk/osworld/execute", ctype: "text/plain", body: `{"command":"id"}`, code: 415},
			// What must keep working (past the guard: desk is not created yet).
			{name: "OSWorld's controller posts a form", method: "POST", path: "/api/v1/sandboxes/desk/osworld/file", ctype: "application/x-www-form-urlencoded", body: "file_path=/tmp/x", code: 404},
			{name: "guest file upload", method: "PUT", path: "/api/v1/sandboxes/desk/files?path=/tmp/x", ctype: "application/octet-stream", body: "bytes", code: 404},
			{name: "the server's own page POSTs", method: "POST", path: "/api/v1/sandboxes", ctype: "application/json", body: sandboxJSON,
				headers: map[string]string{"Origin": self, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}, code: 201},
			{name: "the server's own page reads", method: "GET", path: "/api/v1/sandboxes/desk",
				headers: map[string]string{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}, code: 200},
			{name: "a link from another site opens", method: "GET", path: "/api/v1/sandboxes/desk",
				headers: map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, code: 200},
			{name: "typed into the address bar", method: "GET", path: "/api/v1/sandboxes/desk", headers: map[string]string{"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}, code: 200},
			{name: "localhost", method: "GET", path: "/api/v1/sandboxes/desk", host: "localhost:" + port, code: 200},
			{name: "LOCALHOST.", method: "GET", path: "/api/v1/sandboxes/desk", host: "LOCALHOST.:" + port, code: 200},
			{name: "an --allowed-hosts name", method: "GET", path: "/api/v1/sandboxes/desk", host: "hvkube.internal", code: 200},
			{name: "curl: bodiless POST", method: "POST", path: "/api/v1/sandboxpools/none/scale", ctype: "application/json", body: `{"replicas":1}`, code: 404},
			{name: "CLI delete", method: "DELETE", path: "/api/v1/sandboxes/desk", code: 200},
		}
		for _, tt := range tests {
			t.Run(tt.name+"/token="+token, func(t *testing.T) {
				before := rvOf(t, srv.st)
				req, _ := http.NewRequest(tt.method, self+tt.path, strings.NewReader(tt.body))
				if tt.body == "" {
					req.Body = http.NoBody
				}
				if tt.host != "" {
					req.Host = tt.host
				}
				if tt.ctype != "" {
					req.Header.Set("Content-Type", tt.ctype)
				}
				for k, v := range tt.headers {
					req.Header.Set(k, v)
				}
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				resp, err := http.DefaultTransport.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.code {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.code, b)
				}
				if tt.code >= 400 {
					if !strings.Contains(string(b), `"error"`) {
						t.Fatalf("no JSON error: %s", b)
					}
					if after := rvOf(t, srv.st); after != before {
						t.Fatalf("a refused request changed the store (revision %d -> %d)", before, after)
					}
				}
			})
		}
	}
}

func rvOf(t *testing.T, st *store.Store) int64 {
	t.Helper()
	rv, err := st.Revision(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

func TestHostPolicy(t *testing.T) {
	tests := []struct {
		addr  string
		extra []string
		host  string
		want  bool
	}{
		{"127.0.0.1:8080", nil, "127.0.0.1:8080", true},
		{"127.0.0.1:8080", nil, "127.0.0.1", true},
		{"127.0.0.1:8080", nil, "[::1]:8080", true},
		{"127.0.0.1:8080", nil, "localhost", true},
		{"127.0.0.1:8080", nil, "evil.example:8080", false},
		{"127.0.0.1:8080", nil, "127.0.0.1.nip.io:8080", false},
		{"127.0.0.1:8080", nil, "10.0.0.5:8080", false},
		{"127.0.0.1:8080", nil, "", false},
		{"10.0.0.5:8080", nil, "10.0.0.5:8080", true},
		{"desk.example:8080", nil, "desk.example", true},
		{"127.0.0.1:8080", []string{"hvkube.corp:443"}, "hvkube.corp", true},
		{"127.0.0.1:8080", []string{"*"}, "anything.example", true},
		{"0.0.0.0:8080", nil, "127.0.0.1:8080", true},
	}
	for _, tt := range tests {
		p, err := NewHostPolicy(tt.addr, tt.extra)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Allows(tt.host); got != tt.want {
			t.Errorf("addr %s extra %v: Allows(%q) = %v, want %v", tt.addr, tt.extra, tt.host, got, tt.want)
		}
	}
	if _, err := NewHostPolicy("127.0.0.1:8080", []string{"http://x/"}); err == nil {
		t.Error("a URL in --allowed-hosts was accepted")
	}
}

// rawRequest writes head (a request without its body, or with part of it)
// on a new connection and returns the connection.
func rawRequest(t *testing.T, addr, head string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	return c
}

// readAnswer reads the status line and headers of the answer on c within d,
// then whether the server closed the connection after its body.
func readAnswer(t *testing.T, c net.Conn, d time.Duration) (status string, closed bool) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", d, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Status, resp.Close
}

// TestUnauthenticatedBodyIsNotRead: a client that announces a large body
// and sends none gets its 401 at once, and the connection is closed.
func TestUnauthenticatedBodyIsNotRead(t *testing.T) {
	srv := serveReal(t, Options{Token: "s3cret", BodyTimeout: time.Minute})
	c := rawRequest(t, srv.addr, "POST /api/v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
	start := time.Now()
	status, closed := readAnswer(t, c, 5*time.Second)
	if !strings.HasPrefix(status, "401") || !closed {
		t.Fatalf("answer %q, closed %v; want 401 and a closed connection", status, closed)
	}
	t.Logf("401 after %s without the body", time.Since(start).Round(time.Millisecond))
}

// TestSlowBodyTimesOut: a body that trickles in is cut at the body
// deadline with 408, and nothing is created.
func TestSlowBodyTimesOut(t *testing.T) {
	srv := serveReal(t, Options{BodyTimeout: 300 * time.Millisecond})
	c := rawRequest(t, srv.addr, "POST /api/v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\":")
	status, closed := readAnswer(t, c, 5*time.Second)
	if !strings.HasPrefix(status, "408") || !closed {
		t.Fatalf("answer %q, closed %v; want 408 and a closed connection", status, closed)
	}
	if rv := rvOf(t, srv.st); rv != 0 {
		t.Fatalf("store revision %d after a timed-out body", rv)
	}
	// A long watch is not cut by the body deadline.
	resp, err := http.Get("http://" + srv.addr + "/api/v1/sandboxes?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Time passing is what is tested: the watch is open (the server
	// registers it before it answers) for longer than the 300 ms body
	// deadline, and must still deliver.
	time.Sleep(600 * time.Millisecond)
	resp2, err := http.Post("http://"+srv.addr+"/api/v1/sandboxes", "application/json", strings.NewReader(sandboxJSON))
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, `"ADDED"`) {
		t.Fatalf("watch after the body deadline: %q %v", line, err)
	}
}

// TestIdleConnectionsClose: a connection that sends no request, or sends
// nothing after its last one, is closed.
func TestIdleConnectionsClose(t *testing.T) {
	srv := serveReal(t, Options{ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	silent := rawRequest(t, srv.addr, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
	idle := rawRequest(t, srv.addr, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if status, closed := readAnswer(t, idle, 5*time.Second); !strings.HasPrefix(status, "200") || closed {
		t.Fatalf("keep-alive answer %q, closed %v", status, closed)
	}
	for name, c := range map[string]net.Conn{"half-sent headers": silent, "idle keep-alive": idle} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		var err error
		for err == nil {
			_, err = c.Read(buf)
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: the server kept the connection open", name)
		}
	}
}

// TestShutdownClosesSlowClients: Serve returns nil within its grace period
// even while clients are in the middle of sending.
func TestShutdownClosesSlowClients(t *testing.T) {
	srv := serveReal(t, Options{ShutdownGrace: 500 * time.Millisecond, BodyTimeout: time.Hour, ReadHeaderTimeout: time.Hour})
	rawRequest(t, srv.addr, "POST /api/v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	rawRequest(t, srv.addr, "GET /healthz HTTP/1.1\r\nHost: 127.")
	// Shut down once the server has taken both: one still in the
	// listener's backlog is merely reset when the listener closes, and
	// the test is of the ones the server is reading.
	if !testwait.For(10*time.Second, func() bool { return srv.accepted() == 2 }) {
		t.Fatalf("the server took %d of the 2 connections", srv.accepted())
	}
	start := time.Now()
	if err := srv.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("shutdown took %s with a 500ms grace period", took)
	}
}

// TestEarlyRefusalClosesAtOnce: a client that announces a body and
// trickles it in gets its refusal (wrong Host, another site's page, a form
// type, no token) and then the end of the connection, without the server
// waiting for the body; the body deadline is far off.
func TestEarlyRefusalClosesAtOnce(t *testing.T) {
	srv := serveReal(t, Options{Token: "s3cret", BodyTimeout: time.Minute})
	const body = "Content-Length: 100000\r\n\r\n{\"apiVersion\":"
	tests := []struct {
		name, head, status string
	}{
		{"wrong Host", "POST /api/v1/sandboxes HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\nAuthorization: Bearer s3cret\r\n", "421"},
		{"cross-origin", "POST /api/v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\nContent-Type: application/json\r\nAuthorization: Bearer s3cret\r\n", "403"},
		{"form type", "POST /api/v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nAuthorization: Bearer s3cret\r\n", "415"},
		{"no token", "POST /api/v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n", "401"},
		{"wrong token", "PUT /api/v1/sandboxes/desk HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer nope\r\n", "401"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := rawRequest(t, srv.addr, tt.head+body)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !strings.HasPrefix(resp.Status, tt.status) || !strings.Contains(string(b), `"error"`) {
				t.Fatalf("answer %q %s (%v); want %s with a JSON error", resp.Status, b, err, tt.status)
			}
			io.WriteString(c, `"hvkube/v1",`) // the body goes on trickling
			n, err := br.Read(make([]byte, 1))
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the connection stayed open after the refusal, waiting for the body")
			}
			if err == nil {
				t.Fatalf("read %d bytes after the answer", n)
			}
		})
	}
	if rv := rvOf(t, srv.st); rv != 0 {
		t.Fatalf("store revision %d after refusals", rv)
	}

	// A client that sends its whole body at once still reads its answer
	// (a close with the body unread must not reset the connection under
	// it).
	req, _ := http.NewRequest("POST", "http://"+srv.addr+"/api/v1/sandboxes", strings.NewReader(strings.Repeat(" ", 200<<10)+sandboxJSON))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("refused with a whole body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401", resp.StatusCode)
	}
}

package cli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/testlog"
)

// fakeGuestPorts is a FAKE of the node's sandbox operations with only the
// port forwards: every guest port leads to the test's server at addr.
type fakeGuestPorts struct {
	server.Sandboxes
	addr string
}

func (g *fakeGuestPorts) DialPort(ctx context.Context, _ string, _ int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", g.addr)
}

// guestDevTools answers as Chromium's DevTools on port 9222 does, echoes
// WebSocket messages on /devtools/…, and answers /echo with the request's
// body and the Authorization it saw.
func guestDevTools() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/json/version/", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"Browser": "Chrome/130.0", "webSocketDebuggerUrl": "ws://localhost:9222/devtools/browser/b-1"}`)
	})
	mux.HandleFunc("/json/list", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `[{"id": "P1", "devtoolsFrontendUrl": "/devtools/inspector.html?ws=localhost:9222/devtools/page/P1", "webSocketDebuggerUrl": "ws://localhost:9222/devtools/page/P1"}]`)
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'")
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" auth="+r.Header.Get("Authorization")+" body="+string(b))
	})
	mux.HandleFunc("/devtools/", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			c.Write(r.Context(), typ, b)
		}
	})
	return mux
}

var forwardingRE = regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> box:9222`)

// TestPortForward runs hvkube port-forward against a real server with a
// token, over the fake guest ports: local requests reach the guest with
// the token added on the way to the server and none arriving in the
// guest; DevTools' lists name the local address, whose WebSocket works;
// requests that name another Host or come from another origin are
// refused; the forward ends with its context.
func TestPortForward(t *testing.T) {
	guest := httptest.NewServer(guestDevTools())
	defer guest.Close()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "box"
	api.Default(sb)
	if _, err := st.Create(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Options{Store: st, Token: "admin", Sandboxes: &fakeGuestPorts{addr: guest.Listener.Addr().String()}}).Handler())
	defer srv.Close()
	t.Setenv("HVKUBE_TOKEN", "admin")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testlog.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, Options{Stdout: &out, Stderr: &errOut}, []string{"--server", srv.URL, "port-forward", "box", "0:9222"})
	}()
	var local string
	deadline := time.Now().Add(10 * time.Second)
	for local == "" {
		if m := forwardingRE.FindStringSubmatch(out.String()); m != nil {
			local = m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("port-forward exited %d: %s %s", code, out.String(), errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address printed: %q %q", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	get := func(method, path, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+local+path, strings.NewReader(body))
		for k, v := range hdr {
			if v != "" {
				req.Header.Set(k, v)
			}
		}
		if h := hdr["Host"]; h != "" {
			req.Host = h
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("POST", "/echo?a=1", `{"x":1}`, map[string]string{"Content-Type": "application/json"}); code != http.StatusOK || body != `POST /echo?a=1 auth= body={"x":1}` {
		t.Fatalf("POST: %d %q", code, body)
	}
	// The API marks the guest's pages as an origin of their own; here
	// they are this address's only content and keep theirs.
	resp, err := http.Get("http://" + local + "/echo")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Values("Content-Security-Policy"); len(csp) != 1 || csp[0] != "default-src 'self'" {
		t.Fatalf("Content-Security-Policy %q, want only the guest's own", csp)
	}
	code, body := get("GET", "/json/version/", "", nil)
	var version map[string]string
	if err := json.Unmarshal([]byte(body), &version); code != http.StatusOK || err != nil {
		t.Fatalf("/json/version: %d %s", code, body)
	}
	if want := "ws://" + local + "/devtools/browser/b-1"; version["webSocketDebuggerUrl"] != want {
		t.Fatalf("webSocketDebuggerUrl %s, want %s", version["webSocketDebuggerUrl"], want)
	}
	code, body = get("GET", "/json/list", "", nil)
	var list []map[string]string
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil || len(list) != 1 {
		t.Fatalf("/json/list: %d %s", code, body)
	}
	fe, _ := url.Parse(list[0]["devtoolsFrontendUrl"])
	if list[0]["webSocketDebuggerUrl"] != "ws://"+local+"/devtools/page/P1" || fe.Path != "/devtools/inspector.html" || fe.Query().Get("ws") != local+"/devtools/page/P1" {
		t.Fatalf("/json/list: %s", body)
	}

	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	c, _, err := websocket.Dial(wctx, version["webSocketDebuggerUrl"], nil)
	if err != nil {
		t.Fatalf("the browser's WebSocket: %v", err)
	}
	defer c.CloseNow()
	if err := c.Write(wctx, websocket.MessageText, []byte(`{"id":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, b, err := c.Read(wctx); err != nil || string(b) != `{"id":1}` {
		t.Fatalf("echo: %q %v", b, err)
	}
	c.Close(websocket.StatusNormalClosure, "")

	for _, tt := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"another Host", map[string]string{"Host": "evil.example:80"}, http.StatusMisdirectedRequest},
		{"another origin", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"its own origin", map[string]string{"Origin": "http://" + local}, http.StatusOK},
	} {
		if code, body := get("POST", "/echo", `{}`, map[string]string{"Content-Type": "application/json", "Origin": tt.hdr["Origin"], "Host": tt.hdr["Host"]}); code != tt.want {
			t.Errorf("%s: %d %s, want %d", tt.name, code, body, tt.want)
		}
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("port-forward did not end with its context")
	}
	if c, err := net.Dial("tcp", local); err == nil {
		c.Close()
		t.Fatal("the local port still listens")
	}
}

func TestParsePortSpec(t *testing.T) {
	for _, tt := range []struct {
		in            string
		local, remote int
		ok            bool
	}{
		{"9222", 9222, 9222, true},
		{"4444:9515", 4444, 9515, true},
		{"0:8080", 0, 8080, true},
		{"0", 0, 0, false},
		{"8080:0", 0, 0, false},
		{"65536", 0, 0, false},
		{"+80", 0, 0, false},
		{"a:80", 0, 0, false},
		{":80", 0, 0, false},
		{"80:", 0, 0, false},
	} {
		l, r, err := parsePortSpec(tt.in)
		if (err == nil) != tt.ok || l != tt.local || r != tt.remote {
			t.Errorf("parsePortSpec(%q) = %d, %d, %v", tt.in, l, r, err)
		}
	}
}

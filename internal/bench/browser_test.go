package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
)

// fakeDevTools answers CDP on a WebSocket as Chromium does, with answer
// deciding the result of each Runtime.evaluate; an event precedes every
// answer, as when a domain is enabled. It records the Authorization
// header of the upgrade and the expressions evaluated.
type fakeDevTools struct {
	url string

	mu    sync.Mutex // guards the following fields
	auth  string
	exprs []string
}

func newFakeDevTools(t *testing.T, answer string) *fakeDevTools {
	t.Helper()
	f := &fakeDevTools{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.auth = r.Header.Get("Authorization")
		f.mu.Unlock()
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			_, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			var msg struct {
				ID     int    `json:"id"`
				Method string `json:"method"`
				Params struct {
					Expression string `json:"expression"`
				} `json:"params"`
			}
			if err := json.Unmarshal(b, &msg); err != nil {
				return
			}
			f.mu.Lock()
			f.exprs = append(f.exprs, msg.Params.Expression)
			f.mu.Unlock()
			c.Write(r.Context(), websocket.MessageText, []byte(`{"method":"Runtime.consoleAPICalled","params":{}}`))
			reply := `{"id":` + strconv.Itoa(msg.ID) + `,` + answer + `}`
			if err := c.Write(r.Context(), websocket.MessageText, []byte(reply)); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	f.url = "ws" + strings.TrimPrefix(srv.URL, "http")
	return f
}

func TestCDPEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		ok           bool
	}{
		{"two", `"result":{"result":{"type":"number","value":2,"description":"2"}}`, true},
		{"wrong value", `"result":{"result":{"type":"number","value":3,"description":"3"}}`, false},
		{"exception", `"result":{"result":{"type":"object"},"exceptionDetails":{"text":"Uncaught"}}`, false},
		{"error", `"error":{"code":-32000,"message":"Cannot find context"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDevTools(t, tc.answer)
			ctx := context.Background()
			c, err := dialCDP(ctx, f.url, "tok")
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			for i := 0; i < 3; i++ {
				err := c.evaluateOnePlusOne(ctx)
				if got, want := err == nil, tc.ok; got != want {
					t.Fatalf("call %d: error %v, want ok=%v", i, err, want)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if got, want := f.auth, "Bearer tok"; got != want {
				t.Errorf("Authorization %q, want %q", got, want)
			}
			if got, want := strings.Join(f.exprs, ","), "1+1,1+1,1+1"; got != want {
				t.Errorf("expressions %q, want %q", got, want)
			}
		})
	}
}

func TestPageTarget(t *testing.T) {
	targets := []devToolsTarget{
		{Type: "service_worker", WebSocketDebuggerURL: "ws://h/sw"},
		{Type: "page"},
		{Type: "page", WebSocketDebuggerURL: "ws://h/api/v1/sandboxes/b/ports/9222/devtools/page/P1"},
		{Type: "page", WebSocketDebuggerURL: "ws://h/p2"},
	}
	if got, want := pageTarget(targets), "ws://h/api/v1/sandboxes/b/ports/9222/devtools/page/P1"; got != want {
		t.Errorf("pageTarget = %q, want %q", got, want)
	}
	if got := pageTarget(targets[:2]); got != "" {
		t.Errorf("pageTarget without a page = %q, want none", got)
	}
}

// TestFindPlaywright: a missing playwright-core is reported with the
// reason the rows were left out, and an installed one with its version.
func TestFindPlaywright(t *testing.T) {
	if p := findPlaywright(""); p.ok() || !strings.Contains(p.why, "--node-modules") {
		t.Errorf("no directory: ok=%v why %q", p.ok(), p.why)
	}
	dir := t.TempDir()
	p := findPlaywright(dir)
	if p.ok() {
		t.Fatalf("empty node_modules: ok")
	}
	if p.node == "" {
		if !strings.Contains(p.why, "node") {
			t.Errorf("no node: why %q", p.why)
		}
		return // the rest needs node on PATH
	}
	if !strings.Contains(p.why, "playwright-core is not installed") {
		t.Errorf("empty node_modules: why %q", p.why)
	}
	pkg := filepath.Join(dir, "playwright-core")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"name":"playwright-core","version":"1.2.3"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if p := findPlaywright(dir); !p.ok() || p.version != "1.2.3" {
		t.Errorf("installed: ok=%v version %q why %q", p.ok(), p.version, p.why)
	}
}

func TestReadBrowserImage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		d := filepath.Join(dir, name, "current")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "image.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("browser", `{"memoryMB":1536,"network":{"gateway":"10.0.2.2"},"automation":{"cdp":9222}}`)
	write("desk", `{"memoryMB":512,"network":{"gateway":"10.0.2.2"}}`)
	img, err := readBrowserImage(dir, "browser")
	if err != nil {
		t.Fatal(err)
	}
	if img.MemoryMB != 1536 || img.Network.Gateway != "10.0.2.2" || img.Automation.CDP != 9222 {
		t.Errorf("image %+v", img)
	}
	if _, err := readBrowserImage(dir, "desk"); err == nil || !strings.Contains(err.Error(), "CDP") {
		t.Errorf("image without CDP: %v", err)
	}
	if _, err := readBrowserImage(dir, "missing"); err == nil {
		t.Error("missing image: no error")
	}
}

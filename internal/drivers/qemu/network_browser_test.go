//go:build linux

package qemu

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

// TestPortForwardToChromium runs a browser-desktop sandbox behind a real
// server and reaches Chromium's DevTools in its guest through the API's
// port forward, which goes over the sandbox's own network (DialPort): GET
// /json/version answers Chromium with a webSocketDebuggerUrl rewritten to
// the forward, and that WebSocket answers CDP.
func TestPortForwardToChromium(t *testing.T) {
	dir := DefaultImageDir()
	b, err := os.ReadFile(filepath.Join(dir, "browser-desktop", "current", "image.json"))
	var img struct {
		Network    *imageNetwork `json:"network"`
		Automation struct {
			CDP int `json:"cdp"`
		} `json:"automation"`
	}
	if err == nil {
		err = json.Unmarshal(b, &img)
	}
	if err != nil || img.Network == nil || img.Automation.CDP == 0 {
		why := "the browser-desktop image with a network and CDP (image.json network and automation.cdp) is not built: run make image-browser"
		if os.Getenv("HVKUBE_REQUIRE_BROWSER_IMAGE") != "" {
			t.Fatalf("%s (%v)", why, err)
		}
		t.Skipf("%s (%v)", why, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tmp := t.TempDir()
	be, err := New(ctx, Config{Dir: filepath.Join(tmp, "qemu"), ImageDir: dir, NoSpares: true, BootTimeout: 15 * time.Minute, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	st, err := store.Open(ctx, filepath.Join(tmp, "store"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mgr := reconcile.NewManager(st, log, 0)
	nd := node.New(node.Options{Store: st, Backend: be, Logger: log})
	nd.Register(mgr)
	tpl := &api.Template{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindTemplate}}
	tpl.Metadata.Name = "browser"
	tpl.Spec.QEMU = &api.QEMUImage{Image: "browser-desktop"}
	tpl.Spec.Resources.MemoryMB = 1536 // Chromium needs more than the 512 MB default
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "cdp"
	sb.Spec.TemplateRef = "browser"
	for _, o := range []api.Object{tpl, sb} {
		api.Default(o)
		if _, err := st.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	mctx, mcancel := context.WithCancel(ctx)
	if err := mgr.Start(mctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		mcancel()
		mgr.Stop()
		nd.Stop()
		be.Delete(context.Background(), "cdp")
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: server.New(server.Options{Store: st, Sandboxes: nd, Actions: nd.Actions(), Logger: log}).Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	base := "http://" + ln.Addr().String()

	// A cold Chromium start under emulation takes minutes on a busy host.
	for deadline := time.Now().Add(20 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if o, err := st.Get(ctx, api.KindTemplate, "browser"); err == nil {
			if s := o.(*api.Template).Status; s.Phase == api.TemplateFailed {
				t.Fatalf("template browser failed: %s", s.Message)
			}
		}
		o, err := st.Get(ctx, api.KindSandbox, "cdp")
		if err != nil {
			t.Fatal(err)
		}
		s := o.(*api.Sandbox).Status
		if s.Phase == api.SandboxRunning {
			break
		}
		if s.Phase == api.SandboxError || time.Now().After(deadline) {
			t.Fatalf("sandbox cdp is %s: %s", s.Phase, s.Message)
		}
	}

	prefix := "/api/v1/sandboxes/cdp/ports/" + strconv.Itoa(img.Automation.CDP)
	var version struct {
		Browser              string `json:"Browser"`
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		resp, err := http.Get(base + prefix + "/json/version")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if err := json.Unmarshal(body, &version); err != nil {
					t.Fatalf("/json/version: %v: %q", err, body)
				}
				break
			}
			err = &httpStatusError{resp.StatusCode, string(body)}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s/json/version through the port forward: %v", prefix, err)
		}
	}
	if !strings.HasPrefix(version.Browser, "Chrome/") {
		t.Errorf("/json/version Browser %q, want Chrome/…", version.Browser)
	}
	wantWS := "ws://" + ln.Addr().String() + prefix + "/devtools/browser/"
	if !strings.HasPrefix(version.WebSocketDebuggerURL, wantWS) {
		t.Fatalf("webSocketDebuggerUrl %q, want it rewritten to the forward (%s…)", version.WebSocketDebuggerURL, wantWS)
	}

	// The browser's own CDP session, through the forward.
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	c, _, err := websocket.Dial(wctx, version.WebSocketDebuggerURL, nil)
	if err != nil {
		t.Fatalf("CDP WebSocket through the forward: %v", err)
	}
	defer c.CloseNow()
	if err := c.Write(wctx, websocket.MessageText, []byte(`{"id":1,"method":"Browser.getVersion"}`)); err != nil {
		t.Fatal(err)
	}
	_, msg, err := c.Read(wctx)
	if err != nil {
		t.Fatal(err)
	}
	var reply struct {
		ID     int `json:"id"`
		Result struct {
			Product string `json:"product"`
		} `json:"result"`
	}
	if err := json.Unmarshal(msg, &reply); err != nil || reply.ID != 1 || !strings.HasPrefix(reply.Result.Product, "Chrome/") {
		t.Fatalf("Browser.getVersion over the forward: %q (%v)", msg, err)
	}
}

type httpStatusError struct {
	code int
	body string
}

func (e *httpStatusError) Error() string { return strconv.Itoa(e.code) + " " + e.body }

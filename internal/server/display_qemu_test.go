//go:build linux

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
	"github.com/hvkube/hvkube/internal/gateway"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/secrets"
	"github.com/hvkube/hvkube/internal/store"
)

// qemuDesk is a server over a real QEMU backend with one running sandbox,
// "desk" (labelled pool: web).
type qemuDesk struct {
	url string
	st  *store.Store
	srv *Server
	nd  *node.Node
}

func startQEMUDesk(t testing.TB) *qemuDesk {
	t.Helper()
	tpl := &api.Template{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindTemplate}}
	tpl.Metadata.Name = "desk-tpl"
	tpl.Spec.QEMU = &api.QEMUImage{Image: "linux-desktop"}
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "desk"
	sb.Metadata.Labels = map[string]string{"pool": "web"}
	sb.Spec.TemplateRef = "desk-tpl"
	return startOnQEMU(t, tpl, sb, 10*time.Minute)
}

// startOnQEMU runs a server over a real QEMU backend (no spares) with the
// template tpl, of a guest image the tests need, and the sandbox sb, and
// returns once sb runs, within wait (which includes the template's build).
// deskOnQEMU is startOnQEMU with the sandbox desk of template desk-tpl
// (the linux-desktop image), edit changing desk's spec first.
func deskOnQEMU(t testing.TB, edit func(*api.SandboxSpec), more ...func(*reconcile.Manager, *store.Store)) *qemuDesk {
	t.Helper()
	tpl := &api.Template{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindTemplate}}
	tpl.Metadata.Name = "desk-tpl"
	tpl.Spec.QEMU = &api.QEMUImage{Image: "linux-desktop"}
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "desk"
	sb.Spec.TemplateRef = "desk-tpl"
	if edit != nil {
		edit(&sb.Spec)
	}
	return startOnQEMU(t, tpl, sb, 10*time.Minute, more...)
}

func startOnQEMU(t testing.TB, tpl *api.Template, sb *api.Sandbox, wait time.Duration, more ...func(*reconcile.Manager, *store.Store)) *qemuDesk {
	t.Helper()
	imageDir := qemutest.RequireImage(t, tpl.Spec.QEMU.Image)
	ctx := context.Background()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	be, err := qemu.New(ctx, qemu.Config{Dir: filepath.Join(dir, "qemu"), ImageDir: imageDir, NoSpares: true, BootTimeout: wait, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, filepath.Join(dir, "store"), store.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	mgr := reconcile.NewManager(st, log, 0)
	sealer, err := secrets.NewSealer(testKey.SecretSeed())
	if err != nil {
		t.Fatal(err)
	}
	nd := node.New(node.Options{Store: st, Backend: be, Logger: log, DataDir: dir, Env: sealer.EnvFor(st.Get)})
	nd.Register(mgr)
	for _, f := range more {
		f(mgr, st)
	}
	t.Cleanup(func() {
		mgr.Stop()
		nd.Stop()
		list, _ := be.List(context.Background())
		for _, info := range list {
			be.Delete(context.Background(), info.ID)
		}
		be.Close()
		st.Close()
	})
	srv := New(Options{Store: st, Sandboxes: nd, Actions: nd.Actions(), Agents: nd, Token: "admin", ScopedKey: testKey, Logger: log})
	for _, o := range []api.Object{tpl, sb} {
		if err := srv.admit(o); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	for deadline := time.Now().Add(wait); ; time.Sleep(500 * time.Millisecond) {
		if o, err := st.Get(ctx, api.KindTemplate, tpl.Metadata.Name); err == nil {
			if s := o.(*api.Template).Status; s.Phase == api.TemplateFailed {
				t.Fatalf("template %s failed: %s", tpl.Metadata.Name, s.Message)
			}
		}
		o, err := st.Get(ctx, api.KindSandbox, sb.Metadata.Name)
		if err != nil {
			t.Fatal(err)
		}
		s := o.(*api.Sandbox).Status
		if s.Phase == api.SandboxRunning {
			break
		}
		if s.Phase == api.SandboxError || time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s: %s", sb.Metadata.Name, s.Phase, s.Message)
		}
	}
	return &qemuDesk{url: hs.URL, st: st, srv: srv, nd: nd}
}

// call sends an API request with the server's token.
func (d *qemuDesk) call(t testing.TB, method, path, body string, out any) {
	t.Helper()
	req, _ := http.NewRequest(method, d.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer admin")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
}

// token mints a display token through the API.
func (d *qemuDesk) token(t *testing.T, body string) DisplayTokenResponse {
	t.Helper()
	var out DisplayTokenResponse
	d.call(t, "POST", "/api/v1/sandboxes/desk/display/token", body, &out)
	return out
}

// cursor reads the guest's pointer position with xdotool.
func (d *qemuDesk) cursor(t *testing.T) (int, int) {
	t.Helper()
	var res ExecResponse
	d.call(t, "POST", "/api/v1/sandboxes/desk/exec", `{"command":"xdotool","args":["getmouselocation","--shell"],"env":["DISPLAY=:0","XAUTHORITY=/home/agent/.Xauthority"]}`, &res)
	x, y := -1, -1
	for _, line := range strings.Split(res.Stdout, "\n") {
		k, v, _ := strings.Cut(line, "=")
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			continue
		}
		switch k {
		case "X":
			x = n
		case "Y":
			y = n
		}
	}
	if x < 0 || y < 0 {
		t.Fatalf("xdotool getmouselocation: %+v", res)
	}
	return x, y
}

// view opens a display WebSocket at url and runs the RFB handshake.
func view(t *testing.T, url string) *gateway.Viewer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		cancel()
		t.Fatalf("dial %s: %v", url, err)
	}
	if resp.Header.Get("Sec-WebSocket-Protocol") != "binary" {
		t.Errorf("subprotocol %q, want binary", resp.Header.Get("Sec-WebSocket-Protocol"))
	}
	conn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	t.Cleanup(func() {
		conn.Close()
		cancel()
	})
	conn.SetDeadline(time.Now().Add(2 * time.Minute))
	v, err := gateway.NewViewer(conn)
	if err != nil {
		t.Fatalf("RFB handshake through %s: %v", url, err)
	}
	return v
}

// fullUpdate asks for the whole screen and reads it: a round trip through
// QEMU, after which every message sent before has been handled.
func fullUpdate(t *testing.T, v *gateway.Viewer) gateway.Update {
	t.Helper()
	if err := v.RequestUpdate(false); err != nil {
		t.Fatal(err)
	}
	u, err := v.ReadUpdate()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func near(x, y, wx, wy int) bool {
	return x-wx <= 2 && wx-x <= 2 && y-wy <= 2 && wy-y <= 2
}

// TestDisplayQEMU drives the gateway against a real QEMU VNC server: the
// RFB handshake and framebuffer updates through it, input dropped for
// viewers without control and passed for the holder (until control moves
// away), DisplayService gateways on the server and on a listener of their
// own, and upgrades from other origins refused.
func TestDisplayQEMU(t *testing.T) {
	d := startQEMUDesk(t)
	wsBase := "ws" + strings.TrimPrefix(d.url, "http")

	v := view(t, d.token(t, "").URL)
	if v.Width != 1280 || v.Height != 800 {
		t.Fatalf("ServerInit %dx%d, want 1280x800", v.Width, v.Height)
	}
	u := fullUpdate(t, v)
	if u.Rects < 1 || u.Pixels != 1280*800 || u.Bytes != 1280*800*4 {
		t.Fatalf("full update: %+v", u)
	}

	t.Run("InputDroppedWithoutControl", func(t *testing.T) {
		x0, y0 := d.cursor(t)
		tx, ty := 321, 234
		if near(x0, y0, tx, ty) {
			tx, ty = 654, 432
		}
		if err := v.Pointer(tx, ty, 0); err != nil {
			t.Fatal(err)
		}
		fullUpdate(t, v)
		time.Sleep(300 * time.Millisecond)
		if x, y := d.cursor(t); x != x0 || y != y0 {
			t.Fatalf("a viewer without control moved the pointer from %d,%d to %d,%d", x0, y0, x, y)
		}
	})

	t.Run("InputPassedWithControl", func(t *testing.T) {
		// A person takes control through the API; the answer's display
		// token carries the take-over.
		var took ControlResponse
		d.call(t, "POST", "/api/v1/sandboxes/desk/control", `{"action":"take","holder":"ana"}`, &took)
		if took.Control == nil || took.Token == "" {
			t.Fatalf("take answered %+v", took)
		}
		holder := view(t, "ws"+strings.TrimPrefix(d.url, "http")+"/api/v1/sandboxes/desk/display?token="+took.Token)
		// A token minted later for the same take-over works as well.
		view(t, d.token(t, `{"control":"`+took.Key+`"}`).URL)
		if err := holder.Pointer(321, 234, 0); err != nil {
			t.Fatal(err)
		}
		fullUpdate(t, holder)
		deadline := time.Now().Add(10 * time.Second)
		for x, y := d.cursor(t); !near(x, y, 321, 234); x, y = d.cursor(t) {
			if time.Now().After(deadline) {
				t.Fatalf("the holder of control moved the pointer to %d,%d, want 321,234", x, y)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// Control handed back: the same connection's input stops.
		d.call(t, "POST", "/api/v1/sandboxes/desk/control", `{"action":"release","id":"`+took.Control.ID+`"}`, nil)
		time.Sleep(2 * controlCheckTTL)
		if err := holder.Pointer(700, 500, 0); err != nil {
			t.Fatal(err)
		}
		fullUpdate(t, holder)
		time.Sleep(300 * time.Millisecond)
		if x, y := d.cursor(t); !near(x, y, 321, 234) {
			t.Fatalf("input passed after control was released: pointer at %d,%d", x, y)
		}
	})

	t.Run("DisplayServiceGateway", func(t *testing.T) {
		ds := &api.DisplayService{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindDisplayService}}
		ds.Metadata.Name = "web"
		ds.Spec.Selector = map[string]string{"pool": "web"}
		ds.Spec.Gateway = api.Gateway{Enabled: true}
		api.Default(ds)
		if _, err := d.st.Create(context.Background(), ds); err != nil {
			t.Fatal(err)
		}
		tok := d.token(t, "").Token
		if u := fullUpdate(t, view(t, wsBase+"/display/desk?token="+tok)); u.Bytes != 1280*800*4 {
			t.Fatalf("update through /display: %+v", u)
		}

		// A service with a port of its own, on loopback.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		lds := api.DeepCopy(api.Object(ds)).(*api.DisplayService)
		lds.Metadata = api.ObjectMeta{Name: "web-port"}
		lds.Spec.Ports = []api.ServicePort{{Name: "vnc", Port: port}}
		api.Default(lds)
		if _, err := d.st.Create(context.Background(), lds); err != nil {
			t.Fatal(err)
		}
		hosts, _ := NewHostPolicy("", nil)
		lst := gateway.NewListeners(gateway.ListenerOptions{Store: d.st, Handler: func(name string) http.Handler { return d.srv.DisplayHandler(name, hosts) }})
		defer lst.Close()
		if _, err := lst.Reconcile(context.Background(), "web-port"); err != nil {
			t.Fatal(err)
		}
		base := fmt.Sprintf("http://127.0.0.1:%d", port)
		if code, _ := upgrade(t, base, "/display/desk", nil); code != http.StatusUnauthorized {
			t.Fatalf("listener without a token: %d", code)
		}
		if code, _ := upgrade(t, base, "/api/v1/sandboxes", map[string]string{"Authorization": "Bearer admin"}); code != http.StatusNotFound {
			t.Fatalf("listener serves the API: %d", code)
		}
		if u := fullUpdate(t, view(t, fmt.Sprintf("ws://127.0.0.1:%d/display/desk?token=%s", port, tok))); u.Bytes != 1280*800*4 {
			t.Fatalf("update through the service's listener: %+v", u)
		}
		if _, _, err := d.st.Delete(context.Background(), api.KindDisplayService, "web-port", store.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := lst.Reconcile(context.Background(), "web-port"); err != nil {
			t.Fatal(err)
		}
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			c.Close()
			t.Fatal("the listener of a deleted service still accepts connections")
		}
	})

	t.Run("AgentViewEndsWithAttempt", func(t *testing.T) {
		// An agent's view lasts while its attempt holds the sandbox: once
		// the sandbox serves another agent, the open view is closed.
		bindAgent(t, d.st, "watcher", "desk", 1)
		tok := attemptToken(t, d.st, testKey, "watcher")
		req, _ := http.NewRequest("POST", d.url+"/api/v1/sandboxes/desk/display/token", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var dt DisplayTokenResponse
		json.NewDecoder(resp.Body).Decode(&dt)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the agent's display token: %d", resp.StatusCode)
		}
		v := view(t, dt.URL)
		if u := fullUpdate(t, v); u.Bytes != 1280*800*4 {
			t.Fatalf("the agent's view: %+v", u)
		}
		bindAgent(t, d.st, "next", "desk", 1)
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := v.RequestUpdate(true)
			if err == nil {
				_, err = v.ReadUpdate()
			}
			if err != nil {
				break // closed by the server
			}
			if time.Now().After(deadline) {
				t.Fatal("the agent's view stayed open after the sandbox went to another agent")
			}
			time.Sleep(100 * time.Millisecond)
		}
		if code, msg := upgrade(t, d.url, "/api/v1/sandboxes/desk/display?token="+dt.Token, nil); code != http.StatusForbidden {
			t.Fatalf("the agent's display token afterwards: %d %s", code, msg)
		}
	})

	t.Run("CrossOriginRefused", func(t *testing.T) {
		ws, resp, err := websocket.Dial(context.Background(), d.token(t, "").URL, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://evil.example"}}})
		if err == nil {
			ws.CloseNow()
			t.Fatal("a cross-origin upgrade was accepted")
		}
		if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-origin upgrade: %v %v", resp, err)
		}
	})
}

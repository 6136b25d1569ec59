package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

// BrowserOptions size the browser-desktop benchmark.
type BrowserOptions struct {
	ImageDir string
	Image    string // image name, e.g. browser-desktop
	// Clones is how many fresh clones are made; each is measured once
	// and deleted.
	Clones int
	// Calls is how many CDP Runtime.evaluate calls each clone answers.
	Calls int
	// NodeModules is a node_modules directory holding playwright-core
	// (examples/playwright/node_modules); the Playwright rows are
	// measured when it and node are there, and a fact says why not
	// otherwise.
	NodeModules string
	Log         io.Writer
}

// Command is the hvkube command line that runs o.
func (o BrowserOptions) Command() string {
	cmd := fmt.Sprintf("hvkube bench browser --clones %d --calls %d", o.Clones, o.Calls)
	if o.Image != "" && o.Image != "browser-desktop" {
		cmd += " --image " + o.Image
	}
	return cmd
}

// Browser measures automation clients on fresh clones of the
// browser-desktop image through a real server and node, with a bearer
// token as a client outside the host would use: each clone is created
// through the API until Running, DevTools is reached through the port
// forward (/api/v1/sandboxes/NAME/ports/9222), Playwright connects over
// CDP and opens a page served on the host (allowed by the clone's egress
// rules, reached from the guest at the network's gateway), and CDP
// Runtime.evaluate("1+1") is timed over the forwarded WebSocket.
// Everything it starts is ended on the way out, also on failure.
func Browser(ctx context.Context, o BrowserOptions) (*Report, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, format+"\n", args...) }
	img, err := readBrowserImage(o.ImageDir, o.Image)
	if err != nil {
		return nil, err
	}
	log := quietLogger(o.Log)
	// The backend's in-memory scratch files (a template's RAM while it
	// boots) are named after the template, in a directory that every
	// backend of this user shares by default: a directory of its own
	// keeps another process's template of the same name off this one's.
	shm, err := privateShmDir()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(shm)
	// A cold Chromium start under TCG on a busy host takes minutes.
	be, dir, closeBackend, err := newBackend(ctx, "hvkube-bench-browser-", qemu.Config{ImageDir: o.ImageDir, ShmDir: shm, Logger: log, BootTimeout: 15 * time.Minute})
	if err != nil {
		return nil, err
	}
	defer closeBackend() // VMs outlive a backend: end them, even on failure
	cl, err := startTokenServer(ctx, dir, be, log)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	c := cl.c

	page := newTestPage()
	defer page.Close()
	port := strconv.Itoa(page.Listener.Addr().(*net.TCPAddr).Port)
	pageURL := "http://" + img.Network.Gateway + ":" + port + "/"
	allow := api.Network{Egress: api.Egress{Allow: []string{"127.0.0.1:" + port}}}

	pw := findPlaywright(o.NodeModules)
	rep := &Report{Command: o.Command()}
	if size, err := imageSize(o.ImageDir, o.Image); err == nil {
		rep.Facts = append(rep.Facts, size)
	}

	logf("building the template (a cold boot of %s)…", o.Image)
	tpl := benchTemplate(browserTemplate, o.Image)
	tpl.Spec.Resources.MemoryMB = img.MemoryMB
	if _, err := c.Create(ctx, tpl); err != nil {
		return nil, err
	}
	if err := waitTemplate(ctx, c, browserTemplate, time.Hour, logf); err != nil {
		return nil, err
	}
	rep.Title = fmt.Sprintf("Browser desktop: CDP and Playwright through the port forward (%s, %d MB guest)", be.Accel(), img.MemoryMB)

	n := 0
	newClone := func() (string, time.Duration, error) {
		n++
		name := fmt.Sprintf("browser-%d", n)
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = name
		sb.Spec.TemplateRef = browserTemplate
		sb.Spec.Network = allow
		api.Default(sb)
		t := time.Now()
		if _, err := c.Create(ctx, sb); err != nil {
			return name, 0, err
		}
		if err := waitRunning(ctx, c, name, 5*time.Minute); err != nil {
			return name, 0, err
		}
		return name, time.Since(t), nil
	}
	// The template's first clone starts its own QEMU; from it on, spares
	// are kept, as for a pool's clones.
	logf("first clone (no spare yet)…")
	name, _, err := newClone()
	deleteSandbox(context.WithoutCancel(ctx), c, name)
	if err != nil {
		return nil, err
	}

	running := Result{Name: "sandbox created (POST) → Running: clone + first resume, through the API", Target: "-"}
	firstList := Result{Name: "Running → first DevTools answer through the forward (GET /json/list)", Target: "-"}
	list := Result{Name: "GET /json/list through the forward, again", Target: "-"}
	wsOpen := Result{Name: "CDP WebSocket to the page opened through the forward", Target: "-"}
	eval := Result{Name: `CDP Runtime.evaluate("1+1") round trip through the forward`, Target: "-"}
	pwConnect := Result{Name: "Playwright connectOverCDP through the forward (fresh clone)", Target: "-"}
	pwGoto := Result{Name: "Playwright page.goto of a page served on the host, via the guest's NAT (fresh clone)", Target: "-"}
	pwReached := Result{Name: "↳ goto begun → the request reaches the host's server", Target: ""}
	pwLoaded := Result{Name: "↳ the request → the load event", Target: ""}
	pwAgain := Result{Name: "Playwright page.goto of the same page again", Target: "-"}
	pwProcess := Result{Name: "Playwright script, node started → exited (connect, two gotos, disconnect)", Target: "-"}
	var chromium string
	load0 := loadAvg()
	logf("%d fresh clones: API, forward, Playwright, %d CDP calls each", o.Clones, o.Calls)
	for i := 0; i < o.Clones; i++ {
		// As in a pool that waited a while: a spare is ready.
		time.Sleep(2 * time.Second)
		err := func() error {
			name, d, err := newClone()
			defer deleteSandbox(context.WithoutCancel(ctx), c, name)
			if err != nil {
				return err
			}
			running.Samples = append(running.Samples, d)
			fw := cl.url + "/api/v1/sandboxes/" + name + "/ports/" + strconv.Itoa(img.Automation.CDP)
			t := time.Now()
			var tries int
			var lastErr error
			targets, err := devToolsList(ctx, fw, cl.token, 2*time.Minute, func(err error) { tries, lastErr = tries+1, err })
			if err != nil {
				return err
			}
			firstList.Samples = append(firstList.Samples, time.Since(t))
			if lastErr != nil {
				logf("%s: DevTools answered after %d failed tries (the last: %v)", name, tries, lastErr)
			}
			for j := 0; j < min(o.Calls, 10); j++ {
				t := time.Now()
				if _, err := devToolsList(ctx, fw, cl.token, 0, nil); err != nil {
					return err
				}
				list.Samples = append(list.Samples, time.Since(t))
			}
			if chromium == "" {
				chromium = browserVersion(ctx, fw, cl.token)
			}
			if pw.ok() {
				before := page.hits.Load()
				page.first.Store(0)
				r, err := pw.run(ctx, fw, cl.token, pageURL, testPageTitle)
				if err != nil {
					return err
				}
				if page.hits.Load() == before {
					return errors.New("playwright: the host's test page was never fetched")
				}
				pwConnect.Samples = append(pwConnect.Samples, r.Connect)
				pwGoto.Samples = append(pwGoto.Samples, r.Goto)
				if reached := time.Unix(0, page.first.Load()).Sub(r.GotoStart); reached > 0 && reached < r.Goto {
					pwReached.Samples = append(pwReached.Samples, reached)
					pwLoaded.Samples = append(pwLoaded.Samples, r.Goto-reached)
				}
				pwAgain.Samples = append(pwAgain.Samples, r.Again)
				pwProcess.Samples = append(pwProcess.Samples, r.Process)
			}
			ws := pageTarget(targets)
			if ws == "" {
				return fmt.Errorf("sandbox %s: DevTools lists no page target", name)
			}
			t = time.Now()
			cdp, err := dialCDP(ctx, ws, cl.token)
			if err != nil {
				return err
			}
			defer cdp.close()
			wsOpen.Samples = append(wsOpen.Samples, time.Since(t))
			for j := 0; j < o.Calls; j++ {
				t := time.Now()
				if err := cdp.evaluateOnePlusOne(ctx); err != nil {
					return fmt.Errorf("sandbox %s: call %d: %w", name, j, err)
				}
				eval.Samples = append(eval.Samples, time.Since(t))
			}
			return nil
		}()
		if err != nil {
			return nil, err
		}
		logf("clone %d/%d measured", i+1, o.Clones)
	}
	rep.Results = append(rep.Results, running, firstList, list, wsOpen, eval)
	if pw.ok() {
		rep.Results = append(rep.Results, pwConnect, pwGoto, pwReached, pwLoaded, pwAgain, pwProcess)
		rep.Facts = append(rep.Facts, fmt.Sprintf("Playwright: playwright-core %s on node %s, `chromium.connectOverCDP` with an `Authorization: Bearer` header, the start page's tab, `page.goto(…, {waitUntil: \"load\"})`; times taken in node (performance.now)", pw.version, pw.nodeVersion))
	} else {
		rep.Facts = append(rep.Facts, "Playwright rows not measured: "+pw.why)
	}
	if chromium != "" {
		rep.Facts = append(rep.Facts, "browser: "+chromium)
	}
	rep.Facts = append(rep.Facts,
		fmt.Sprintf("every request carries the server's token (Authorization: Bearer); the server, the node and the QEMU backend run in this process, the client reaches the server over loopback TCP, and the forward reaches the guest's port %d over the sandbox's own network", img.Automation.CDP),
		fmt.Sprintf("the test page is served on the host's 127.0.0.1:%s, allowed by the clone's egress rule 127.0.0.1:%s and reached from the guest as %s", port, port, pageURL),
		fmt.Sprintf("load average (1 min) when the clones started: %s, when they ended: %s", load0, loadAvg()))
	return rep, nil
}

// browserTemplate is the benchmark's Template.
const browserTemplate = "bench-browser"

// privateShmDir makes a new directory under /dev/shm, or returns ""
// (the backend's default) where there is none.
func privateShmDir() (string, error) {
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		return "", nil
	}
	return os.MkdirTemp("/dev/shm", "hvkube-bench-browser-")
}

// browserImage is what the benchmark reads of a browser image's
// image.json.
type browserImage struct {
	MemoryMB int `json:"memoryMB"`
	Network  *struct {
		Gateway string `json:"gateway"`
	} `json:"network"`
	Automation api.Automation `json:"automation"`
}

// readBrowserImage reads the image's image.json; an image without a
// network or a CDP port cannot be measured here.
func readBrowserImage(imageDir, name string) (*browserImage, error) {
	img, err := readImage(imageDir, name)
	if err != nil {
		return nil, err
	}
	if img.Network == nil || img.Network.Gateway == "" || img.Automation.CDP == 0 {
		return nil, fmt.Errorf("image %s declares no network or no CDP port (image.json network, automation.cdp): rebuild it with make image-browser", name)
	}
	return img, nil
}

// readImage reads an image's image.json; guest memory defaults as a
// template's does.
func readImage(imageDir, name string) (*browserImage, error) {
	b, err := os.ReadFile(filepath.Join(imageDir, name, "current", "image.json"))
	if err != nil {
		return nil, fmt.Errorf("image %s (built by make image or make image-browser): %w", name, err)
	}
	var img browserImage
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("image %s: image.json: %w", name, err)
	}
	if img.MemoryMB == 0 {
		img.MemoryMB = api.DefaultTemplateMemory
	}
	return &img, nil
}

// tokenServer is a real server that asks for a token, over a node of a
// QEMU backend.
type tokenServer struct {
	url, token string
	c          *client.Client
	stop       func()
}

// startTokenServer starts a store in dir, the node's controllers and a
// server on loopback that requires a random bearer token, as hvkube serve
// does with --token.
func startTokenServer(ctx context.Context, dir string, be *qemu.Backend, log *slog.Logger) (*tokenServer, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(raw[:])
	st, err := store.Open(ctx, filepath.Join(dir, "store"), store.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	mgr := reconcile.NewManager(st, log, 0)
	nd := node.New(node.Options{Store: st, Backend: be, Logger: log})
	nd.Register(mgr)
	// The controllers and the server live until stop, not until ctx ends:
	// stop runs on the way out of a cancelled benchmark too.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := mgr.Start(runCtx); err != nil {
		cancel()
		st.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		mgr.Stop()
		st.Close()
		return nil, err
	}
	hs := &http.Server{Handler: server.New(server.Options{Store: st, Logger: log, Token: token, Sandboxes: nd, Actions: nd.Actions()}).Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	url := "http://" + ln.Addr().String()
	c, err := client.New(url, token)
	stop := func() {
		hs.Close()
		cancel()
		mgr.Stop()
		nd.Stop()
		st.Close()
	}
	if err != nil {
		stop()
		return nil, err
	}
	return &tokenServer{url: url, token: token, c: c, stop: stop}, nil
}

// waitTemplate waits until template name is Ready. A build that failed
// (its cold boot timed out on a busy host, say) is logged and waited out:
// the node builds it again.
func waitTemplate(ctx context.Context, c *client.Client, name string, timeout time.Duration, logf func(string, ...any)) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		o, err := c.Get(ctx, api.KindTemplate, name)
		if err != nil {
			return err
		}
		s := o.(*api.Template).Status
		if s.Phase == api.TemplateReady {
			return nil
		}
		if s.Phase == api.TemplateFailed && s.Message != last {
			last = s.Message
			logf("template %s failed, the node builds it again: %s", name, s.Message)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("template %s is still %s after %s: %s", name, s.Phase, timeout, s.Message)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitRunning polls sandbox name every 5 ms until it is Running.
func waitRunning(ctx context.Context, c *client.Client, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		o, err := c.Get(ctx, api.KindSandbox, name)
		if err != nil {
			return err
		}
		s := o.(*api.Sandbox).Status
		switch {
		case s.Phase == api.SandboxRunning:
			return nil
		case s.Phase == api.SandboxError:
			return fmt.Errorf("sandbox %s is %s: %s", name, s.Phase, s.Message)
		case time.Now().After(deadline):
			return fmt.Errorf("sandbox %s is still %s after %s", name, s.Phase, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testPageTitle is the title of the host's test page.
const testPageTitle = "hvkube bench page"

// testPage serves a small HTML page on the host's loopback and counts
// the requests for it.
type testPage struct {
	*httptest.Server
	hits atomic.Int64
	// first is when the first request since it was set to 0 came
	// (UnixNano).
	first atomic.Int64
}

func newTestPage() *testPage {
	p := &testPage{}
	body := "<!doctype html><html><head><meta charset=\"utf-8\"><title>" + testPageTitle + "</title></head><body><h1>" + testPageTitle + "</h1><p>Served on the host, fetched by the guest through its network.</p></body></html>"
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		p.hits.Add(1)
		p.first.CompareAndSwap(0, time.Now().UnixNano())
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, body)
	}))
	return p
}

// devToolsTarget is an entry of DevTools' /json/list.
type devToolsTarget struct {
	Type                 string `json:"type"`
	URL                  string `json:"url"`
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

// devToolsList gets DevTools' target list through the forward fw
// (http://HOST/api/v1/sandboxes/NAME/ports/PORT). With retry > 0 it
// tries again every 20 ms for that long while the answer is not 200 (the
// relay or Chromium not answering yet).
// failed, when not nil, is told of each failed try.
func devToolsList(ctx context.Context, fw, token string, retry time.Duration, failed func(error)) ([]devToolsTarget, error) {
	deadline := time.Now().Add(retry)
	for {
		targets, err := getJSONList(ctx, fw, token)
		if err == nil || retry <= 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return targets, err
		}
		if failed != nil {
			failed(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func getJSONList(ctx context.Context, fw, token string) ([]devToolsTarget, error) {
	b, err := getForward(ctx, fw+"/json/list", token)
	if err != nil {
		return nil, err
	}
	var targets []devToolsTarget
	if err := json.Unmarshal(b, &targets); err != nil {
		return nil, fmt.Errorf("GET /json/list through the forward: %w: %.200q", err, b)
	}
	return targets, nil
}

// getForward GETs url with the token and returns a 200's body.
func getForward(ctx context.Context, url, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.300s", url, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// browserVersion is DevTools' Browser (Chrome/…) through the forward, or
// "" when it cannot be read.
func browserVersion(ctx context.Context, fw, token string) string {
	b, err := getForward(ctx, fw+"/json/version", token)
	if err != nil {
		return ""
	}
	var v struct {
		Browser string `json:"Browser"`
	}
	json.Unmarshal(b, &v)
	return v.Browser
}

// pageTarget is the WebSocket URL of the first page in targets, "" when
// there is none.
func pageTarget(targets []devToolsTarget) string {
	for _, t := range targets {
		if t.Type == "page" && t.WebSocketDebuggerURL != "" {
			return t.WebSocketDebuggerURL
		}
	}
	return ""
}

// cdpConn is a CDP session over a WebSocket: one call at a time.
type cdpConn struct {
	ws *websocket.Conn
	id int
}

// dialCDP opens the CDP WebSocket at url with the token.
func dialCDP(ctx context.Context, url, token string) (*cdpConn, error) {
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		return nil, fmt.Errorf("CDP WebSocket %s: %w", url, err)
	}
	ws.SetReadLimit(16 << 20)
	return &cdpConn{ws: ws}, nil
}

func (c *cdpConn) close() { c.ws.Close(websocket.StatusNormalClosure, "") }

// call sends method with params and returns the result of its answer;
// events and answers to other calls that arrive meanwhile are skipped. A
// call takes a minute at most.
func (c *cdpConn) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c.id++
	msg, err := json.Marshal(struct {
		ID     int    `json:"id"`
		Method string `json:"method"`
		Params any    `json:"params,omitempty"`
	}{c.id, method, params})
	if err != nil {
		return nil, err
	}
	if err := c.ws.Write(ctx, websocket.MessageText, msg); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	for {
		_, b, err := c.ws.Read(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		var reply struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &reply); err != nil {
			return nil, fmt.Errorf("%s: %w: %.200q", method, err, b)
		}
		if reply.ID != c.id {
			continue
		}
		if reply.Error != nil {
			return nil, fmt.Errorf("%s: %d %s", method, reply.Error.Code, reply.Error.Message)
		}
		return reply.Result, nil
	}
}

// evaluateOnePlusOne calls Runtime.evaluate("1+1") and checks that the
// page answered 2.
func (c *cdpConn) evaluateOnePlusOne(ctx context.Context) error {
	res, err := c.call(ctx, "Runtime.evaluate", map[string]any{"expression": "1+1", "returnByValue": true})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.Number `json:"value"`
		} `json:"result"`
		ExceptionDetails json.RawMessage `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil || r.Result.Value != "2" || r.ExceptionDetails != nil {
		return fmt.Errorf("Runtime.evaluate(\"1+1\") answered %.200s, want the value 2", res)
	}
	return nil
}

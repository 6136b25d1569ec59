package cdp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// fakeDevTools is a test double of a browser's DevTools endpoint: the
// HTTP target list and a page's WebSocket, whose commands the test's
// handler answers. It records the commands it was sent, and refuses what
// real DevTools refuses (a Host that is not localhost or an address, an
// Origin on a WebSocket).
type fakeDevTools struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex // guards the following fields
	list    string     // the answer of /json/list
	calls   []string   // methods sent, in order
	params  map[string][]json.RawMessage
	handle  func(s *fakeSession, method string, params json.RawMessage) (any, *Error)
	paths   []string // HTTP paths asked for, with their methods
	session *fakeSession
}

// fakeSession is one WebSocket session of fakeDevTools.
type fakeSession struct {
	ws *websocket.Conn
}

// event sends an event to the session's client.
func (s *fakeSession) event(method string, params any) {
	b, _ := json.Marshal(map[string]any{"method": method, "params": params})
	s.ws.Write(context.Background(), websocket.MessageText, b)
}

func newFakeDevTools(t *testing.T) *fakeDevTools {
	f := &fakeDevTools{t: t, params: map[string][]json.RawMessage{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// endpoint is an Endpoint that reaches f through a dial function, as the
// server reaches a guest's port.
func (f *fakeDevTools) endpoint() *Endpoint {
	return NewEndpoint(9222, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", f.srv.Listener.Addr().String())
	})
}

func (f *fakeDevTools) serve(w http.ResponseWriter, r *http.Request) {
	if r.Host != "localhost:9222" {
		http.Error(w, "Host header is specified and is not an IP address or localhost.", http.StatusInternalServerError)
		return
	}
	f.mu.Lock()
	f.paths = append(f.paths, r.Method+" "+r.URL.RequestURI())
	list := f.list
	f.mu.Unlock()
	switch {
	case r.URL.Path == "/json/list":
		fmt.Fprint(w, list)
	case r.URL.Path == "/json/new":
		if r.Method != http.MethodPut {
			http.Error(w, "Using unsafe HTTP verb GET to invoke /json/new.", http.StatusMethodNotAllowed)
			return
		}
		fmt.Fprint(w, `{"id":"NEW1","type":"page","title":"","url":"about:blank"}`)
	case strings.HasPrefix(r.URL.Path, "/json/activate/"), strings.HasPrefix(r.URL.Path, "/json/close/"):
		fmt.Fprint(w, "Target activated")
	case strings.HasPrefix(r.URL.Path, "/devtools/page/"):
		if r.Header.Get("Origin") != "" {
			http.Error(w, "Rejected an incoming WebSocket connection from the "+r.Header.Get("Origin")+" origin.", http.StatusForbidden)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ws.SetReadLimit(1 << 20)
		s := &fakeSession{ws: ws}
		f.mu.Lock()
		f.session = s
		f.mu.Unlock()
		f.answer(s)
	default:
		http.NotFound(w, r)
	}
}

// answer answers s's commands until it ends.
func (f *fakeDevTools) answer(s *fakeSession) {
	ctx := context.Background()
	for {
		_, b, err := s.ws.Read(ctx)
		if err != nil {
			return
		}
		var m message
		if err := json.Unmarshal(b, &m); err != nil {
			f.t.Errorf("the client sent no JSON: %q", b)
			return
		}
		f.mu.Lock()
		f.calls = append(f.calls, m.Method)
		f.params[m.Method] = append(f.params[m.Method], m.Params)
		h := f.handle
		f.mu.Unlock()
		var res any = map[string]any{}
		var cerr *Error
		if h != nil {
			res, cerr = h(s, m.Method, m.Params)
		}
		if res == nil && cerr == nil {
			continue // no answer
		}
		out := map[string]any{"id": m.ID}
		if cerr != nil {
			out["error"] = cerr
		} else {
			out["result"] = res
		}
		b, _ = json.Marshal(out)
		if s.ws.Write(ctx, websocket.MessageText, b) != nil {
			return
		}
	}
}

func (f *fakeDevTools) setHandler(h func(s *fakeSession, method string, params json.RawMessage) (any, *Error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handle = h
}

func (f *fakeDevTools) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeDevTools) paramsOf(method string) []json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]json.RawMessage(nil), f.params[method]...)
}

func TestPages(t *testing.T) {
	f := newFakeDevTools(t)
	f.list = `[
		{"id":"A1","type":"page","title":"Front","url":"https://example.com/"},
		{"id":"UI","type":"page","title":"Tab search","url":"chrome://tab-search.top-chrome/"},
		{"id":"SW","type":"service_worker","title":"sw","url":"https://example.com/sw.js"},
		{"id":"../../json/close/A1","type":"page","title":"evil","url":"about:blank"},
		{"id":"B2","type":"page","title":"Back","url":"chrome://version/"}
	]`
	ep := f.endpoint()
	ctx := context.Background()
	pages, err := ep.Pages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pages {
		got = append(got, p.ID)
	}
	if want := "A1 B2"; strings.Join(got, " ") != want {
		t.Errorf("pages %v, want %s", got, want)
	}
	if cur, err := ep.Current(ctx); err != nil || cur.ID != "A1" {
		t.Errorf("current: %+v %v", cur, err)
	}
	if _, err := ep.NewPage(ctx); err != nil {
		t.Errorf("new page: %v", err)
	}
	if err := ep.Activate(ctx, "B2"); err != nil {
		t.Error(err)
	}
	if err := ep.ClosePage(ctx, "x/../y"); err == nil {
		t.Error("closed a page whose id is a path")
	}
	f.mu.Lock()
	paths := f.paths
	f.mu.Unlock()
	if want := "GET /json/list,GET /json/list,PUT /json/new?about:blank,GET /json/activate/B2"; strings.Join(paths, ",") != want {
		t.Errorf("requests %q\nwant %q", paths, want)
	}

	f.mu.Lock()
	f.list = `[]`
	f.mu.Unlock()
	if _, err := ep.Current(ctx); !errors.Is(err, ErrNoPage) {
		t.Errorf("no pages: %v", err)
	}
	f.mu.Lock()
	f.list = strings.Repeat(" ", int(MaxListBytes)+1)
	f.mu.Unlock()
	if _, err := ep.Pages(ctx); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("an answer over the bound: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	ep := NewEndpoint(9222, func(context.Context) (net.Conn, error) { return nil, errors.New("connection refused") })
	if _, err := ep.Pages(context.Background()); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Pages: %v, want ErrUnreachable", err)
	}
	if _, err := ep.Attach(context.Background(), "A1"); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Attach: %v, want ErrUnreachable", err)
	}
}

func attach(t *testing.T, f *fakeDevTools) *Conn {
	t.Helper()
	c, err := f.endpoint().Attach(context.Background(), "A1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCall(t *testing.T) {
	f := newFakeDevTools(t)
	f.setHandler(func(s *fakeSession, method string, params json.RawMessage) (any, *Error) {
		switch method {
		case "Echo.it":
			var p map[string]any
			json.Unmarshal(params, &p)
			return p, nil
		case "Page.navigate":
			return nil, &Error{Code: -32000, Message: "Cannot navigate to invalid URL"}
		}
		return map[string]any{}, nil
	})
	c := attach(t, f)
	ctx := context.Background()
	// Many at once: each gets its own answer.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out struct{ N int }
			if err := c.Call(ctx, "Echo.it", map[string]int{"N": i}, &out); err != nil || out.N != i {
				t.Errorf("call %d: %+v %v", i, out, err)
			}
		}()
	}
	wg.Wait()
	err := c.Call(ctx, "Page.navigate", map[string]string{"url": "x"}, nil)
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != -32000 || !strings.Contains(err.Error(), "Page.navigate: Cannot navigate") {
		t.Errorf("a refused command: %v", err)
	}
}

func TestCallBounded(t *testing.T) {
	f := newFakeDevTools(t)
	f.setHandler(func(_ *fakeSession, method string, _ json.RawMessage) (any, *Error) {
		if method == "Never.answered" {
			return nil, nil
		}
		return map[string]any{}, nil
	})
	c := attach(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Call(ctx, "Never.answered", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unanswered: %v", err)
	}
	old := CallTimeout
	CallTimeout = 200 * time.Millisecond
	defer func() { CallTimeout = old }()
	if err := c.Call(context.Background(), "Never.answered", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unanswered without a deadline of its own: %v", err)
	}
	// A call whose context has ended sends nothing, and the session goes on.
	if err := c.Call(ctx, "Late.one", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call with an ended context: %v", err)
	}
	if err := c.Call(context.Background(), "Answered.one", nil, nil); err != nil {
		t.Errorf("a call after calls that timed out: %v", err)
	}
	if slices.Contains(f.sent(), "Late.one") {
		t.Errorf("a call with an ended context was sent")
	}
}

func TestMessageBound(t *testing.T) {
	old := MaxMessage
	MaxMessage = 4 << 10
	defer func() { MaxMessage = old }()
	f := newFakeDevTools(t)
	f.setHandler(func(_ *fakeSession, method string, _ json.RawMessage) (any, *Error) {
		if method == "Big.one" {
			return map[string]string{"x": strings.Repeat("a", 8<<10)}, nil
		}
		return map[string]any{}, nil
	})
	c := attach(t, f)
	err := c.Call(context.Background(), "Big.one", nil, nil)
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("a message over the bound: %v, want the session ended", err)
	}
	if err := c.Call(context.Background(), "Small.one", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("a call after the session ended: %v", err)
	}
}

func TestEvents(t *testing.T) {
	f := newFakeDevTools(t)
	f.setHandler(func(s *fakeSession, method string, _ json.RawMessage) (any, *Error) {
		if method == "Flood.events" {
			// More than a subscription holds: the rest are dropped and
			// the session goes on.
			for i := range 3 * eventBuffer {
				s.event("Page.loadEventFired", map[string]int{"timestamp": i})
			}
			s.event("Other.event", nil)
		}
		return map[string]any{}, nil
	})
	c := attach(t, f)
	ch, stop := c.Subscribe("Page.loadEventFired")
	defer stop()
	if err := c.Call(context.Background(), "Flood.events", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(context.Background(), "After.flood", nil, nil); err != nil {
		t.Fatalf("a call after a flood of events: %v", err)
	}
	got := 0
	for len(ch) > 0 {
		ev := <-ch
		if ev.Method != "Page.loadEventFired" {
			t.Errorf("event %s on a subscription of Page.loadEventFired", ev.Method)
		}
		got++
	}
	if got != eventBuffer {
		t.Errorf("%d events held, want %d", got, eventBuffer)
	}
}

// docState is the readyState of the fake page's document.
type docState struct {
	mu sync.Mutex // guards s
	s  string
}

func (d *docState) get() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.s
}

func (d *docState) set(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.s = s
}

// pageHandler answers the commands Page's methods send for a page with
// one button, #go, whose box is 100x40 at (200, 300).
func pageHandler(state *docState) func(s *fakeSession, method string, params json.RawMessage) (any, *Error) {
	return func(s *fakeSession, method string, params json.RawMessage) (any, *Error) {
		switch method {
		case "Runtime.evaluate":
			return map[string]any{"result": map[string]any{"type": "object", "value": map[string]string{"URL": "http://site/", "Title": "Site", "State": state.get()}}}, nil
		case "Page.navigate":
			var p struct{ URL string }
			json.Unmarshal(params, &p)
			if strings.Contains(p.URL, "nowhere") {
				return map[string]any{"frameId": "F", "errorText": "net::ERR_NAME_NOT_RESOLVED"}, nil
			}
			go func() {
				time.Sleep(50 * time.Millisecond)
				state.set("complete")
				s.event("Page.loadEventFired", map[string]float64{"timestamp": 1})
			}()
			return map[string]any{"frameId": "F", "loaderId": "L"}, nil
		case "DOM.getDocument":
			return map[string]any{"root": map[string]int{"nodeId": 1, "backendNodeId": 2}}, nil
		case "DOM.querySelector":
			var p struct{ Selector string }
			json.Unmarshal(params, &p)
			switch p.Selector {
			case "#go":
				return map[string]int{"nodeId": 7}, nil
			case "[[[":
				return nil, &Error{Code: -32000, Message: "DOM Error while querying"}
			}
			return map[string]int{"nodeId": 0}, nil
		case "DOM.describeNode":
			return map[string]any{"node": map[string]int{"backendNodeId": 70}}, nil
		case "DOM.resolveNode":
			return map[string]any{"object": map[string]string{"type": "object", "objectId": "obj-70"}}, nil
		case "Runtime.callFunctionOn":
			var p struct {
				FunctionDeclaration string
			}
			json.Unmarshal(params, &p)
			if strings.Contains(p.FunctionDeclaration, "nodeType") {
				return map[string]any{"result": map[string]any{"type": "boolean", "value": true}}, nil
			}
			return map[string]any{"result": map[string]any{"type": "string", "value": ""}}, nil
		case "DOM.getContentQuads":
			return map[string]any{"quads": [][]float64{{200, 300, 300, 300, 300, 340, 200, 340}}}, nil
		}
		return map[string]any{}, nil
	}
}

func TestNavigate(t *testing.T) {
	f := newFakeDevTools(t)
	state := &docState{s: "loading"}
	f.setHandler(pageHandler(state))
	p := NewPage(attach(t, f))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	i, err := p.Navigate(ctx, "http://site/")
	if err != nil || i.Loading || i.Title != "Site" {
		t.Fatalf("navigate: %+v %v", i, err)
	}
	if _, err := p.Navigate(ctx, "http://nowhere/"); err == nil || !strings.Contains(err.Error(), "ERR_NAME_NOT_RESOLVED") {
		t.Errorf("navigate to no such host: %v", err)
	}
}

func TestNavigateStillLoading(t *testing.T) {
	f := newFakeDevTools(t)
	state := &docState{s: "loading"}
	h := pageHandler(state)
	f.setHandler(func(s *fakeSession, method string, params json.RawMessage) (any, *Error) {
		if method == "Page.navigate" {
			return map[string]any{"frameId": "F", "loaderId": "L"}, nil // and never loads
		}
		return h(s, method, params)
	})
	p := NewPage(attach(t, f))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	i, err := p.Navigate(ctx, "http://site/")
	if err != nil || !i.Loading || i.URL != "http://site/" {
		t.Errorf("a page that does not load in time: %+v %v, want it reported as loading", i, err)
	}
}

func TestClick(t *testing.T) {
	f := newFakeDevTools(t)
	state := &docState{s: "complete"}
	f.setHandler(pageHandler(state))
	p := NewPage(attach(t, f))
	ctx := context.Background()
	desc, err := p.Click(ctx, Locator{Selector: "#go"})
	if err != nil || desc != `selector "#go"` {
		t.Fatalf("click: %q %v", desc, err)
	}
	var got []string
	for _, b := range f.paramsOf("Input.dispatchMouseEvent") {
		var ev struct {
			Type       string
			X, Y       float64
			Button     string
			ClickCount int
		}
		json.Unmarshal(b, &ev)
		got = append(got, fmt.Sprintf("%s %g,%g %s %d", ev.Type, ev.X, ev.Y, ev.Button, ev.ClickCount))
	}
	if want := "mouseMoved 250,320  0|mousePressed 250,320 left 1|mouseReleased 250,320 left 1"; strings.Join(got, "|") != want {
		t.Errorf("mouse events %q\nwant %q", got, want)
	}
	// The selector travels as a parameter, not inside a script.
	if q := f.paramsOf("DOM.querySelector"); len(q) != 1 || !strings.Contains(string(q[0]), `"selector":"#go"`) {
		t.Errorf("DOM.querySelector params %s", q)
	}
	if _, err := p.Click(ctx, Locator{Selector: "#none"}); !errors.Is(err, ErrNoElement) {
		t.Errorf("click on nothing: %v", err)
	}
	if _, err := p.Click(ctx, Locator{Selector: "[[["}); !errors.Is(err, ErrBadSelector) {
		t.Errorf("click with a bad selector: %v", err)
	}
}

func TestClickCovered(t *testing.T) {
	f := newFakeDevTools(t)
	state := &docState{s: "complete"}
	h := pageHandler(state)
	f.setHandler(func(s *fakeSession, method string, params json.RawMessage) (any, *Error) {
		if method == "Runtime.callFunctionOn" && strings.Contains(string(params), "elementFromPoint") {
			return map[string]any{"result": map[string]any{"type": "string", "value": `<div id=cookie-banner>`}}, nil
		}
		return h(s, method, params)
	})
	p := NewPage(attach(t, f))
	_, err := p.Click(context.Background(), Locator{Selector: "#go"})
	if !errors.Is(err, ErrNotInteractable) || !strings.Contains(err.Error(), "cookie-banner") {
		t.Errorf("click on a covered element: %v", err)
	}
	for _, m := range f.sent() {
		if m == "Input.dispatchMouseEvent" {
			t.Errorf("a covered element was clicked")
		}
	}
}

func TestFormatAXTree(t *testing.T) {
	str := func(s string) *AXValue { b, _ := json.Marshal(s); return &AXValue{Type: "string", Value: b} }
	prop := func(name, raw string) AXProperty {
		return AXProperty{Name: name, Value: AXValue{Type: "x", Value: json.RawMessage(raw)}}
	}
	nodes := []AXNode{
		{NodeID: "1", Role: str("RootWebArea"), Name: str("Order form"), ChildIDs: []string{"2", "9"}},
		{NodeID: "2", ParentID: "1", Role: str("generic"), ChildIDs: []string{"3", "5", "7"}},
		{NodeID: "3", ParentID: "2", Role: str("heading"), Name: str("Order"), Properties: []AXProperty{prop("level", "1")}, ChildIDs: []string{"4"}},
		{NodeID: "4", ParentID: "3", Role: str("StaticText"), Name: str("Order")},
		{NodeID: "5", ParentID: "2", Role: str("textbox"), Name: str("Your name"), Value: str("Ada\nLovelace"),
			Properties: []AXProperty{prop("focused", "true"), prop("disabled", "false")}, ChildIDs: []string{"6"}},
		{NodeID: "6", ParentID: "5", Role: str("generic"), ChildIDs: []string{"12"}},
		{NodeID: "12", ParentID: "6", Role: str("StaticText"), Name: str("Ada Lovelace")},
		{NodeID: "7", ParentID: "2", Role: str("button"), Name: str("Menu"), Properties: []AXProperty{prop("expanded", "false")}, ChildIDs: []string{"8"}},
		{NodeID: "8", ParentID: "7", Role: str("StaticText"), Name: str("Menu")},
		{NodeID: "9", ParentID: "1", Ignored: true, Role: str("none"), ChildIDs: []string{"10"}},
		{NodeID: "10", ParentID: "9", Role: str("StaticText"), Name: str("pressed 1"), ChildIDs: []string{"11", "1"}}, // a loop back to the root
		{NodeID: "11", ParentID: "10", Role: str("InlineTextBox"), Name: str("pressed 1")},
	}
	want := `- RootWebArea "Order form"
  - heading "Order" [level=1]
  - textbox "Your name" [focused]: Ada Lovelace
  - button "Menu" [expanded=false]
  - StaticText "pressed 1"
`
	if got := FormatAXTree(nodes, 0); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	got := FormatAXTree(nodes, 60)
	if !strings.HasPrefix(got, "- RootWebArea \"Order form\"\n  - heading \"Order\" [level=1]\n… (snapshot cut at 60 bytes after 2 lines") {
		t.Errorf("cut at 60 bytes:\n%s", got)
	}
	long := strings.Repeat("x", 500)
	if got := FormatAXTree([]AXNode{{NodeID: "1", Role: str("link"), Name: str(long)}}, 0); len(got) > 250 || !strings.Contains(got, "…") {
		t.Errorf("a long name: %d bytes: %s", len(got), got)
	}
}

// TestForwarded reaches DevTools behind an HTTP proxy of its port, as
// `hvkube mcp` reaches a guest's through the API's port forward: the
// paths follow the proxy's prefix, the header (the token) goes with every
// request and with the WebSocket, and a proxy that reaches nothing is
// ErrUnreachable.
func TestForwarded(t *testing.T) {
	f := newFakeDevTools(t)
	f.list = `[{"id":"A1","type":"page","title":"Front","url":"https://example.com/"}]`
	f.setHandler(func(s *fakeSession, method string, params json.RawMessage) (any, *Error) {
		return map[string]any{"ok": true}, nil
	})
	const prefix = "/api/v1/sandboxes/web/ports/9222"
	up := &url.URL{Scheme: "http", Host: f.srv.Listener.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(up)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		r.Host = "localhost:9222"
	}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, prefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		r.URL.Path = rest
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	ctx := context.Background()

	ep := NewForwarded(proxy.URL+prefix+"/", 9222, http.Header{"Authorization": {"Bearer tok"}})
	if ep.Port() != 9222 {
		t.Errorf("port %d", ep.Port())
	}
	cur, err := ep.Current(ctx)
	if err != nil || cur.ID != "A1" {
		t.Fatalf("current page through the proxy: %+v %v", cur, err)
	}
	c, err := ep.Attach(ctx, cur.ID)
	if err != nil {
		t.Fatalf("attach through the proxy: %v", err)
	}
	var out struct{ OK bool }
	if err := c.Call(ctx, "Runtime.evaluate", map[string]any{"expression": "1"}, &out); err != nil || !out.OK {
		t.Errorf("a command through the proxy: %+v %v", out, err)
	}
	c.Close()

	if _, err := NewForwarded(proxy.URL+prefix, 9222, nil).Pages(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("without the token: %v", err)
	}
	if _, err := NewForwarded(proxy.URL+prefix, 9222, nil).Attach(ctx, "A1"); err == nil {
		t.Error("a WebSocket without the token was opened")
	}
	f.srv.Close()
	if _, err := ep.Pages(ctx); !errors.Is(err, ErrUnreachable) {
		t.Errorf("a proxy that reaches nothing: %v, want ErrUnreachable", err)
	}
}

// Package browsertool runs the member tools of Anthropic's browser
// toolset (browser_toolset_20260801) against a browser's DevTools: a
// model's tool_use blocks in, the tool_result blocks to send back out.
// Targets are viewport pixels or element references (ref_N) that
// read_page and find hand out; tabs are the browser's page targets, by
// their DevTools id.
package browsertool

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/cdp"
)

// Type is the toolset's type in a request's tools.
const Type = "browser_toolset_20260801"

// ToolsetName is what every member call and result carries.
const ToolsetName = "browser"

// Members are the member tools served, in the toolset's order.
var Members = []string{
	"navigate", "screenshot", "zoom",
	"left_click", "right_click", "middle_click", "double_click", "triple_click", "hover",
	"left_click_drag", "left_mouse_down", "left_mouse_up", "mouse_move", "scroll", "scroll_to",
	"type", "key", "hold_key", "wait",
	"read_page", "find", "get_page_text", "form_input",
	"new_tab", "list_tabs", "switch_tab", "close_tab",
}

// Optional are the members that are off unless a request's toolset
// enables them; they are not served here.
var Optional = []string{"javascript_exec", "file_upload", "read_console", "read_network"}

// Bounds.
const (
	MaxCalls     = 50      // tool_use blocks in one request
	MaxText      = 4096    // characters of type's text, a URL, a query
	MaxPageText  = 50_000  // characters of read_page, find and get_page_text
	MaxFind      = 20      // matches find returns
	maxWait      = 30.0    // seconds of wait and hold_key
	maxTabs      = 100     // tabs a browser_state lists
	maxRefs      = 100_000 // references one tab hands out before it navigates
	notExecuted  = "Not executed: an earlier action in this turn failed."
	defaultDepth = 15
)

// Call is a tool_use block of a browser member, as the model sent it.
type Call struct {
	Type        string          `json:"type"`
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	ToolsetName string          `json:"toolset_name"`
	Input       json.RawMessage `json:"input"`
	Caller      json.RawMessage `json:"caller,omitempty"`
}

// Result is the tool_result block that answers a Call.
type Result struct {
	Type        string `json:"type"`
	ToolUseID   string `json:"tool_use_id"`
	ToolsetName string `json:"toolset_name"`
	IsError     bool   `json:"is_error,omitempty"`
	Content     []any  `json:"content"`
}

// TextBlock is a text content block.
type TextBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ImageBlock is an image content block (base64 PNG).
type ImageBlock struct {
	Type   string      `json:"type"`
	Source ImageSource `json:"source"`
}

// ImageSource is an ImageBlock's data.
type ImageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// StateBlock is a browser_state block: every tab after the call, and
// what changed.
type StateBlock struct {
	Type         string        `json:"type"`
	Tabs         []TabEntry    `json:"tabs"`
	StateChanges []StateChange `json:"state_changes,omitempty"`
}

// TabEntry is a tab of a StateBlock.
type TabEntry struct {
	TabID  string `json:"tab_id"`
	Title  string `json:"title"`
	URL    string `json:"url"`
	Active bool   `json:"active,omitempty"`
}

// StateChange is an entry of a StateBlock's state_changes.
type StateChange struct {
	Type  string `json:"type"`
	TabID string `json:"tab_id"`
}

// CheckCalls checks the envelope of calls (not their inputs, which the
// model is told of in their results): an error names the field.
func CheckCalls(calls []Call) error {
	if len(calls) == 0 {
		return fmt.Errorf("no tool_use blocks: %w", errField("tool_use"))
	}
	if len(calls) > MaxCalls {
		return fmt.Errorf("%d tool_use blocks: at most %d: %w", len(calls), MaxCalls, errField("tool_use"))
	}
	ids := map[string]bool{}
	for i, c := range calls {
		at := func(f string) error { return errField(fmt.Sprintf("[%d].%s", i, f)) }
		switch {
		case c.Type != "tool_use":
			return fmt.Errorf("%q is not tool_use: %w", c.Type, at("type"))
		case c.ID == "" || len(c.ID) > 256:
			return fmt.Errorf("required, at most 256 characters: %w", at("id"))
		case ids[c.ID]:
			return fmt.Errorf("%q twice: %w", c.ID, at("id"))
		case c.ToolsetName != ToolsetName:
			return fmt.Errorf("%q is not %s: the calls of other tools are not run here: %w", c.ToolsetName, ToolsetName, at("toolset_name"))
		case c.Name == "":
			return fmt.Errorf("required: %w", at("name"))
		}
		ids[c.ID] = true
	}
	return nil
}

// FieldError is an envelope's field that is wrong.
type FieldError struct{ Field string }

func (e *FieldError) Error() string { return "field " + e.Field }

func errField(f string) error { return &FieldError{Field: f} }

// Executor runs calls against browsers. It keeps, per browser (the key
// its caller gives, a sandbox's name), the references each tab handed out
// and the tabs last reported.
type Executor struct {
	mu       sync.Mutex // guards browsers
	browsers map[string]*browser
}

// NewExecutor returns an Executor with no browser known.
func NewExecutor() *Executor { return &Executor{browsers: map[string]*browser{}} }

// Forget drops what the executor keeps of browser key (its sandbox was
// reset, released or deleted).
func (x *Executor) Forget(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.browsers, key)
}

// browser is what an Executor keeps of one browser.
type browser struct {
	mu       sync.Mutex // one request at a time
	ep       *cdp.Endpoint
	refs     map[string]*refTable // by tab id
	reported []TabEntry           // the tabs of the last browser_state sent
}

func (x *Executor) browser(key string) *browser {
	x.mu.Lock()
	defer x.mu.Unlock()
	b := x.browsers[key]
	if b == nil {
		if len(x.browsers) >= maxBrowsers {
			for k := range x.browsers {
				delete(x.browsers, k) // one of those known longest, or any
				break
			}
		}
		b = &browser{refs: map[string]*refTable{}}
		x.browsers[key] = b
	}
	return b
}

// maxBrowsers bounds the browsers an Executor keeps references of.
const maxBrowsers = 4096

// settleGrace is how long an input (a click, a key) waits, after the
// page handled it, for a navigation it started to begin: one that begins
// is waited for until its page has loaded.
const settleGrace = 250 * time.Millisecond

// callWait bounds one call: a page that does not load, a DevTools that
// does not answer.
const callWait = time.Minute

// Run runs calls in order on the browser of ep (known as key), within
// ctx, and returns one result a call: at the first that fails, the rest
// are not run.
func (x *Executor) Run(ctx context.Context, key string, ep *cdp.Endpoint, calls []Call) []Result {
	b := x.browser(key)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ep = ep
	out := make([]Result, 0, len(calls))
	failed := false
	for _, c := range calls {
		r := Result{Type: "tool_result", ToolUseID: c.ID, ToolsetName: ToolsetName}
		if failed {
			r.IsError, r.Content = true, []any{text(notExecuted)}
			out = append(out, r)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, callWait)
		content, err := b.run(cctx, c)
		cancel()
		if err != nil {
			failed = true
			r.IsError, r.Content = true, []any{text("Error: " + err.Error())}
		} else {
			r.Content = content
		}
		out = append(out, r)
	}
	return out
}

func text(s string) TextBlock { return TextBlock{Type: "text", Text: s} }

// run runs one call: its content blocks, or the error the model reads.
func (b *browser) run(ctx context.Context, c Call) ([]any, error) {
	if slices.Contains(Optional, c.Name) {
		return nil, fmt.Errorf("%s is not enabled in this environment", c.Name)
	}
	if !slices.Contains(Members, c.Name) {
		return nil, fmt.Errorf("%s is not a member of the browser toolset", c.Name)
	}
	in := input{}
	if len(c.Input) > 0 && string(c.Input) != "null" {
		if err := json.Unmarshal(c.Input, &in.raw); err != nil {
			return nil, fmt.Errorf("input: not a JSON object: %v", err)
		}
	}
	switch c.Name {
	case "new_tab", "list_tabs", "switch_tab", "close_tab":
		return b.tabs(ctx, c.Name, in)
	}
	tab, err := b.tab(ctx, in)
	if err != nil {
		return nil, err
	}
	conn, err := b.ep.Attach(ctx, tab)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	p := cdp.NewPage(conn)
	content, err := b.member(ctx, c.Name, in, tab, p)
	if err != nil {
		return nil, err
	}
	if c.Name != "screenshot" && c.Name != "zoom" {
		if st, changed := b.state(ctx, nil); changed {
			content = append(content, st)
		}
	}
	return content, nil
}

// tab is the tab a call names (tab_id), or the active one.
func (b *browser) tab(ctx context.Context, in input) (string, error) {
	id, err := in.str("tab_id", false, 256)
	if err != nil {
		return "", err
	}
	if id == "" {
		cur, err := b.ep.Current(ctx)
		if err != nil {
			return "", err
		}
		return cur.ID, nil
	}
	pages, err := b.ep.Pages(ctx)
	if err != nil {
		return "", err
	}
	for _, p := range pages {
		if p.ID == id {
			return id, nil
		}
	}
	return "", fmt.Errorf("tab_id: there is no tab %s (list_tabs lists them)", id)
}

// member runs the member name on page p of tab.
func (b *browser) member(ctx context.Context, name string, in input, tab string, p *cdp.Page) ([]any, error) {
	switch name {
	case "navigate":
		return b.navigate(ctx, in, tab, p)
	case "screenshot":
		png, err := screenshot(ctx, p, nil)
		if err != nil {
			return nil, err
		}
		return []any{image(png)}, nil
	case "zoom":
		return zoom(ctx, in, p)
	case "left_click", "right_click", "middle_click", "double_click", "triple_click":
		return b.click(ctx, name, in, tab, p)
	case "hover", "mouse_move":
		x, y, err := b.target(ctx, in, "target", tab, p, name == "hover")
		if err != nil {
			return nil, err
		}
		if err := mouse(ctx, p, "mouseMoved", x, y, "none", 0, 0); err != nil {
			return nil, err
		}
		if name == "hover" {
			return []any{text("Hovered.")}, nil
		}
		return []any{text("Moved the mouse.")}, nil
	case "left_mouse_down", "left_mouse_up":
		x, y, err := b.target(ctx, in, "target", tab, p, false)
		if err != nil {
			return nil, err
		}
		if name == "left_mouse_down" {
			return []any{text("Mouse button pressed.")}, p.Settling(ctx, settleGrace, func() error {
				if err := mouse(ctx, p, "mouseMoved", x, y, "none", 0, 0); err != nil {
					return err
				}
				return mouse(ctx, p, "mousePressed", x, y, "left", 1, 0)
			})
		}
		return []any{text("Mouse button released.")}, p.Settling(ctx, settleGrace, func() error {
			if err := mouse(ctx, p, "mouseMoved", x, y, "left", 0, 0); err != nil {
				return err
			}
			return mouse(ctx, p, "mouseReleased", x, y, "left", 1, 0)
		})
	case "left_click_drag":
		return b.drag(ctx, in, tab, p)
	case "scroll":
		return b.scroll(ctx, in, tab, p)
	case "scroll_to":
		id, ref, err := b.ref(ctx, in, "target", tab, p)
		if err != nil {
			return nil, err
		}
		if _, _, err := p.NodeCentre(ctx, id, ref); err != nil {
			return nil, err
		}
		return []any{text("Scrolled to " + ref + ".")}, nil
	case "type":
		s, err := in.str("text", true, MaxText)
		if err != nil {
			return nil, err
		}
		if err := p.Conn().Call(ctx, "Input.insertText", map[string]any{"text": s}, nil); err != nil {
			return nil, err
		}
		return []any{text("Typed.")}, nil
	case "key":
		return keyMember(ctx, in, p)
	case "hold_key":
		return holdKey(ctx, in, p)
	case "wait":
		d, err := in.seconds("duration")
		if err != nil {
			return nil, err
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []any{text(fmt.Sprintf("Waited %gs.", d.Seconds()))}, nil
	case "read_page":
		return b.readPage(ctx, in, tab, p)
	case "find":
		return b.find(ctx, in, tab, p)
	case "get_page_text":
		var s string
		if err := p.Eval(ctx, pageTextJS, &s); err != nil {
			return nil, err
		}
		return []any{text(cut(s, MaxPageText))}, nil
	case "form_input":
		return b.formInput(ctx, in, tab, p)
	}
	return nil, fmt.Errorf("%s is not served here", name)
}

// navigate opens a URL in tab, or goes back, forward or reloads.
func (b *browser) navigate(ctx context.Context, in input, tab string, p *cdp.Page) ([]any, error) {
	u, err := in.str("url", true, MaxText)
	if err != nil {
		return nil, err
	}
	var info cdp.Info
	switch u {
	case "back":
		info, err = p.Back(ctx)
	case "forward":
		err = p.Settling(ctx, settleGrace, func() error { return p.Eval(ctx, "history.forward()", nil) })
		if err == nil {
			info, err = p.Info(ctx)
		}
	case "reload":
		err = p.Settling(ctx, settleGrace, func() error { return p.Conn().Call(ctx, "Page.reload", nil, nil) })
		if err == nil {
			info, err = p.Info(ctx)
		}
	default:
		if u, err = webURL(u); err != nil {
			return nil, err
		}
		info, err = p.Navigate(ctx, u)
	}
	if err != nil {
		return nil, err
	}
	b.dropRefs(tab)
	msg := "Navigated to " + info.URL
	if info.Title != "" {
		msg += " — " + info.Title
	}
	if info.Loading {
		msg += " (still loading)"
	}
	return []any{text(msg)}, nil
}

// webURL is u as an http(s) URL: one without a scheme is https.
func webURL(u string) (string, error) {
	if m := schemePattern.FindStringSubmatch(u); m != nil {
		switch strings.ToLower(m[1]) {
		case "http", "https":
		default:
			return "", errors.New("Navigation refused. Only http and https URLs are allowed.")
		}
	} else {
		u = "https://" + u
	}
	p, err := url.Parse(u)
	if err != nil || p.Host == "" || strings.ContainsAny(u, " \t\r\n") {
		return "", fmt.Errorf("url: %q is not a URL", u)
	}
	return u, nil
}

// schemePattern finds a URL's scheme; a host and port (localhost:8080)
// is none.
var schemePattern = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*):(?:[^0-9]|$)`)

func image(png []byte) ImageBlock {
	return ImageBlock{Type: "image", Source: ImageSource{Type: "base64", MediaType: "image/png", Data: base64.StdEncoding.EncodeToString(png)}}
}

// screenshot is the viewport (or clip of it) as PNG.
func screenshot(ctx context.Context, p *cdp.Page, clip map[string]any) ([]byte, error) {
	params := map[string]any{"format": "png"}
	if clip != nil {
		params["clip"] = clip
	}
	var r struct {
		Data string `json:"data"`
	}
	if err := p.Conn().Call(ctx, "Page.captureScreenshot", params, &r); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(r.Data)
}

// zoom is region of the viewport, scaled up to about the viewport's width
// (at most four times).
func zoom(ctx context.Context, in input, p *cdp.Page) ([]any, error) {
	r, err := in.ints("region", 4)
	if err != nil {
		return nil, err
	}
	w, h, err := viewport(ctx, p)
	if err != nil {
		return nil, err
	}
	x0, y0, x1, y1 := r[0], r[1], r[2], r[3]
	if x0 < 0 || y0 < 0 || x1 > w || y1 > h || x0 >= x1 || y0 >= y1 {
		return nil, fmt.Errorf("region: [%d, %d, %d, %d] is not a box within the %dx%d viewport ([x0, y0, x1, y1], x0 < x1, y0 < y1)", x0, y0, x1, y1, w, h)
	}
	scale := min(float64(w)/float64(x1-x0), float64(h)/float64(y1-y0), 4)
	png, err := screenshot(ctx, p, map[string]any{"x": x0, "y": y0, "width": x1 - x0, "height": y1 - y0, "scale": max(scale, 1)})
	if err != nil {
		return nil, err
	}
	return []any{image(png)}, nil
}

// viewport is the page's viewport in CSS pixels.
func viewport(ctx context.Context, p *cdp.Page) (int, int, error) {
	var v [2]int
	if err := p.Eval(ctx, "[innerWidth, innerHeight]", &v); err != nil {
		return 0, 0, err
	}
	return v[0], v[1], nil
}

// mouse dispatches one mouse event at x, y.
func mouse(ctx context.Context, p *cdp.Page, typ string, x, y float64, button string, clicks, modifiers int) error {
	ev := map[string]any{"type": typ, "x": x, "y": y, "modifiers": modifiers}
	if button != "none" {
		ev["button"], ev["clickCount"] = button, clicks
		if typ == "mousePressed" || (typ == "mouseMoved" && button == "left") {
			ev["buttons"] = map[string]int{"left": 1, "right": 2, "middle": 4}[button]
		}
	}
	return p.Conn().Call(ctx, "Input.dispatchMouseEvent", ev, nil)
}

func (b *browser) click(ctx context.Context, name string, in input, tab string, p *cdp.Page) ([]any, error) {
	mods, err := in.modifiers()
	if err != nil {
		return nil, err
	}
	x, y, err := b.target(ctx, in, "target", tab, p, true)
	if err != nil {
		return nil, err
	}
	button, clicks, ack := "left", 1, "Clicked."
	switch name {
	case "right_click":
		button, ack = "right", "Right-clicked."
	case "middle_click":
		button, ack = "middle", "Middle-clicked."
	case "double_click":
		clicks, ack = 2, "Double-clicked."
	case "triple_click":
		clicks, ack = 3, "Triple-clicked."
	}
	err = p.Settling(ctx, settleGrace, func() error {
		if err := mouse(ctx, p, "mouseMoved", x, y, "none", 0, mods); err != nil {
			return err
		}
		for n := 1; n <= clicks; n++ {
			if err := mouse(ctx, p, "mousePressed", x, y, button, n, mods); err != nil {
				return err
			}
			if err := mouse(ctx, p, "mouseReleased", x, y, button, n, mods); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return []any{text(ack)}, nil
}

func (b *browser) drag(ctx context.Context, in input, tab string, p *cdp.Page) ([]any, error) {
	x0, y0, err := b.target(ctx, in, "from", tab, p, false)
	if err != nil {
		return nil, err
	}
	x1, y1, err := b.target(ctx, in, "target", tab, p, false)
	if err != nil {
		return nil, err
	}
	err = p.Settling(ctx, settleGrace, func() error {
		if err := mouse(ctx, p, "mouseMoved", x0, y0, "none", 0, 0); err != nil {
			return err
		}
		if err := mouse(ctx, p, "mousePressed", x0, y0, "left", 1, 0); err != nil {
			return err
		}
		const steps = 10
		for i := 1; i <= steps; i++ {
			x, y := x0+(x1-x0)*float64(i)/steps, y0+(y1-y0)*float64(i)/steps
			if err := mouse(ctx, p, "mouseMoved", x, y, "left", 0, 0); err != nil {
				return err
			}
		}
		return mouse(ctx, p, "mouseReleased", x1, y1, "left", 1, 0)
	})
	if err != nil {
		return nil, err
	}
	return []any{text("Dragged.")}, nil
}

// wheelNotch is how far one notch of scroll_amount scrolls, in CSS pixels.
const wheelNotch = 100

func (b *browser) scroll(ctx context.Context, in input, tab string, p *cdp.Page) ([]any, error) {
	x, y, err := b.target(ctx, in, "target", tab, p, false)
	if err != nil {
		return nil, err
	}
	dir, err := in.str("scroll_direction", true, 16)
	if err != nil {
		return nil, err
	}
	n, err := in.intIn("scroll_amount", 3, 1, 10)
	if err != nil {
		return nil, err
	}
	dx, dy := 0, 0
	switch dir {
	case "up":
		dy = -n * wheelNotch
	case "down":
		dy = n * wheelNotch
	case "left":
		dx = -n * wheelNotch
	case "right":
		dx = n * wheelNotch
	default:
		return nil, fmt.Errorf("scroll_direction: %q is not one of up, down, left, right", dir)
	}
	if err := p.Conn().Call(ctx, "Input.dispatchMouseEvent", map[string]any{"type": "mouseWheel", "x": x, "y": y, "deltaX": dx, "deltaY": dy}, nil); err != nil {
		return nil, err
	}
	return []any{text("Scrolled " + dir + ".")}, nil
}

// pageTextJS is the page's visible text, its main or article content
// first.
const pageTextJS = `(() => {
	const main = document.querySelector("main, article, [role=main]");
	const all = document.body ? document.body.innerText : "";
	if (!main) return all;
	const m = main.innerText;
	return m + (all.length > m.length ? "\n\n" + all.replace(m, "").trim() : "");
})()`

// cut cuts s at n characters, and says so.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		if s == "" {
			return "(empty)"
		}
		return s
	}
	return string(r[:n]) + fmt.Sprintf("\n… (cut at %d characters of %d)", n, len(r))
}

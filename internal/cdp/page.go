package cdp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Page is a CDP session with one page (a tab): what an agent's browser
// tools do to it. Its methods block until done or ctx ends; a page that
// keeps loading past ctx's deadline is not an error of Navigate or Back,
// which report it.
type Page struct {
	c *Conn
}

// NewPage drives the page of c.
func NewPage(c *Conn) *Page { return &Page{c: c} }

// Conn is the page's CDP session.
func (p *Page) Conn() *Conn { return p.c }

// Locator names an element of a page: by CSS selector, or by accessible
// name and role (either may be left out, not both) as the accessibility
// tree has them.
type Locator struct {
	Selector string
	Name     string
	Role     string
}

func (l Locator) String() string {
	switch {
	case l.Selector != "":
		return fmt.Sprintf("selector %q", l.Selector)
	case l.Role != "" && l.Name != "":
		return fmt.Sprintf("%s %q", l.Role, l.Name)
	case l.Role != "":
		return "a " + l.Role
	}
	return fmt.Sprintf("%q", l.Name)
}

// Info is which document a page shows.
type Info struct {
	URL     string `json:"url"`
	Title   string `json:"title"`
	Loading bool   `json:"loading,omitempty"`
}

// Errors of the element tools.
var (
	// ErrNoElement: nothing on the page matches the locator.
	ErrNoElement = errors.New("no such element on the page")
	// ErrBadSelector: the page's CSS engine does not take the selector.
	ErrBadSelector = errors.New("not a valid CSS selector")
	// ErrNotInteractable: the element is there but cannot take the
	// action now (no box, covered by another, not a text field).
	ErrNotInteractable = errors.New("the element cannot take the action")
	// ErrNoHistory: there is no page to go back to.
	ErrNoHistory = errors.New("there is no previous page in this tab's history")
)

// pollEvery is how often a wait for a document's load checks it besides
// waiting for the load event.
const pollEvery = 100 * time.Millisecond

// pollTimeout bounds one check of a document's load.
const pollTimeout = 2 * time.Second

// remoteObject is CDP's Runtime.RemoteObject, as much as is used here.
type remoteObject struct {
	Type        string          `json:"type"`
	Subtype     string          `json:"subtype,omitempty"`
	Value       json.RawMessage `json:"value,omitempty"`
	ObjectID    string          `json:"objectId,omitempty"`
	Description string          `json:"description,omitempty"`
}

type exceptionDetails struct {
	Text      string        `json:"text"`
	Exception *remoteObject `json:"exception,omitempty"`
}

func (e *exceptionDetails) err() error {
	msg := e.Text
	if e.Exception != nil && e.Exception.Description != "" {
		msg = e.Exception.Description
	}
	return fmt.Errorf("the page's script failed: %s", firstLine(msg))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// eval evaluates expr in the page's main world and decodes its value (by
// value) into out.
func (p *Page) eval(ctx context.Context, expr string, out any) error {
	var r struct {
		Result    remoteObject      `json:"result"`
		Exception *exceptionDetails `json:"exceptionDetails"`
	}
	if err := p.c.Call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r); err != nil {
		return err
	}
	if r.Exception != nil {
		return r.Exception.err()
	}
	if out == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// callOn calls the function fn with this the object objectID and args
// (passed as values, never pasted into fn's text), and decodes its value
// into out.
func (p *Page) callOn(ctx context.Context, objectID, fn string, out any, args ...any) error {
	as := make([]map[string]any, len(args))
	for i, a := range args {
		if o, ok := a.(objectArg); ok {
			as[i] = map[string]any{"objectId": string(o)}
		} else {
			as[i] = map[string]any{"value": a}
		}
	}
	var r struct {
		Result    remoteObject      `json:"result"`
		Exception *exceptionDetails `json:"exceptionDetails"`
	}
	if err := p.c.Call(ctx, "Runtime.callFunctionOn", map[string]any{"functionDeclaration": fn, "objectId": objectID,
		"arguments": as, "returnByValue": true}, &r); err != nil {
		return err
	}
	if r.Exception != nil {
		return r.Exception.err()
	}
	if out == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// objectArg passes a remote object to callOn.
type objectArg string

// Info says which document the page shows.
func (p *Page) Info(ctx context.Context) (Info, error) {
	var i struct {
		URL, Title, State string
	}
	if err := p.eval(ctx, `({URL: location.href, Title: document.title, State: document.readyState})`, &i); err != nil {
		return Info{}, err
	}
	return Info{URL: i.URL, Title: i.Title, Loading: i.State != "complete"}, nil
}

// Navigate opens url in the page and waits until its document has loaded
// (its load event), or ctx ends: then the Info it returns says Loading. A
// URL the browser cannot load (no such host, refused) is an error with
// the browser's reason.
func (p *Page) Navigate(ctx context.Context, url string) (Info, error) {
	if err := p.c.Call(ctx, "Page.enable", nil, nil); err != nil {
		return Info{}, err
	}
	load, stop := p.c.Subscribe("Page.loadEventFired")
	defer stop()
	var r struct {
		FrameID   string `json:"frameId"`
		LoaderID  string `json:"loaderId"`
		ErrorText string `json:"errorText"`
	}
	if err := p.c.Call(ctx, "Page.navigate", map[string]any{"url": url}, &r); err != nil {
		return Info{}, err
	}
	if r.ErrorText != "" {
		return Info{}, fmt.Errorf("the browser could not open %s: %s", url, r.ErrorText)
	}
	if r.LoaderID == "" {
		return p.waitLoaded(ctx, load, nil) // within the document: nothing to load
	}
	// The document that is complete must be the navigation's, not the one
	// before it: its loader, or one that fired a load event since.
	return p.waitLoaded(ctx, load, func(ctx context.Context, sawLoad bool) (bool, error) {
		if sawLoad {
			return true, nil
		}
		var ft struct {
			FrameTree struct {
				Frame struct {
					LoaderID string `json:"loaderId"`
				} `json:"frame"`
			} `json:"frameTree"`
		}
		if err := p.c.Call(ctx, "Page.getFrameTree", nil, &ft); err != nil {
			return false, err
		}
		return ft.FrameTree.Frame.LoaderID == r.LoaderID, nil
	})
}

// waitLoaded waits until the page's document is complete (a load event,
// or a check every pollEvery) and, when done is set, until done says so
// too (sawLoad: a load event came since the wait began). When ctx ends
// first it returns the Info with Loading set, and no error.
func (p *Page) waitLoaded(ctx context.Context, load <-chan Event, done func(ctx context.Context, sawLoad bool) (bool, error)) (Info, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	sawLoad := false
	for {
		// Each check has a time of its own: a command sent to a renderer
		// that a navigation swaps out may get no answer at all.
		pctx, cancel := context.WithTimeout(ctx, pollTimeout)
		i, err := p.Info(pctx)
		if err == nil && !i.Loading && done != nil {
			var ok bool
			if ok, err = done(pctx, sawLoad); err == nil && !ok {
				i.Loading = true
			}
		}
		cancel()
		switch {
		case ctx.Err() != nil:
			return p.infoAfter(ctx)
		case err == nil && !i.Loading:
			return i, nil
		case err != nil && !transient(err) && !errors.Is(err, context.DeadlineExceeded):
			return Info{}, err
		}
		select {
		case <-ctx.Done():
			return p.infoAfter(ctx)
		case <-p.c.Done():
			return Info{}, p.c.Err()
		case <-load:
			sawLoad = true
		case <-tick.C:
		}
	}
}

// infoAfter is the page's Info once ctx has ended (still loading), read
// within a short time of its own.
func (p *Page) infoAfter(ctx context.Context) (Info, error) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	i, err := p.Info(ictx)
	if err != nil {
		return Info{Loading: true}, nil
	}
	i.Loading = true
	return i, nil
}

// transient reports whether err is a page between two documents, which
// answers again a moment later.
func transient(err error) bool {
	var ce *Error
	if errors.As(err, &ce) {
		return strings.Contains(ce.Message, "context") || strings.Contains(ce.Message, "navigat")
	}
	return strings.Contains(err.Error(), "context was destroyed")
}

// history is Page.getNavigationHistory's answer.
type history struct {
	CurrentIndex int `json:"currentIndex"`
	Entries      []struct {
		ID    int    `json:"id"`
		URL   string `json:"url"`
		Title string `json:"title"`
	} `json:"entries"`
}

// Back goes one entry back in the page's history and waits for that
// document as Navigate does. With no entry before the current one it is
// ErrNoHistory.
func (p *Page) Back(ctx context.Context) (Info, error) {
	if err := p.c.Call(ctx, "Page.enable", nil, nil); err != nil {
		return Info{}, err
	}
	var h history
	if err := p.c.Call(ctx, "Page.getNavigationHistory", nil, &h); err != nil {
		return Info{}, err
	}
	if h.CurrentIndex <= 0 || h.CurrentIndex >= len(h.Entries)+1 {
		return Info{}, ErrNoHistory
	}
	want := h.CurrentIndex - 1
	load, stop := p.c.Subscribe("Page.loadEventFired")
	defer stop()
	if err := p.c.Call(ctx, "Page.navigateToHistoryEntry", map[string]any{"entryId": h.Entries[want].ID}, nil); err != nil {
		return Info{}, err
	}
	// A page restored from the back/forward cache fires no load event:
	// the history's index says the step is done.
	return p.waitLoaded(ctx, load, func(ctx context.Context, _ bool) (bool, error) {
		var now history
		if err := p.c.Call(ctx, "Page.getNavigationHistory", nil, &now); err != nil {
			return false, err
		}
		return now.CurrentIndex == want, nil
	})
}

// element is an element found by a Locator.
type element struct {
	backendID int
	objectID  string
	desc      string // how messages name it
}

// find resolves l to one element of the page: the first in document order
// that the selector matches, or the first node of the accessibility tree
// with that name and role (exactly; failing that, the name compared
// without case and spaces at either end).
func (p *Page) find(ctx context.Context, l Locator) (element, error) {
	var doc struct {
		Root struct {
			NodeID        int `json:"nodeId"`
			BackendNodeID int `json:"backendNodeId"`
		} `json:"root"`
	}
	if err := p.c.Call(ctx, "DOM.getDocument", map[string]any{"depth": 0}, &doc); err != nil {
		return element{}, err
	}
	var e element
	if l.Selector != "" {
		var q struct {
			NodeID int `json:"nodeId"`
		}
		err := p.c.Call(ctx, "DOM.querySelector", map[string]any{"nodeId": doc.Root.NodeID, "selector": l.Selector}, &q)
		var ce *Error
		if errors.As(err, &ce) && strings.Contains(ce.Message, "query") {
			return element{}, fmt.Errorf("%w: %q", ErrBadSelector, l.Selector)
		}
		if err != nil {
			return element{}, err
		}
		if q.NodeID == 0 {
			return element{}, fmt.Errorf("%w: nothing matches %s", ErrNoElement, l)
		}
		var d struct {
			Node struct {
				BackendNodeID int `json:"backendNodeId"`
			} `json:"node"`
		}
		if err := p.c.Call(ctx, "DOM.describeNode", map[string]any{"nodeId": q.NodeID}, &d); err != nil {
			return element{}, err
		}
		e = element{backendID: d.Node.BackendNodeID, desc: l.String()}
	} else {
		n, err := p.findByName(ctx, doc.Root.BackendNodeID, l)
		if err != nil {
			return element{}, err
		}
		e = element{backendID: n.BackendDOMNodeID, desc: fmt.Sprintf("%s %q", n.Role.String(), n.Name.String())}
	}
	var res struct {
		Object remoteObject `json:"object"`
	}
	if err := p.c.Call(ctx, "DOM.resolveNode", map[string]any{"backendNodeId": e.backendID}, &res); err != nil {
		return element{}, err
	}
	e.objectID = res.Object.ObjectID
	// A text node found by name acts through its element.
	var isElem bool
	if err := p.callOn(ctx, e.objectID, `function() { return this.nodeType === 1 }`, &isElem); err != nil {
		return element{}, err
	}
	if !isElem {
		var parent struct {
			Result remoteObject `json:"result"`
		}
		if err := p.c.Call(ctx, "Runtime.callFunctionOn", map[string]any{"functionDeclaration": `function() { return this.parentElement }`,
			"objectId": e.objectID}, &parent); err != nil {
			return element{}, err
		}
		if parent.Result.ObjectID == "" {
			return element{}, fmt.Errorf("%w: %s is not inside an element", ErrNotInteractable, e.desc)
		}
		e.objectID = parent.Result.ObjectID
	}
	return e, nil
}

// findByName finds the first node of the accessibility tree under root
// with l's name and role.
func (p *Page) findByName(ctx context.Context, root int, l Locator) (AXNode, error) {
	q := map[string]any{"backendNodeId": root}
	if l.Name != "" {
		q["accessibleName"] = l.Name
	}
	if l.Role != "" {
		q["role"] = l.Role
	}
	var r struct {
		Nodes []AXNode `json:"nodes"`
	}
	if err := p.c.Call(ctx, "Accessibility.queryAXTree", q, &r); err != nil {
		return AXNode{}, err
	}
	if n, ok := pick(r.Nodes, l, false); ok {
		return n, nil
	}
	if l.Name == "" {
		return AXNode{}, fmt.Errorf("%w: nothing on the page has role %s", ErrNoElement, l.Role)
	}
	// Models do not always copy a name exactly.
	var all struct {
		Nodes []AXNode `json:"nodes"`
	}
	if err := p.c.Call(ctx, "Accessibility.getFullAXTree", nil, &all); err != nil {
		return AXNode{}, err
	}
	if n, ok := pick(all.Nodes, l, true); ok {
		return n, nil
	}
	return AXNode{}, fmt.Errorf("%w: nothing is named %s (browser_snapshot shows the names)", ErrNoElement, l)
}

// pick returns the first of nodes that l names and that has a DOM node,
// an element rather than a text in it when both match. loose compares
// names without case and outer spaces, and roles without case.
func pick(nodes []AXNode, l Locator, loose bool) (AXNode, bool) {
	var text *AXNode
	for i := range nodes {
		n := &nodes[i]
		if n.Ignored || n.BackendDOMNodeID == 0 {
			continue
		}
		if loose {
			if l.Role != "" && !strings.EqualFold(n.Role.String(), l.Role) {
				continue
			}
			if !strings.EqualFold(strings.TrimSpace(n.Name.String()), strings.TrimSpace(l.Name)) {
				continue
			}
		}
		switch n.Role.String() {
		case "StaticText", "InlineTextBox":
			if text == nil {
				text = n
			}
			continue
		}
		return *n, true
	}
	if text != nil {
		return *text, true
	}
	return AXNode{}, false
}

// describeJS names an element in a message: tag, id and some of its text.
const describeJS = `function describe(e) {
	if (!e) return "nothing";
	let s = "<" + (e.localName || e.nodeName);
	if (e.id) s += " id=" + e.id;
	if (typeof e.className === "string" && e.className) s += " class=" + e.className.slice(0, 40);
	s += ">";
	const t = (e.innerText || "").trim().replace(/\s+/g, " ").slice(0, 40);
	if (t) s += " " + JSON.stringify(t);
	return s;
}`

// hitJS returns "" when the point x, y hits this element (or something in
// it), else what it hits.
const hitJS = `function(x, y) {
	` + describeJS + `
	let h = document.elementFromPoint(x, y);
	while (h && h.shadowRoot) {
		const i = h.shadowRoot.elementFromPoint(x, y);
		if (!i || i === h) break;
		h = i;
	}
	for (let n = h; n; n = n.parentNode || n.host) if (n === this) return "";
	return describe(h);
}`

// Click clicks the element l finds, as a person would: scrolled into
// view, a press and release of the left button at the centre of its box,
// through the browser's input pipeline (Input.dispatchMouseEvent). So the
// page gets trusted events in the order a person's click makes them
// (pointerdown, mousedown, focus, pointerup, mouseup, click), with the
// user activation that popups and clipboard access need; element.click()
// would skip all but the click, and pages that check isTrusted refuse it.
// When another element covers that point (a dialog, a cookie banner) the
// click is not made: ErrNotInteractable names what covers it. A
// navigation the click starts is waited for as Navigate waits for one.
// It returns how it names the element.
func (p *Page) Click(ctx context.Context, l Locator) (string, error) {
	e, err := p.find(ctx, l)
	if err != nil {
		return "", err
	}
	x, y, err := p.centre(ctx, e)
	if err != nil {
		return "", err
	}
	var hit string
	if err := p.callOn(ctx, e.objectID, hitJS, &hit, x, y); err != nil {
		return "", err
	}
	if hit != "" {
		return "", fmt.Errorf("%w: %s is covered by %s at (%.0f, %.0f)", ErrNotInteractable, e.desc, hit, x, y)
	}
	started, stop := p.navigations(ctx)
	defer stop()
	for _, ev := range []map[string]any{
		{"type": "mouseMoved", "x": x, "y": y},
		{"type": "mousePressed", "x": x, "y": y, "button": "left", "buttons": 1, "clickCount": 1},
		{"type": "mouseReleased", "x": x, "y": y, "button": "left", "buttons": 0, "clickCount": 1},
	} {
		if err := p.c.Call(ctx, "Input.dispatchMouseEvent", ev, nil); err != nil {
			return "", err
		}
	}
	return e.desc, p.settle(ctx, started)
}

// navigationGrace is how long an action waits for a navigation it may
// have started (a link, a form's submission) to begin.
const navigationGrace = time.Second

// navigations subscribes to the main frame's navigations from now on.
func (p *Page) navigations(ctx context.Context) (<-chan Event, func()) {
	if err := p.c.Call(ctx, "Page.enable", nil, nil); err != nil {
		return nil, func() {}
	}
	return p.c.Subscribe("Page.frameStartedLoading")
}

// settle waits for a navigation that an action started: if one begins
// within navigationGrace, until its document has loaded or ctx ends.
func (p *Page) settle(ctx context.Context, started <-chan Event) error {
	return p.settleWithin(ctx, started, navigationGrace)
}

// settleWithin is settle with grace for the navigation to begin.
func (p *Page) settleWithin(ctx context.Context, started <-chan Event, grace time.Duration) error {
	if started == nil {
		return nil
	}
	load, stop := p.c.Subscribe("Page.loadEventFired")
	defer stop()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-started:
	case <-t.C:
	case <-ctx.Done():
		return nil
	}
	// Also when no start was seen: a navigation under way (its event
	// missed, or late) shows as a document not complete, or none for a
	// moment, which this waits out.
	_, err := p.waitLoaded(ctx, load, nil)
	return err
}

// centre scrolls e into view and returns the centre of its first box, in
// the page's CSS pixels.
func (p *Page) centre(ctx context.Context, e element) (float64, float64, error) {
	// An element in view already stays put; scrolling fails for one
	// without a layout, which the box below reports.
	p.c.Call(ctx, "DOM.scrollIntoViewIfNeeded", map[string]any{"backendNodeId": e.backendID}, nil)
	var q struct {
		Quads [][]float64 `json:"quads"`
	}
	if err := p.c.Call(ctx, "DOM.getContentQuads", map[string]any{"backendNodeId": e.backendID}, &q); err != nil {
		var ce *Error
		if errors.As(err, &ce) {
			return 0, 0, fmt.Errorf("%w: %s has no box on the page (hidden?)", ErrNotInteractable, e.desc)
		}
		return 0, 0, err
	}
	for _, quad := range q.Quads {
		if len(quad) != 8 || quadArea(quad) < 1 {
			continue
		}
		return (quad[0] + quad[2] + quad[4] + quad[6]) / 4, (quad[1] + quad[3] + quad[5] + quad[7]) / 4, nil
	}
	return 0, 0, fmt.Errorf("%w: %s has no visible box on the page", ErrNotInteractable, e.desc)
}

// quadArea is the area of a quadrilateral (shoelace formula).
func quadArea(q []float64) float64 {
	a := 0.0
	for i := 0; i < 4; i++ {
		j := (i + 1) % 4
		a += q[2*i]*q[2*j+1] - q[2*j]*q[2*i+1]
	}
	if a < 0 {
		a = -a
	}
	return a / 2
}

// focusJS focuses this text field and selects its content, or says why it
// is not one.
const focusJS = `function() {
	const e = this;
	if (e.disabled) return "it is disabled";
	if (e.readOnly) return "it is read-only";
	if (e instanceof HTMLInputElement) {
		if (!["text", "search", "url", "tel", "email", "password", "number"].includes(e.type)) return "it is an input of type " + e.type + ", not a text field";
	} else if (!(e instanceof HTMLTextAreaElement) && !e.isContentEditable) {
		return "it is not a text field (an input, a textarea or an editable element)";
	}
	e.focus();
	if (document.activeElement !== e && !e.contains(document.activeElement)) return "it does not take the focus";
	if (typeof e.select === "function") {
		e.select();
	} else {
		const r = document.createRange();
		r.selectNodeContents(e);
		const s = window.getSelection();
		s.removeAllRanges();
		s.addRange(r);
	}
	return "";
}`

// valueJS is what a text field holds now; a password's length only.
const valueJS = `function() {
	if (this instanceof HTMLInputElement && this.type === "password") return "•".repeat(this.value.length);
	return this.isContentEditable ? this.innerText : this.value;
}`

// Type replaces the content of the text field l finds (an input, a
// textarea or an editable element) with text, and with submit presses
// Enter in it afterwards (which submits a form) and waits for a navigation
// that starts. The text goes in as one insertion (Input.insertText, as an
// input method commits text): the page gets trusted beforeinput and input
// events, whatever the text's characters and the guest's keyboard layout,
// which key events per character would depend on. It returns how it names
// the field and what the field holds afterwards (a password's length only).
func (p *Page) Type(ctx context.Context, l Locator, text string, submit bool) (string, string, error) {
	e, err := p.find(ctx, l)
	if err != nil {
		return "", "", err
	}
	p.c.Call(ctx, "DOM.scrollIntoViewIfNeeded", map[string]any{"backendNodeId": e.backendID}, nil)
	var why string
	if err := p.callOn(ctx, e.objectID, focusJS, &why); err != nil {
		return "", "", err
	}
	if why != "" {
		return "", "", fmt.Errorf("%w: cannot type into %s: %s", ErrNotInteractable, e.desc, why)
	}
	if text != "" {
		if err := p.c.Call(ctx, "Input.insertText", map[string]any{"text": text}, nil); err != nil {
			return "", "", err
		}
	} else if err := p.key(ctx, "Backspace", 8, ""); err != nil { // deletes the selection: an empty field
		return "", "", err
	}
	var value string
	if err := p.callOn(ctx, e.objectID, valueJS, &value); err != nil {
		return "", "", err
	}
	if !submit {
		return e.desc, value, nil
	}
	started, stop := p.navigations(ctx)
	defer stop()
	if err := p.key(ctx, "Enter", 13, "\r"); err != nil {
		return "", "", err
	}
	return e.desc, value, p.settle(ctx, started)
}

// key presses and releases one key in the focused element.
func (p *Page) key(ctx context.Context, key string, code int, text string) error {
	down := map[string]any{"type": "rawKeyDown", "key": key, "code": key, "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code}
	if text != "" {
		down["type"], down["text"], down["unmodifiedText"] = "keyDown", text, text
	}
	if err := p.c.Call(ctx, "Input.dispatchKeyEvent", down, nil); err != nil {
		return err
	}
	return p.c.Call(ctx, "Input.dispatchKeyEvent", map[string]any{"type": "keyUp", "key": key, "code": key,
		"windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code}, nil)
}

// Snapshot returns the page's accessibility tree as text (FormatAXTree),
// at most max bytes.
func (p *Page) Snapshot(ctx context.Context, max int) (string, error) {
	var r struct {
		Nodes []AXNode `json:"nodes"`
	}
	if err := p.c.Call(ctx, "Accessibility.getFullAXTree", nil, &r); err != nil {
		return "", err
	}
	return FormatAXTree(r.Nodes, max), nil
}

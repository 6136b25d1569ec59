package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/cdp"
)

// The browser tools drive the Chromium of a sandbox's guest over CDP:
// what an agent does to a web page by its structure (a selector, an
// accessible name) rather than by pixels. They act on the tab in front
// (the one used last), which browser_tabs lists and changes.

// Browsers is the optional ability of a Desktops to reach the DevTools of
// the browser inside a sandbox's guest; without it the browser tools
// answer that they are not served here.
type Browsers interface {
	// Browser returns the DevTools endpoint of sandbox's browser. A
	// sandbox whose guest offers none (status.automation.cdp), or without
	// a network to reach it over, is an error wrapping
	// api.ErrUnsupported; the endpoint's own requests fail with
	// cdp.ErrUnreachable when nothing listens there.
	Browser(ctx context.Context, sandbox string) (*cdp.Endpoint, error)
}

// NoBrowser is the error of Browser for sandbox sb, whose guest offers no
// DevTools endpoint; nil when it offers one.
func NoBrowser(sb *api.Sandbox) error {
	if au := sb.Status.Automation; au != nil && au.CDP != 0 {
		return nil
	}
	return fmt.Errorf("sandbox %s (template %s) has no browser for the browser tools: its guest offers no Chrome DevTools endpoint (status.automation.cdp); use a sandbox of the browser-desktop image: %w",
		sb.Metadata.Name, sb.Status.Template, api.ErrUnsupported)
}

// Bounds of the browser tools.
const (
	DefaultBrowserWait = 30 * time.Second  // for the page to load, an element to take an action
	MaxBrowserWait     = 120 * time.Second // timeout_seconds
	MaxURL             = 8192
	MaxLocator         = 1024 // bytes of a selector or a name
	DefaultSnapshot    = 32 << 10
	MaxSnapshot        = 256 << 10
	// maxTabs bounds the tabs browser_tabs lists.
	maxTabs = 100
)

type locatorArgs struct {
	Selector string `json:"selector,omitempty" jsonschema:"A CSS selector of the element (the first match): #email, button[type=submit], form .next."`
	Name     string `json:"name,omitempty" jsonschema:"The element's accessible name, as browser_snapshot shows it in quotes (its label or text): Sign in. Used when selector is left out."`
	Role     string `json:"role,omitempty" jsonschema:"The element's role as browser_snapshot shows it (button, link, textbox, checkbox, …), to tell apart elements of the same name; with name, or alone for the first of that role."`
}

type navigateArgs struct {
	sandboxArg
	URL            string `json:"url" jsonschema:"The address to open: http, https, file or about."`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"How long to wait for the page to load (default 30, at most 120). A page still loading then is reported, not an error."`
}

// browserWaitArgs is the wait of a browser tool that may start a navigation.
type browserWaitArgs struct {
	TimeoutSeconds int `json:"timeout_seconds,omitempty" jsonschema:"How long to wait, for the element and for a page the action opens to load (default 30, at most 120). A page still loading then is reported, not an error."`
}

type clickElementArgs struct {
	sandboxArg
	locatorArgs
	browserWaitArgs
}

type typeElementArgs struct {
	sandboxArg
	locatorArgs
	Text   string `json:"text" jsonschema:"The text to put in the field; it replaces what the field holds (empty: clear it). At most 4096 characters."`
	Submit bool   `json:"submit,omitempty" jsonschema:"Press Enter in the field afterwards (submits its form)."`
	browserWaitArgs
}

type snapshotArgs struct {
	sandboxArg
	MaxBytes int `json:"max_bytes,omitempty" jsonschema:"Cut the snapshot at this many bytes (default 32768, at most 262144)."`
}

type backArgs struct {
	sandboxArg
	browserWaitArgs
}

type tabsArgs struct {
	sandboxArg
	Action string `json:"action,omitempty" jsonschema:"list (the default), select (bring tab to the front: the other browser tools act on it), new (open a tab, on url if given) or close (close tab)."`
	Tab    string `json:"tab,omitempty" jsonschema:"The tab's id, as list gives it: for select and close."`
	URL    string `json:"url,omitempty" jsonschema:"For new: the address to open in the new tab."`
}

// PageOut is the page a browser tool left the tab on.
type PageOut struct {
	URL     string `json:"url"`
	Title   string `json:"title"`
	Loading bool   `json:"loading,omitempty" jsonschema:"The page was still loading when the tool stopped waiting."`
}

// Tab is a tab as browser_tabs lists it.
type Tab struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	URL     string `json:"url"`
	Current bool   `json:"current,omitempty" jsonschema:"The tab in front, which the other browser tools act on."`
}

type tabsOut struct {
	Tabs []Tab `json:"tabs"`
}

func (t *tools) registerBrowserTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "browser_navigate", Description: "Open a URL in the sandbox's browser (the tab in front) and wait until the page has loaded.",
		InputSchema: schemaFor[navigateArgs]()}, toolErrors(t.browserNavigate))
	mcp.AddTool(s, &mcp.Tool{Name: "browser_click", Description: "Click an element of the web page in the sandbox's browser, found by CSS selector or by accessible name and role " +
		"(browser_snapshot shows them): a real mouse click at the element's centre, scrolled into view. Refused when something else covers the element.",
		InputSchema: schemaFor[clickElementArgs]()}, toolErrors(t.browserClick))
	mcp.AddTool(s, &mcp.Tool{Name: "browser_type", Description: "Put text into a text field of the web page (an input, a textarea or an editable element), found by CSS selector or by accessible name and role; " +
		"it replaces the field's content. With submit, press Enter afterwards.",
		InputSchema: schemaFor[typeElementArgs]()}, toolErrors(t.browserType))
	mcp.AddTool(s, &mcp.Tool{Name: "browser_snapshot", Description: "The web page in the sandbox's browser as its accessibility tree: one element a line, indented, " +
		"as role \"name\" [state]: value. Names and roles are what browser_click and browser_type take.",
		InputSchema: schemaFor[snapshotArgs](), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, toolErrors(t.browserSnapshot))
	mcp.AddTool(s, &mcp.Tool{Name: "browser_back", Description: "Go back to the previous page in the tab's history and wait until it has loaded.",
		InputSchema: schemaFor[backArgs]()}, toolErrors(t.browserBack))
	mcp.AddTool(s, &mcp.Tool{Name: "browser_tabs", Description: "List the browser's tabs (the one in front first); or select, open (new) or close one.",
		InputSchema: schemaFor[tabsArgs]()}, toolErrors(t.browserTabs))
}

// endpoint resolves the sandbox of a browser tool call (browser tools
// need what input needs) and its browser's DevTools endpoint.
func (t *tools) endpoint(ctx context.Context, req *mcp.CallToolRequest, sandbox string) (string, *cdp.Endpoint, error) {
	sb, err := t.sandbox(ctx, req, sandbox, NeedAct)
	if err != nil {
		return "", nil, err
	}
	b, ok := t.d.(Browsers)
	if !ok {
		return "", nil, fmt.Errorf("the browser tools are not served here: use the server's /mcp endpoint: %w", api.ErrUnsupported)
	}
	ep, err := b.Browser(ctx, sb)
	if err != nil {
		return "", nil, err
	}
	return sb, ep, nil
}

// onPage runs fn on the tab in front of sandbox's browser, within wait.
func (t *tools) onPage(ctx context.Context, req *mcp.CallToolRequest, sandbox string, wait time.Duration, fn func(ctx context.Context, p *cdp.Page) error) error {
	sb, ep, err := t.endpoint(ctx, req, sandbox)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	cur, err := ep.Current(ctx)
	if err != nil {
		return browserError(sb, err)
	}
	c, err := ep.Attach(ctx, cur.ID)
	if err != nil {
		return browserError(sb, err)
	}
	defer c.Close()
	return browserError(sb, fn(ctx, cdp.NewPage(c)))
}

// browserError says what a failure of the browser tools means for the
// caller.
func browserError(sandbox string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cdp.ErrUnreachable) && !errors.Is(err, api.ErrUnsupported) && !errors.Is(err, api.ErrConflict) && !errors.Is(err, api.ErrNotFound):
		return fmt.Errorf("no browser answers in sandbox %s (Chromium's DevTools, on the guest's port in status.automation.cdp): the browser tools need a sandbox of the browser-desktop image, with its browser open (the task bar's Browser button opens it again): %w",
			sandbox, err)
	case errors.Is(err, cdp.ErrNoPage):
		return fmt.Errorf("%w: open one with browser_tabs (action new)", err)
	case errors.Is(err, cdp.ErrBadSelector):
		return api.Invalid("selector", "%v", err)
	}
	return err
}

// locator reads the element arguments.
func (a locatorArgs) locator() (cdp.Locator, error) {
	switch {
	case len(a.Selector) > MaxLocator:
		return cdp.Locator{}, api.Invalid("selector", "%d bytes: at most %d", len(a.Selector), MaxLocator)
	case len(a.Name) > MaxLocator:
		return cdp.Locator{}, api.Invalid("name", "%d bytes: at most %d", len(a.Name), MaxLocator)
	case a.Role != "" && !rolePattern.MatchString(a.Role):
		return cdp.Locator{}, api.Invalid("role", "%q is not a role (button, link, textbox, …)", a.Role)
	case a.Selector != "" && (a.Name != "" || a.Role != ""):
		return cdp.Locator{}, api.Invalid("selector", "give either selector or name and role, not both")
	case a.Selector == "" && a.Name == "" && a.Role == "":
		return cdp.Locator{}, api.Invalid("selector", "required: the element, by selector or by name (and role)")
	}
	return cdp.Locator{Selector: a.Selector, Name: a.Name, Role: a.Role}, nil
}

var rolePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

// checkURL reads a URL to open.
func checkURL(field, s string) error {
	if s == "" {
		return api.Invalid(field, "required: the address to open")
	}
	if len(s) > MaxURL {
		return api.Invalid(field, "%d bytes: at most %d", len(s), MaxURL)
	}
	u, err := url.Parse(s)
	if err != nil {
		return api.Invalid(field, "%q is not a URL", s)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return api.Invalid(field, "%q names no host", s)
		}
	case "file", "about":
	default:
		return api.Invalid(field, "%q: the scheme must be http, https, file or about", s)
	}
	return nil
}

// waitArg reads timeout_seconds.
func waitArg(sec int) (time.Duration, error) {
	if sec < 0 || time.Duration(sec)*time.Second > MaxBrowserWait {
		return 0, api.Invalid("timeout_seconds", "%d is out of range 0..%d", sec, int(MaxBrowserWait/time.Second))
	}
	if sec == 0 {
		return DefaultBrowserWait, nil
	}
	return time.Duration(sec) * time.Second, nil
}

func pageOut(i cdp.Info) PageOut { return PageOut{URL: i.URL, Title: i.Title, Loading: i.Loading} }

func (t *tools) browserNavigate(ctx context.Context, req *mcp.CallToolRequest, in navigateArgs) (*mcp.CallToolResult, PageOut, error) {
	if err := checkURL("url", in.URL); err != nil {
		return nil, PageOut{}, err
	}
	wait, err := waitArg(in.TimeoutSeconds)
	if err != nil {
		return nil, PageOut{}, err
	}
	var out PageOut
	err = t.onPage(ctx, req, in.Sandbox, wait+pageLineWait, func(ctx context.Context, p *cdp.Page) error {
		lctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		i, err := p.Navigate(lctx, in.URL)
		out = pageOut(i)
		return err
	})
	return nil, out, err
}

func (t *tools) browserClick(ctx context.Context, req *mcp.CallToolRequest, in clickElementArgs) (*mcp.CallToolResult, any, error) {
	l, err := in.locator()
	if err != nil {
		return nil, nil, err
	}
	wait, err := waitArg(in.TimeoutSeconds)
	if err != nil {
		return nil, nil, err
	}
	var text string
	err = t.onPage(ctx, req, in.Sandbox, wait+pageLineWait, func(ctx context.Context, p *cdp.Page) error {
		lctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		desc, err := p.Click(lctx, l)
		if err != nil {
			return err
		}
		text = "clicked " + desc + pageLine(ctx, p)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return textResult(text), nil, nil
}

func (t *tools) browserType(ctx context.Context, req *mcp.CallToolRequest, in typeElementArgs) (*mcp.CallToolResult, any, error) {
	l, err := in.locator()
	if err != nil {
		return nil, nil, err
	}
	if n := len([]rune(in.Text)); n > api.MaxTypeText {
		return nil, nil, api.Invalid("text", "%d characters: at most %d", n, api.MaxTypeText)
	}
	wait, err := waitArg(in.TimeoutSeconds)
	if err != nil {
		return nil, nil, err
	}
	var text string
	err = t.onPage(ctx, req, in.Sandbox, wait+pageLineWait, func(ctx context.Context, p *cdp.Page) error {
		lctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		desc, value, err := p.Type(lctx, l, in.Text, in.Submit)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(value)
		text = fmt.Sprintf("typed into %s, which now holds %s", desc, b)
		if in.Submit {
			text += "; pressed Enter" + pageLine(ctx, p)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return textResult(text), nil, nil
}

// pageLineWait is the time left to pageLine after an action's wait.
const pageLineWait = 5 * time.Second

// pageLine says where the page is after an action. A page that does not
// answer is still loading (a navigation the action started).
func pageLine(ctx context.Context, p *cdp.Page) string {
	i, err := p.Info(ctx)
	if err != nil {
		return "; the page is still loading (it did not answer in time)"
	}
	b, _ := json.Marshal(pageOut(i))
	return "; page " + string(b)
}

func (t *tools) browserSnapshot(ctx context.Context, req *mcp.CallToolRequest, in snapshotArgs) (*mcp.CallToolResult, any, error) {
	max := in.MaxBytes
	switch {
	case max < 0 || max > MaxSnapshot:
		return nil, nil, api.Invalid("max_bytes", "%d is out of range 0..%d", max, MaxSnapshot)
	case max == 0:
		max = DefaultSnapshot
	}
	var text string
	err := t.onPage(ctx, req, in.Sandbox, DefaultBrowserWait, func(ctx context.Context, p *cdp.Page) error {
		i, err := p.Info(ctx)
		if err != nil {
			return err
		}
		head, _ := json.Marshal(pageOut(i))
		tree, err := p.Snapshot(ctx, max)
		text = "page " + string(head) + "\n" + tree
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return textResult(text), nil, nil
}

func (t *tools) browserBack(ctx context.Context, req *mcp.CallToolRequest, in backArgs) (*mcp.CallToolResult, PageOut, error) {
	wait, err := waitArg(in.TimeoutSeconds)
	if err != nil {
		return nil, PageOut{}, err
	}
	var out PageOut
	err = t.onPage(ctx, req, in.Sandbox, wait+pageLineWait, func(ctx context.Context, p *cdp.Page) error {
		lctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		i, err := p.Back(lctx)
		out = pageOut(i)
		return err
	})
	return nil, out, err
}

func (t *tools) browserTabs(ctx context.Context, req *mcp.CallToolRequest, in tabsArgs) (*mcp.CallToolResult, tabsOut, error) {
	switch in.Action {
	case "", "list":
		if in.Tab != "" || in.URL != "" {
			return nil, tabsOut{}, api.Invalid("action", "list takes no tab or url")
		}
	case "select", "close":
		if in.Tab == "" {
			return nil, tabsOut{}, api.Invalid("tab", "required for %s: the tab's id, as list gives it", in.Action)
		}
		if in.URL != "" {
			return nil, tabsOut{}, api.Invalid("url", "only new opens a url")
		}
	case "new":
		if in.Tab != "" {
			return nil, tabsOut{}, api.Invalid("tab", "new opens a tab of its own")
		}
		if in.URL != "" {
			if err := checkURL("url", in.URL); err != nil {
				return nil, tabsOut{}, err
			}
		}
	default:
		return nil, tabsOut{}, api.Invalid("action", "%q is not one of list, select, new, close", in.Action)
	}
	sb, ep, err := t.endpoint(ctx, req, in.Sandbox)
	if err != nil {
		return nil, tabsOut{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultBrowserWait)
	defer cancel()
	err = t.tabAction(ctx, ep, in)
	if err != nil {
		return nil, tabsOut{}, browserError(sb, err)
	}
	pages, err := ep.Pages(ctx)
	if err != nil {
		return nil, tabsOut{}, browserError(sb, err)
	}
	out := tabsOut{Tabs: []Tab{}}
	for i, p := range pages {
		if i == maxTabs {
			break
		}
		out.Tabs = append(out.Tabs, Tab{ID: p.ID, Title: p.Title, URL: p.URL, Current: i == 0})
	}
	return nil, out, nil
}

// tabAction does what browser_tabs's action says, but list.
func (t *tools) tabAction(ctx context.Context, ep *cdp.Endpoint, in tabsArgs) error {
	if in.Action == "new" {
		tab, err := ep.NewPage(ctx)
		if err != nil || in.URL == "" {
			return err
		}
		c, err := ep.Attach(ctx, tab.ID)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = cdp.NewPage(c).Navigate(ctx, in.URL)
		return err
	}
	if in.Action != "select" && in.Action != "close" {
		return nil
	}
	pages, err := ep.Pages(ctx)
	if err != nil {
		return err
	}
	found := false
	for _, p := range pages {
		found = found || p.ID == in.Tab
	}
	switch {
	case !found:
		return fmt.Errorf("the browser has no tab %q (browser_tabs lists them): %w", in.Tab, api.ErrNotFound)
	case in.Action == "select":
		return ep.Activate(ctx, in.Tab)
	case len(pages) == 1:
		// Closing the last tab would end the browser, and with it the
		// browser tools.
		return fmt.Errorf("tab %s is the browser's only tab: open another first (action new): %w", in.Tab, api.ErrConflict)
	}
	return ep.ClosePage(ctx, in.Tab)
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

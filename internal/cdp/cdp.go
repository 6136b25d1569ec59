// Package cdp is a small client of the Chrome DevTools Protocol (CDP): the
// HTTP endpoint of a browser's DevTools (/json/list, /json/activate, …)
// and a page target's WebSocket, over which commands go with ids and
// results and events come back. It reaches the endpoint through a dial
// function, so that a browser inside a sandbox's guest is reached over
// the sandbox's own network and never through a listener on the host.
//
// Page (page.go) builds what an agent's browser tools need on top:
// navigate and wait for the load, click and type into an element found by
// CSS selector or by accessible name, go back, and the page's
// accessibility tree as text (snapshot.go).
//
// Everything is bounded: every HTTP answer and WebSocket message by size,
// every call by its context and a default timeout.
package cdp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Bounds of the client; variables so that tests can shorten them.
var (
	// MaxListBytes bounds an answer of the HTTP endpoint.
	MaxListBytes int64 = 1 << 20
	// MaxMessage bounds one WebSocket message: an accessibility tree of
	// a large page is several MiB.
	MaxMessage int64 = 32 << 20
	// CallTimeout bounds a request or command whose context has no
	// deadline of its own.
	CallTimeout = 30 * time.Second
)

// DialFunc connects to the DevTools port. The connection is the caller's
// to close; ctx bounds the dial only.
type DialFunc func(ctx context.Context) (net.Conn, error)

// Endpoint is a browser's DevTools HTTP endpoint: reached through a dial
// function (NewEndpoint), or behind an HTTP proxy of its port
// (NewForwarded). Each request gets a connection of its own, which ends
// with it.
type Endpoint struct {
	dial   DialFunc    // nil: a proxy, reached by base's address
	base   string      // http(s)://HOST[/PREFIX]: where DevTools' paths start
	header http.Header // sent with every request and WebSocket
	port   int
}

// NewEndpoint returns the endpoint that dial reaches, which listens on port
// (it names the port in the Host header, as DevTools expects).
func NewEndpoint(port int, dial DialFunc) *Endpoint {
	return &Endpoint{dial: dial, base: "http://localhost:" + strconv.Itoa(port), port: port}
}

// NewForwarded returns the endpoint of DevTools' port port that an HTTP
// proxy serves at base (http or https; the paths of DevTools follow it),
// such as hvkube's port forward …/api/v1/sandboxes/NAME/ports/PORT. header
// goes with every request, for the proxy (its credentials).
func NewForwarded(base string, port int, header http.Header) *Endpoint {
	return &Endpoint{base: strings.TrimRight(base, "/"), header: header, port: port}
}

// Port is the port DevTools listens on, in the browser's host.
func (e *Endpoint) Port() int { return e.port }

// Target is a DevTools target as /json/list describes it.
type Target struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	Title string `json:"title"`
	URL   string `json:"url"`
}

// ErrNoPage: the browser has no page (tab) open.
var ErrNoPage = errors.New("the browser has no open page")

// ErrUnreachable wraps a failure to reach the DevTools endpoint at all.
var ErrUnreachable = errors.New("no answer from the browser's DevTools")

// transport is an HTTP transport that reaches the endpoint whatever a URL
// names, one connection per request.
func (e *Endpoint) transport() *http.Transport {
	tr := &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
		TLSHandshakeTimeout:    10 * time.Second,
	}
	if e.dial != nil {
		tr.Proxy = nil
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := e.dial(ctx)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
			}
			return c, nil
		}
	}
	return tr
}

// withTimeout gives ctx CallTimeout unless it has a deadline already.
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, CallTimeout)
}

// get requests path of the endpoint and decodes its JSON answer into out
// (nil: the answer is read and dropped).
func (e *Endpoint) get(ctx context.Context, method, path string, out any) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, nil)
	if err != nil {
		return err
	}
	for k, v := range e.header {
		req.Header[k] = v
	}
	tr := e.transport()
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxListBytes+1))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if int64(len(b)) > MaxListBytes {
		return fmt.Errorf("%s %s: the answer is over %d bytes", method, path, MaxListBytes)
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
		if e.dial == nil && (resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout) {
			err = fmt.Errorf("%w: %w", ErrUnreachable, err) // the proxy reached nothing
		}
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

// Pages lists the browser's pages (tabs), the one used most recently
// first, as DevTools orders them. The browser's own user interface
// (chrome://….top-chrome/) is left out.
func (e *Endpoint) Pages(ctx context.Context) ([]Target, error) {
	var all []Target
	if err := e.get(ctx, http.MethodGet, "/json/list", &all); err != nil {
		return nil, err
	}
	var pages []Target
	for _, t := range all {
		if t.Type == "page" && validID(t.ID) && !browserUI(t.URL) {
			pages = append(pages, t)
		}
	}
	return pages, nil
}

// browserUI reports whether u is a page of the browser's own user
// interface, which Chromium lists as a page target.
func browserUI(u string) bool {
	rest, ok := strings.CutPrefix(u, "chrome://")
	if !ok {
		return false
	}
	host, _, _ := strings.Cut(rest, "/")
	return strings.HasSuffix(host, ".top-chrome")
}

// Current is the page used most recently: the one in front.
func (e *Endpoint) Current(ctx context.Context) (Target, error) {
	pages, err := e.Pages(ctx)
	if err != nil {
		return Target{}, err
	}
	if len(pages) == 0 {
		return Target{}, ErrNoPage
	}
	return pages[0], nil
}

// NewPage opens a new tab on about:blank, in front.
func (e *Endpoint) NewPage(ctx context.Context) (Target, error) {
	var t Target
	// Chromium takes only PUT here (GET would let a web page open tabs).
	if err := e.get(ctx, http.MethodPut, "/json/new?about:blank", &t); err != nil {
		return Target{}, err
	}
	if !validID(t.ID) {
		return Target{}, fmt.Errorf("PUT /json/new: the new page's id %q is not one", t.ID)
	}
	return t, nil
}

// Activate brings page id to the front.
func (e *Endpoint) Activate(ctx context.Context, id string) error {
	if !validID(id) {
		return fmt.Errorf("%q is not a page id", id)
	}
	return e.get(ctx, http.MethodGet, "/json/activate/"+id, nil)
}

// ClosePage closes page id.
func (e *Endpoint) ClosePage(ctx context.Context, id string) error {
	if !validID(id) {
		return fmt.Errorf("%q is not a page id", id)
	}
	return e.get(ctx, http.MethodGet, "/json/close/"+id, nil)
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// validID reports whether id can be a target's id. Ids go into paths, and
// what lists them runs in an untrusted guest.
func validID(id string) bool { return idPattern.MatchString(id) }

// Attach opens a CDP session with page id over its WebSocket. The URL is
// built here from the id, never taken from the endpoint's list: a guest
// names whatever it likes there.
func (e *Endpoint) Attach(ctx context.Context, id string) (*Conn, error) {
	if !validID(id) {
		return nil, fmt.Errorf("%q is not a page id", id)
	}
	return dialConn(ctx, e.transport(), e.header, "ws"+strings.TrimPrefix(e.base, "http")+"/devtools/page/"+id)
}

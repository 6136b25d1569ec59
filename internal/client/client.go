// Package client is a Go client of hvkube's REST API, used by the CLI and by
// tests.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// DefaultServer is the server address when none is configured.
const DefaultServer = "http://127.0.0.1:8080"

// Client talks to one hvkube server.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client for server (DefaultServer when empty). token, when
// set, is sent as a bearer token.
func New(server, token string) (*Client, error) {
	if server == "" {
		server = DefaultServer
	}
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("server %q is not an http(s) URL", server)
	}
	// More than the default two idle connections per host: the CLI makes
	// one request at a time, but programs share a Client between many.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	return &Client{base: strings.TrimRight(server, "/"), token: token, http: &http.Client{Transport: tr}}, nil
}

// TrustCA makes the client check the server's TLS certificate against the
// authority in caPEM (hvkube ca prints it) instead of the system's.
func (c *Client) TrustCA(caPEM []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no PEM certificate in it")
	}
	tr, ok := c.http.Transport.(*http.Transport)
	if !ok {
		return errors.New("the client's transport is not its own")
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return nil
}

// Server returns the base URL.
func (c *Client) Server() string { return c.base }

// PortForward is the API's forward of port in sandbox's guest (HTTP and
// WebSocket: …/api/v1/sandboxes/NAME/ports/PORT) and the header that
// carries this client's token to it.
func (c *Client) PortForward(sandbox string, port int) (string, http.Header) {
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	return c.base + "/api/v1/sandboxes/" + url.PathEscape(sandbox) + "/ports/" + strconv.Itoa(port), h
}

// Error is an error answer from the server.
type Error struct {
	Code    int
	Message string `json:"error"`
	Field   string `json:"field"`
}

func (e *Error) Error() string { return e.Message }

// Is maps HTTP codes back to the api error categories.
func (e *Error) Is(target error) bool {
	switch target {
	case api.ErrNotFound:
		return e.Code == http.StatusNotFound
	case api.ErrConflict:
		return e.Code == http.StatusConflict
	case api.ErrInvalid:
		return e.Code == http.StatusBadRequest
	case api.ErrUnsupported:
		return e.Code == http.StatusNotImplemented
	case api.ErrGone:
		return e.Code == http.StatusGone
	case api.ErrNoSpace:
		return e.Code == http.StatusInsufficientStorage
	case api.ErrUnavailable:
		return e.Code == http.StatusServiceUnavailable
	}
	return false
}

// Do sends a request and decodes a JSON answer into out (when non-nil). A
// non-2xx answer is returned as *Error.
func (c *Client) Do(ctx context.Context, method, path string, body []byte, contentType string, out any) (*http.Response, error) {
	resp, err := c.send(ctx, method, path, body, contentType)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return resp, nil
}

// Raw sends a request and returns the open answer; the caller closes it. A
// non-2xx answer is returned as *Error.
func (c *Client) Raw(ctx context.Context, method, path string, body []byte, contentType string) (*http.Response, error) {
	return c.send(ctx, method, path, body, contentType)
}

func (c *Client) send(ctx context.Context, method, path string, body []byte, contentType string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("cannot reach the hvkube server at %s (is `hvkube serve` running? set --server or HVKUBE_SERVER): %w", c.base, ue.Err)
		}
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		e := &Error{Code: resp.StatusCode}
		if json.Unmarshal(b, e) != nil || e.Message == "" {
			e.Message = fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
		}
		return nil, e
	}
	return resp, nil
}

func resourcePath(kind string) (api.KindInfo, string, error) {
	k, ok := api.LookupKind(kind)
	if !ok {
		return api.KindInfo{}, "", fmt.Errorf("unknown resource type %q", kind)
	}
	return k, "/api/v1/" + k.Plural, nil
}

// ListPageSize is how many objects List asks for at a time.
const ListPageSize = 500

// List returns the objects of a kind matching a label selector, following
// the server's pages.
func (c *Client) List(ctx context.Context, kind, selector string) ([]api.Object, error) {
	k, p, err := resourcePath(kind)
	if err != nil {
		return nil, err
	}
	var out []api.Object
	cont := ""
	for {
		q := url.Values{"limit": {strconv.Itoa(ListPageSize)}}
		if selector != "" {
			q.Set("labelSelector", selector)
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		var raw struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if _, err := c.Do(ctx, http.MethodGet, p+"?"+q.Encode(), nil, "", &raw); err != nil {
			return nil, err
		}
		objs, err := decodeItems(k.Kind, raw.Items)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
		if raw.Metadata.Continue == "" {
			return out, nil
		}
		cont = raw.Metadata.Continue
	}
}

func decodeItems(kind string, items []json.RawMessage) ([]api.Object, error) {
	out := make([]api.Object, 0, len(items))
	for _, it := range items {
		o, err := decodeObject(kind, it)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

func decodeObject(kind string, b []byte) (api.Object, error) {
	o, err := api.New(kind)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, o); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kind, err)
	}
	return o, nil
}

// Get returns one object.
func (c *Client) Get(ctx context.Context, kind, name string) (api.Object, error) {
	k, p, err := resourcePath(kind)
	if err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if _, err := c.Do(ctx, http.MethodGet, p+"/"+url.PathEscape(name), nil, "", &raw); err != nil {
		return nil, err
	}
	return decodeObject(k.Kind, raw)
}

// Apply creates or updates o (PUT) and says which it did: created,
// configured or unchanged.
func (c *Client) Apply(ctx context.Context, o api.Object) (api.Object, string, error) {
	k, p, err := resourcePath(o.GetTypeMeta().Kind)
	if err != nil {
		return nil, "", err
	}
	body, err := json.Marshal(o)
	if err != nil {
		return nil, "", err
	}
	var raw json.RawMessage
	resp, err := c.Do(ctx, http.MethodPut, p+"/"+url.PathEscape(o.GetMeta().Name), body, "application/json", &raw)
	if err != nil {
		return nil, "", err
	}
	out, err := decodeObject(k.Kind, raw)
	return out, resp.Header.Get("Hvkube-Apply-Result"), err
}

// Create creates o (POST).
func (c *Client) Create(ctx context.Context, o api.Object) (api.Object, error) {
	k, p, err := resourcePath(o.GetTypeMeta().Kind)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if _, err := c.Do(ctx, http.MethodPost, p, body, "application/json", &raw); err != nil {
		return nil, err
	}
	return decodeObject(k.Kind, raw)
}

// Delete deletes an object; done is false when the server accepted the
// deletion but finalizers still hold the object.
func (c *Client) Delete(ctx context.Context, kind, name string) (done bool, err error) {
	_, p, err := resourcePath(kind)
	if err != nil {
		return false, err
	}
	resp, err := c.Do(ctx, http.MethodDelete, p+"/"+url.PathEscape(name), nil, "", nil)
	if err != nil {
		return false, err
	}
	return resp.StatusCode != http.StatusAccepted, nil
}

// Scale sets a pool's replicas.
func (c *Client) Scale(ctx context.Context, pool string, replicas int) (*api.SandboxPool, error) {
	body, _ := json.Marshal(map[string]int{"replicas": replicas})
	var p api.SandboxPool
	if _, err := c.Do(ctx, http.MethodPatch, "/api/v1/sandboxpools/"+url.PathEscape(pool)+"/scale", body, "application/merge-patch+json", &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Events lists audit-log events, optionally for one object.
func (c *Client) Events(ctx context.Context, kind, name string) ([]*api.Event, error) {
	q := url.Values{}
	if kind != "" {
		q.Set("kind", kind)
	}
	if name != "" {
		q.Set("name", name)
	}
	var raw struct {
		Items []*api.Event `json:"items"`
	}
	p := "/api/v1/events"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	if _, err := c.Do(ctx, http.MethodGet, p, nil, "", &raw); err != nil {
		return nil, err
	}
	return raw.Items, nil
}

// WatchEvent is one change seen by Watch.
type WatchEvent struct {
	Type   string
	Object api.Object
	Err    error
}

// Watch streams the objects of a kind (events with kind "events"): first the
// current ones as ADDED, then every change, until ctx ends. When the stream
// breaks (the server restarted, a proxy cut it) Watch reconnects and
// resumes after the last change it delivered; when the server can no
// longer resume from there (410 Gone) it lists again, delivering the
// current objects as ADDED once more and, as DELETED in their last known
// state, those it had delivered that are gone from the new list. A watch
// that cannot reconnect within ReconnectFor ends with a final WatchEvent
// with Err set.
func (c *Client) Watch(ctx context.Context, kind, selector string) (<-chan WatchEvent, error) {
	k, p, err := resourcePath(kind)
	if err != nil {
		return nil, err
	}
	q := url.Values{"watch": {"true"}}
	if k.Kind != api.KindEvent {
		q.Set("allowWatchBookmarks", "true")
	}
	if selector != "" {
		q.Set("labelSelector", selector)
	}
	resp, err := c.Raw(ctx, http.MethodGet, p+"?"+q.Encode(), nil, "")
	if err != nil {
		return nil, err
	}
	ch := make(chan WatchEvent, 64)
	go func() {
		defer close(ch)
		ws := &watchState{known: map[string]api.Object{}}
		for {
			if ws.last == "" && k.Kind != api.KindEvent {
				ws.listing = map[string]bool{} // until the list's bookmark
			}
			err := c.readWatch(ctx, k.Kind, resp, ws, ch)
			if ctx.Err() != nil {
				return
			}
			resp, err = c.rewatch(ctx, p, q, &ws.last, err)
			if err != nil {
				select {
				case ch <- WatchEvent{Err: err}:
				case <-ctx.Done():
				}
				return
			}
		}
	}()
	return ch, nil
}

// ReconnectFor is how long Watch keeps trying to reconnect a broken stream.
var ReconnectFor = 2 * time.Minute

// errWatchGone asks rewatch to list again.
var errWatchGone = errors.New("the watch fell behind")

// rewatch reconnects a broken watch after *last, or from scratch when the
// server cannot resume (then *last is cleared).
func (c *Client) rewatch(ctx context.Context, p string, q url.Values, last *string, cause error) (*http.Response, error) {
	deadline := time.Now().Add(ReconnectFor)
	delay := 100 * time.Millisecond
	if errors.Is(cause, errWatchGone) {
		*last = ""
	}
	for {
		rq := url.Values{}
		for k, v := range q {
			rq[k] = v
		}
		if *last != "" {
			rq.Set("resourceVersion", *last)
		}
		resp, err := c.Raw(ctx, http.MethodGet, p+"?"+rq.Encode(), nil, "")
		if err == nil {
			return resp, nil
		}
		if errors.Is(err, api.ErrGone) && *last != "" {
			*last = "" // list again
			continue
		}
		var e *Error
		if errors.As(err, &e) && e.Code < 500 {
			return nil, fmt.Errorf("watch: %w", err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("watch: could not reconnect within %s: %w", ReconnectFor, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// watchState is what a Watch remembers across its streams.
type watchState struct {
	// last is the resourceVersion of the last change delivered.
	last string
	// known are the objects delivered and not deleted, by name.
	known map[string]api.Object
	// listing, while a stream's initial list arrives (until its bookmark),
	// holds the names it listed; nil otherwise.
	listing map[string]bool
}

// listed ends the initial list of a stream: what the watch knew and the
// list lacks was deleted meanwhile.
func (ws *watchState) listed(ctx context.Context, ch chan<- WatchEvent) error {
	seen := ws.listing
	ws.listing = nil
	for name, o := range ws.known {
		if seen[name] {
			continue
		}
		delete(ws.known, name)
		select {
		case ch <- WatchEvent{Type: "DELETED", Object: o}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// readWatch delivers one watch stream's events to ch until it ends,
// keeping ws up to date.
func (c *Client) readWatch(ctx context.Context, kind string, resp *http.Response, ws *watchState, ch chan<- WatchEvent) error {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue // heartbeat
		}
		var raw struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(line, &raw); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		if raw.Type == "ERROR" {
			return errWatchGone
		}
		if raw.Type == "BOOKMARK" {
			var b struct {
				Metadata api.ObjectMeta `json:"metadata"`
			}
			if json.Unmarshal(raw.Object, &b) == nil && b.Metadata.ResourceVersion != "" {
				ws.last = b.Metadata.ResourceVersion
			}
			if ws.listing != nil {
				if err := ws.listed(ctx, ch); err != nil {
					return err
				}
			}
			continue
		}
		o, err := decodeObject(kind, raw.Object)
		if err != nil {
			return err
		}
		if kind != api.KindEvent {
			name := o.GetMeta().Name
			switch raw.Type {
			case "DELETED":
				delete(ws.known, name)
			default:
				ws.known[name] = o
				if ws.listing != nil {
					ws.listing[name] = true
				}
			}
		}
		select {
		case ch <- WatchEvent{Type: raw.Type, Object: o}:
		case <-ctx.Done():
			return ctx.Err()
		}
		ws.last = o.GetMeta().ResourceVersion
	}
	return sc.Err()
}

// WaitReady polls /readyz until the server answers or timeout passes.
func (c *Client) WaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := c.Raw(ctx, http.MethodGet, "/readyz", nil, "")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
)

// Sandboxes runs operations on live sandboxes. The server calls it for the
// sandbox subresources; the node implements it over its backend. Screen
// and input go through the action layer (Options.Actions).
type Sandboxes interface {
	// Pause, Resume, Save and Reset change a sandbox's run state and block
	// until the change is done.
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) error
	Save(ctx context.Context, name string) error
	Reset(ctx context.Context, name string) error
	Screenshot(ctx context.Context, name string, opts backend.ScreenshotOptions) ([]byte, string, error)
	Exec(ctx context.Context, name string, req backend.ExecRequest) (backend.ExecResult, error)
	ClipboardGet(ctx context.Context, name string) (string, error)
	ClipboardSet(ctx context.Context, name, text string) error
	Logs(ctx context.Context, name string) (io.ReadCloser, error)
	// DialDisplay connects to the VNC server of a sandbox that has a
	// process; the caller closes the connection.
	DialDisplay(ctx context.Context, name string) (io.ReadWriteCloser, error)
}

// InputControl is the optional ability of Sandboxes to keep who holds a
// sandbox's input (node.Node and the node router have it): the node that
// owns the sandbox writes a person's take-over, and refuses everyone
// else's input from the moment it answers, whichever API server the input
// comes through. Without it the server writes status.control itself.
type InputControl interface {
	TakeControl(ctx context.Context, name string, c api.SandboxControl, force bool) (taken *api.SandboxControl, sb *api.Sandbox, err error)
	ReleaseControl(ctx context.Context, name, id string, force bool) (released *api.SandboxControl, sb *api.Sandbox, err error)
}

// PortDialer is the optional ability of Sandboxes to reach TCP ports
// inside guests, which the port forwards (ports.go) need; without it they
// answer 501.
type PortDialer interface {
	// DialPort connects to port inside sandbox name's guest over the
	// sandbox's own network, never through a listener on the host; the
	// caller closes the connection. ctx bounds the dial only.
	DialPort(ctx context.Context, name string, port int) (net.Conn, error)
}

// Capturer is the optional ability of Sandboxes to capture a sandbox as
// it is now into the snapshot of a new template (node.Node and the node
// router have it); without it the snapshot route answers 501. The server
// creates the Template object itself: a node creates none.
type Capturer interface {
	Capture(ctx context.Context, sandbox, template string) (backend.TemplateInfo, error)
}

// SnapshotRequest names the template a snapshot makes.
type SnapshotRequest struct {
	Template string `json:"template"`
}

func (s *Server) sandboxRoutes() {
	m := s.mux
	m.HandleFunc("POST /api/v1/sandboxes/{name}/snapshot", s.withSandboxes(s.snapshot))
	m.HandleFunc("POST /api/v1/sandboxes/{name}/fork", s.withSandboxes(s.fork))
	m.HandleFunc("POST /api/v1/sandboxes/{name}/browser", s.withSandboxes(s.browserToolset))
	for _, op := range []string{"pause", "resume", "save", "reset"} {
		m.HandleFunc("POST /api/v1/sandboxes/{name}/"+op, s.withSandboxes(s.sandboxOp(op)))
	}
	m.HandleFunc("GET /api/v1/sandboxes/{name}/screen", s.withSandboxes(s.withActions(s.timed(s.screen, func(r *http.Request, d time.Duration) {
		s.opts.Metrics.ObserveScreenshot(r.URL.Query().Get("format"), d)
	}))))
	m.HandleFunc("POST /api/v1/sandboxes/{name}/input", s.withSandboxes(s.withActions(s.timed(s.input, func(_ *http.Request, d time.Duration) { s.opts.Metrics.ObserveInput(d) }))))
	m.HandleFunc("GET /api/v1/sandboxes/{name}/clipboard", s.withSandboxes(s.clipboardGet))
	m.HandleFunc("POST /api/v1/sandboxes/{name}/clipboard", s.withSandboxes(s.clipboardSet))
	m.HandleFunc("POST /api/v1/sandboxes/{name}/exec", s.withSandboxes(s.exec))
	m.HandleFunc("GET /api/v1/sandboxes/{name}/logs", s.withSandboxes(s.sandboxLogs))
	s.displayRoutes()
	s.portRoutes()
	s.guestRoutes()
}

// withSandboxes answers 404 for unknown sandboxes and 501 when the server
// has no backend, before the handler runs.
func (s *Server) withSandboxes(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := s.exists(r.Context(), api.KindSandbox, r.PathValue("name")); err != nil {
			s.fail(w, r, err)
			return
		}
		if s.opts.Sandboxes == nil {
			writeError(w, http.StatusNotImplemented, fmt.Errorf("%s %s needs a VM backend, and this server runs without one (start it with --backend qemu)", r.Method, r.URL.Path))
			return
		}
		h(w, r)
	}
}

// exists checks that kind/name exists: in the watch caches
// (Options.Cached), else in the store.
func (s *Server) exists(ctx context.Context, kind, name string) error {
	if s.opts.Cached != nil {
		if _, ok := s.opts.Cached(kind, name); ok {
			return nil
		}
	}
	_, err := s.opts.Store.Get(ctx, kind, name)
	return err
}

// withActions answers 501 when the server has no action layer.
func (s *Server) withActions(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Actions == nil {
			writeError(w, http.StatusNotImplemented, fmt.Errorf("%s %s needs a VM backend, and this server runs without one (start it with --backend qemu)", r.Method, r.URL.Path))
			return
		}
		h(w, r)
	}
}

func (s *Server) sandboxOp(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		var err error
		switch op {
		case "pause":
			err = s.opts.Sandboxes.Pause(r.Context(), name)
		case "resume":
			err = s.opts.Sandboxes.Resume(r.Context(), name)
		case "save":
			err = s.opts.Sandboxes.Save(r.Context(), name)
		case "reset":
			err = s.opts.Sandboxes.Reset(r.Context(), name)
			if err == nil {
				s.endControl(r.Context(), name, "the sandbox was reset to its clean snapshot")
			}
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		o, err := s.opts.Store.Get(r.Context(), api.KindSandbox, name)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, o)
	}
}

// screen answers GET /sandboxes/{name}/screen[?format=png|jpeg][&quality=N]
// [&width=W][&height=H][&settle=true][&settleTimeout=DURATION].
func (s *Server) screen(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var opts display.ShotOptions
	opts.Format = q.Get("format")
	if opts.Format != "" && opts.Format != "png" && opts.Format != "jpeg" {
		s.fail(w, r, api.Invalid("format", "unsupported value %q: want png or jpeg", opts.Format))
		return
	}
	for _, f := range []struct {
		name string
		dst  *int
		max  int
	}{{"quality", &opts.Quality, 100}, {"width", &opts.Width, api.MaxScreenWidth}, {"height", &opts.Height, api.MaxScreenHeight}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > f.max {
			s.fail(w, r, api.Invalid(f.name, "%q is not a number in 1..%d", v, f.max))
			return
		}
		*f.dst = n
	}
	if opts.Quality != 0 && opts.Format != "jpeg" {
		s.fail(w, r, api.Invalid("quality", "only applies to format=jpeg"))
		return
	}
	var err error
	if opts.Settle, err = boolParam(q, "settle"); err != nil {
		s.fail(w, r, err)
		return
	}
	if v := q.Get("settleTimeout"); v != "" {
		if !opts.Settle {
			s.fail(w, r, api.Invalid("settleTimeout", "only applies to settle=true"))
			return
		}
		d, err := durationParam(v)
		if err != nil || d <= 0 || d > display.MaxSettleTimeout {
			s.fail(w, r, api.Invalid("settleTimeout", "%q is not a duration in (0, %v] (e.g. 2s or 500ms)", v, display.MaxSettleTimeout))
			return
		}
		opts.SettleTimeout = d
	}
	img, ctype, err := s.opts.Actions.Screenshot(r.Context(), r.PathValue("name"), opts)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeImage(w, img, ctype)
}

func writeImage(w http.ResponseWriter, img []byte, ctype string) {
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(img)))
	w.Header().Set("Cache-Control", "no-store")
	w.Write(img)
}

// boolParam reads a true/false query parameter ("" is false).
func boolParam(q url.Values, name string) (bool, error) {
	switch v := q.Get(name); v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	default:
		return false, api.Invalid(name, "%q: want true or false", v)
	}
}

// durationParam reads a Go duration ("2s", "500ms") or a number of seconds.
func durationParam(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(f * float64(time.Second)), nil
	}
	return time.ParseDuration(v)
}

// InputResponse answers an input action.
type InputResponse struct {
	OK bool `json:"ok"`
	// Coordinate answers cursor_position.
	Coordinate []int `json:"coordinate,omitempty"`
}

// decodeStrict decodes a JSON body into v, rejecting unknown fields with the
// field named.
func (s *Server) decodeStrict(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return api.Invalid("", "empty body: expected a JSON object")
	}
	return s.decodeJSON(body, v)
}

// decodeOptional decodes a JSON body, if there is one, strictly into v;
// an empty body leaves v as it is. It answers the error itself and reports
// whether the handler may go on.
func (s *Server) decodeOptional(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := s.readBody(w, r)
	if err != nil {
		s.failBody(w, r, err)
		return false
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := s.decodeJSON(body, v); err != nil {
			s.fail(w, r, err)
			return false
		}
	}
	return true
}

// decodeJSON decodes body strictly into v: no duplicate or unknown keys,
// nothing after the object.
func (s *Server) decodeJSON(body []byte, v any) error {
	if err := api.CheckJSON(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			f = strings.Trim(f, `"`)
			return api.Invalid(f, "unknown field")
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return api.Invalid(te.Field, "expected %s, got %s", te.Type, te.Value)
		}
		return api.Invalid("", "invalid JSON: %v", err)
	}
	if dec.More() {
		return api.Invalid("", "unexpected data after the JSON object")
	}
	return nil
}

// input answers POST /sandboxes/{name}/input[?width=W][&height=H] with one
// computer-use action, or a batch, in any vocabulary api.Action takes:
// Anthropic's ({"action": "left_click", "coordinate": [100, 200]}),
// OpenAI's ({"type": "click", "x": 100, "y": 200, "keys": ["CTRL"]}, or a
// computer_call item with its actions), Gemini's function calls ({"name":
// "click", "args": {"x": 500, "y": 500}}, on the 0-999 grid) — told apart
// by the field that names the action (docs/actions.md). width and height
// name the screen space the caller works in (the screen scaled as GET
// .../screen?width=W gives it); pixel coordinates are mapped back to the
// desktop. screenshot and zoom answer with the image; other actions with
// {"ok": true}, the coordinate cursor_position read, and the intents the
// actions gave. While a person holds the sandbox, input is refused with
// 409 unless it carries their take-over ID in the X-Hvkube-Control header.
func (s *Server) input(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var sp display.Space
	for _, f := range []struct {
		name string
		dst  *int
		max  int
	}{{"width", &sp.Width, api.MaxScreenWidth}, {"height", &sp.Height, api.MaxScreenHeight}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > f.max {
				s.fail(w, r, api.Invalid(f.name, "%q is not a number in 1..%d", v, f.max))
				return
			}
			*f.dst = n
		}
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.failBody(w, r, err)
		return
	}
	act, err := api.DecodeAction(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, err := s.inputControl(r)
	if err != nil {
		s.failBody(w, r, err)
		return
	}
	// A batch, or one action that is several of the layer's (a drag is
	// a press, moves and a release), runs as one input, which releases
	// what it pressed if it fails part way.
	res, err := s.opts.Actions.Do(ctx, r.PathValue("name"), act, sp)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if res.Image != nil {
		writeImage(w, res.Image, res.ContentType)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		InputResponse
		// Intents echo why the actions were taken (Gemini's intent,
		// hvkube's), in order.
		Intents []string `json:"intents,omitempty"`
	}{InputResponse{OK: true, Coordinate: res.Coordinate}, act.Intents()})
}

// inputControl reads the X-Hvkube-Control header of an input request: the
// key of the sandbox's current take-over marks the input as its holder's.
// An agent's token never sends input on a person's behalf.
func (s *Server) inputControl(r *http.Request) (context.Context, error) {
	key := r.Header.Get(api.ControlHeader)
	if key == "" {
		return r.Context(), nil
	}
	if _, scoped := scopeOf(r.Context()); scoped {
		return nil, &httpError{http.StatusForbidden, fmt.Errorf("%s: an agent's token never sends input on a person's behalf", api.ControlHeader)}
	}
	name := r.PathValue("name")
	o, err := s.opts.Store.Get(r.Context(), api.KindSandbox, name)
	if err != nil {
		return nil, err
	}
	c := o.(*api.Sandbox).Status.Control
	if c == nil {
		return r.Context(), nil // nobody holds it: the input goes as anyone's
	}
	if s.opts.ScopedKey == nil || !s.opts.ScopedKey.CheckControlKey(name, c.ID, key) {
		return nil, &httpError{http.StatusConflict, fmt.Errorf("%s is not the key of take-over %s of sandbox %s (held by %s)", api.ControlHeader, c.ID, name, c.Holder)}
	}
	return display.WithControl(r.Context(), c.ID), nil
}

// Clipboard is the body of the clipboard endpoints.
type Clipboard struct {
	Text *string `json:"text"`
}

func (s *Server) clipboardGet(w http.ResponseWriter, r *http.Request) {
	text, err := s.opts.Sandboxes.ClipboardGet(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Clipboard{Text: &text})
}

// MaxClipboard bounds clipboard text.
const MaxClipboard = 1 << 20

func (s *Server) clipboardSet(w http.ResponseWriter, r *http.Request) {
	var c Clipboard
	if err := s.decodeStrict(w, r, &c); err != nil {
		s.failBody(w, r, err)
		return
	}
	switch {
	case c.Text == nil:
		s.fail(w, r, api.Invalid("text", "required"))
		return
	case len(*c.Text) > MaxClipboard:
		s.fail(w, r, api.Invalid("text", "%d bytes: at most %d", len(*c.Text), MaxClipboard))
		return
	case strings.ContainsRune(*c.Text, 0):
		s.fail(w, r, api.Invalid("text", "contains a NUL byte"))
		return
	}
	if err := s.opts.Sandboxes.ClipboardSet(r.Context(), r.PathValue("name"), *c.Text); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// ExecRequest is the body of POST /sandboxes/{name}/exec. The command and
// its arguments are passed to the guest as a list; no shell parses them.
type ExecRequest struct {
	Command        string   `json:"command"`
	Args           []string `json:"args,omitempty"`
	Env            []string `json:"env,omitempty"`
	Stdin          string   `json:"stdin,omitempty"`
	TimeoutSeconds int      `json:"timeoutSeconds,omitempty"`
}

// ExecResponse is a finished command. Output that is not UTF-8 comes base64
// encoded, with the matching *Base64 flag set.
type ExecResponse struct {
	ExitCode     int    `json:"exitCode"`
	Stdout       string `json:"stdout"`
	Stderr       string `json:"stderr"`
	StdoutBase64 bool   `json:"stdoutBase64,omitempty"`
	StderrBase64 bool   `json:"stderrBase64,omitempty"`
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req ExecRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		s.failBody(w, r, err)
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		s.fail(w, r, api.Invalid("command", "required"))
		return
	}
	for i, e := range req.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			s.fail(w, r, api.Invalid(fmt.Sprintf("env[%d]", i), "%q is not NAME=value", e))
			return
		}
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > 3600 {
		s.fail(w, r, api.Invalid("timeoutSeconds", "%d is out of range 0..3600", req.TimeoutSeconds))
		return
	}
	timeout := 5 * time.Minute
	if req.TimeoutSeconds > 0 {
		timeout = time.Duration(req.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	res, err := s.opts.Sandboxes.Exec(ctx, r.PathValue("name"), backend.ExecRequest{Path: req.Command, Args: req.Args, Env: req.Env, Stdin: []byte(req.Stdin)})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := ExecResponse{ExitCode: res.ExitCode}
	out.Stdout, out.StdoutBase64 = textOrBase64(res.Stdout)
	out.Stderr, out.StderrBase64 = textOrBase64(res.Stderr)
	writeJSON(w, http.StatusOK, out)
}

// ForkRequest asks for Count copies of a sandbox as it is now.
type ForkRequest struct {
	Count int `json:"count"`
}

// ForkResponse names the template the forks clone from and the forks.
type ForkResponse struct {
	Template  string   `json:"template"`
	Sandboxes []string `json:"sandboxes"`
}

// MaxForks bounds a fork's count.
const MaxForks = 100

// LabelForkOf labels a fork, and its template, with the sandbox it was
// forked from.
const LabelForkOf = api.LabelForkOf

// fork makes count sandboxes of the sandbox as it is now: a snapshot
// (as the snapshot route takes) to a template of its own,
// NAME-fork-NONCE, and count sandboxes of it, NAME-fork-NONCE-1..count,
// with the source's spec (less its startup commands and volumes, whose
// work the state already holds) and labels (less pool: a fork is no
// pool's). The forks run on the source's node; 201 once they are created,
// before they run. A count that does not fit the node's memory now is
// refused (503) before anything is captured.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var req ForkRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		s.failBody(w, r, err)
		return
	}
	if req.Count < 1 || req.Count > MaxForks {
		s.fail(w, r, api.Invalid("count", "%d is out of range 1..%d", req.Count, MaxForks))
		return
	}
	c, ok := s.opts.Sandboxes.(Capturer)
	if !ok {
		writeError(w, http.StatusNotImplemented, fmt.Errorf("forks of sandboxes are not available on this server"))
		return
	}
	ctx, name := r.Context(), r.PathValue("name")
	o, err := s.opts.Store.Get(ctx, api.KindSandbox, name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	src := o.(*api.Sandbox)
	if err := s.forksFit(ctx, src, req.Count); err != nil {
		s.fail(w, r, err)
		return
	}
	tplName := forkName(name, strconv.FormatInt(time.Now().UnixMilli(), 36), len(strconv.Itoa(req.Count))+1)
	t, err := s.capturedTemplate(ctx, name, tplName)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if t.Metadata.Labels == nil {
		t.Metadata.Labels = map[string]string{}
	}
	t.Metadata.Labels[LabelForkOf] = name
	if _, err := c.Capture(ctx, name, tplName); err != nil {
		s.fail(w, r, err)
		return
	}
	if _, err := s.opts.Store.Create(ctx, t); err != nil {
		s.fail(w, r, err)
		return
	}
	out := ForkResponse{Template: tplName}
	for i := 1; i <= req.Count; i++ {
		f := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		f.Metadata.Name = fmt.Sprintf("%s-%d", tplName, i)
		f.Metadata.Labels = maps.Clone(src.Metadata.Labels)
		if f.Metadata.Labels == nil {
			f.Metadata.Labels = map[string]string{}
		}
		delete(f.Metadata.Labels, "pool")
		f.Metadata.Labels[LabelForkOf] = name
		f.Spec = *src.Spec.DeepCopy()
		f.Spec.TemplateRef = tplName
		f.Spec.Resources.MemoryMB, f.Spec.Display.Resolution = t.Spec.Resources.MemoryMB, t.Spec.Display.Resolution
		f.Spec.Startup, f.Spec.Volumes = nil, nil
		if err := s.admit(f); err != nil {
			s.fail(w, r, err)
			return
		}
		if _, err := s.opts.Store.Create(ctx, f); err != nil {
			s.fail(w, r, fmt.Errorf("fork %d of %d (the ones before were created): %w", i, req.Count, err))
			return
		}
		out.Sandboxes = append(out.Sandboxes, f.Metadata.Name)
	}
	writeJSON(w, http.StatusCreated, out)
}

// forkName is NAME-fork-NONCE, cut to leave room for a suffix of n
// characters within a name's bound.
func forkName(name, nonce string, n int) string {
	suffix := "-fork-" + nonce
	if room := api.MaxNameLength - len(suffix) - n; len(name) > room {
		name = strings.TrimRight(name[:room], "-")
	}
	return name + suffix
}

// forksFit refuses count forks of sb that its node's memory does not hold
// now (as its status last counted the clones of sb's template).
func (s *Server) forksFit(ctx context.Context, sb *api.Sandbox, count int) error {
	if sb.Status.Node == "" {
		return fmt.Errorf("sandbox %s is on no node yet: %w", sb.Metadata.Name, api.ErrConflict)
	}
	o, err := s.opts.Store.Get(ctx, api.KindNode, sb.Status.Node)
	if err != nil {
		return nil // no record to judge by: the node's admission decides
	}
	n := o.(*api.Node)
	tpl := sb.Status.Template
	if tpl == "" {
		tpl = sb.Spec.TemplateRef
	}
	for _, t := range n.Status.Templates {
		if t.Name == tpl && count > t.Fit {
			return fmt.Errorf("%d forks of sandbox %s do not fit on node %s now: %d more desktops of template %s fit (%d MiB free, about %d MiB each): %w",
				count, sb.Metadata.Name, n.Metadata.Name, t.Fit, tpl, n.Status.Memory.FreeMB, max(t.CloneMB, 1), api.ErrUnavailable)
		}
	}
	return nil
}

// snapshotReadyWait bounds how long the snapshot route waits for the new
// template's node to find its snapshot and call it Ready.
const snapshotReadyWait = 30 * time.Second

// snapshot makes a template of the sandbox as it is now (hvkube
// snapshot): the sandbox's node captures it, then the template is
// created with spec.source naming the sandbox and that node, its spec
// the sandbox's template's at the sandbox's memory and resolution. 201
// with the template once its node calls it Ready (or after
// snapshotReadyWait, as it is).
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	var req SnapshotRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		s.failBody(w, r, err)
		return
	}
	if req.Template == "" {
		s.fail(w, r, api.Invalid("template", "required: the name of the template to make"))
		return
	}
	if err := api.ValidateName("template", req.Template); err != nil {
		s.fail(w, r, err)
		return
	}
	c, ok := s.opts.Sandboxes.(Capturer)
	if !ok {
		writeError(w, http.StatusNotImplemented, fmt.Errorf("snapshots of sandboxes are not available on this server"))
		return
	}
	ctx, name := r.Context(), r.PathValue("name")
	t, err := s.capturedTemplate(ctx, name, req.Template)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if _, err := c.Capture(ctx, name, req.Template); err != nil {
		s.fail(w, r, err)
		return
	}
	o, err := s.opts.Store.Create(ctx, t)
	if err != nil {
		// The node drops a snapshot no template names after a while.
		s.fail(w, r, err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, snapshotReadyWait)
	defer cancel()
	for o.(*api.Template).Status.Phase != api.TemplateReady && o.(*api.Template).Status.Phase != api.TemplateFailed {
		select {
		case <-wctx.Done():
			writeJSON(w, http.StatusCreated, o)
			return
		case <-time.After(100 * time.Millisecond):
		}
		if got, err := s.opts.Store.Get(ctx, api.KindTemplate, req.Template); err == nil {
			o = got
		}
	}
	writeJSON(w, http.StatusCreated, o)
}

// capturedTemplate is the Template a snapshot of sandbox makes, named
// name, checked before anything is captured.
func (s *Server) capturedTemplate(ctx context.Context, sandbox, name string) (*api.Template, error) {
	o, err := s.opts.Store.Get(ctx, api.KindSandbox, sandbox)
	if err != nil {
		return nil, err
	}
	sb := o.(*api.Sandbox)
	if sb.Status.Node == "" {
		return nil, fmt.Errorf("sandbox %s is on no node yet: %w", sandbox, api.ErrConflict)
	}
	srcName := sb.Status.Template
	if srcName == "" {
		srcName = sb.Spec.TemplateRef
	}
	o, err = s.opts.Store.Get(ctx, api.KindTemplate, srcName)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s's template %s: %w", sandbox, srcName, err)
	}
	src := o.(*api.Template)
	if _, err := s.opts.Store.Get(ctx, api.KindTemplate, name); err == nil {
		return nil, fmt.Errorf("template %s exists already: %w", name, api.ErrConflict)
	} else if !errors.Is(err, api.ErrNotFound) {
		return nil, err
	}
	t := &api.Template{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindTemplate}}
	t.Metadata.Name = name
	if len(src.Metadata.Labels) > 0 {
		t.Metadata.Labels = maps.Clone(src.Metadata.Labels)
	}
	t.Spec = *src.Spec.DeepCopy()
	if sb.Spec.Resources.MemoryMB > 0 {
		t.Spec.Resources.MemoryMB = sb.Spec.Resources.MemoryMB
	}
	if res := sb.Status.Resolution; res != "" {
		t.Spec.Display.Resolution = res
	} else if res := sb.Spec.Display.Resolution; res != "" {
		t.Spec.Display.Resolution = res
	}
	t.Spec.Source = &api.TemplateSource{Sandbox: sandbox, Node: sb.Status.Node}
	if err := s.admit(t); err != nil {
		return nil, err
	}
	return t, nil
}

func textOrBase64(b []byte) (string, bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	return base64.StdEncoding.EncodeToString(b), true
}

func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	rc, err := s.opts.Sandboxes.Logs(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.Copy(w, rc)
}

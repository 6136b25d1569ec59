package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// Sandboxes runs operations on live sandboxes. The server calls it for the
// sandbox subresources; it is implemented over a backend by the controller
// manager.
type Sandboxes interface {
	// Pause, Resume, Save and Reset change a sandbox's run state and block
	// until the change is done.
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) error
	Save(ctx context.Context, name string) error
	Reset(ctx context.Context, name string) error
	Screenshot(ctx context.Context, name string, opts backend.ScreenshotOptions) ([]byte, string, error)
	Input(ctx context.Context, name string, a api.Action) (backend.InputResult, error)
	Exec(ctx context.Context, name string, req backend.ExecRequest) (backend.ExecResult, error)
	ClipboardGet(ctx context.Context, name string) (string, error)
	ClipboardSet(ctx context.Context, name, text string) error
	Logs(ctx context.Context, name string) (io.ReadCloser, error)
}

func (s *Server) sandboxRoutes() {
	m := s.mux
	for _, op := range []string{"pause", "resume", "save", "reset"} {
		m.HandleFunc("POST /api/v1/sandboxes/{name}/"+op, s.withSandboxes(s.sandboxOp(op)))
	}
	m.HandleFunc("GET /api/v1/sandboxes/{name}/screen", s.withSandboxes(s.timed(s.screen, func(r *http.Request, d time.Duration) {
		s.opts.Metrics.ObserveScreenshot(r.URL.Query().Get("format"), d)
	})))
	m.HandleFunc("POST /api/v1/sandboxes/{name}/input", s.withSandboxes(s.timed(s.input, func(_ *http.Request, d time.Duration) { s.opts.Metrics.ObserveInput(d) })))
	m.HandleFunc("GET /api/v1/sandboxes/{name}/clipboard", s.withSandboxes(s.clipboardGet))
	m.HandleFunc("POST /api/v1/sandboxes/{name}/clipboard", s.withSandboxes(s.clipboardSet))
	m.HandleFunc("POST /api/v1/sandboxes/{name}/exec", s.withSandboxes(s.exec))
	m.HandleFunc("GET /api/v1/sandboxes/{name}/logs", s.withSandboxes(s.sandboxLogs))
	m.HandleFunc("GET /api/v1/sandboxes/{name}/display", s.withSandboxes(s.notYet("the live display (VNC over WebSocket)")))
}

// withSandboxes answers 404 for unknown sandboxes and 501 when the server
// has no backend, before the handler runs.
func (s *Server) withSandboxes(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.opts.Store.Get(r.Context(), api.KindSandbox, r.PathValue("name")); err != nil {
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

func (s *Server) notYet(what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotImplemented, fmt.Errorf("%s is not served yet", what))
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

// screen answers GET /sandboxes/{name}/screen[?format=png|jpeg][&quality=N][&width=W][&height=H].
func (s *Server) screen(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	opts := backend.ScreenshotOptions{Format: q.Get("format")}
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
	img, ctype, err := s.opts.Sandboxes.Screenshot(r.Context(), r.PathValue("name"), opts)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(img)))
	w.Header().Set("Cache-Control", "no-store")
	w.Write(img)
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

// input answers POST /sandboxes/{name}/input with one computer-use action,
// e.g. {"action": "left_click", "coordinate": [100, 200]}.
func (s *Server) input(w http.ResponseWriter, r *http.Request) {
	var a api.Action
	if err := s.decodeStrict(w, r, &a); err != nil {
		s.failBody(w, r, err)
		return
	}
	switch a.Action {
	case "screenshot", "zoom":
		s.fail(w, r, api.Invalid("action", "%s is served by GET /api/v1/sandboxes/%s/screen", a.Action, r.PathValue("name")))
		return
	case "wait":
		if err := api.ValidateAction("", a, 0, 0, false); err != nil {
			s.fail(w, r, err)
			return
		}
		select {
		case <-r.Context().Done():
		case <-time.After(time.Duration(a.Duration * float64(time.Second))):
		}
		writeJSON(w, http.StatusOK, InputResponse{OK: true})
		return
	}
	res, err := s.opts.Sandboxes.Input(r.Context(), r.PathValue("name"), a)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := InputResponse{OK: true}
	if a.Action == "cursor_position" {
		out.Coordinate = []int{res.X, res.Y}
	}
	writeJSON(w, http.StatusOK, out)
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

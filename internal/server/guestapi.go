package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/guest"
	"github.com/hvkube/hvkube/internal/osworld"
)

// The guest's files, its accessibility tree and OSWorld's guest API, all
// over the guest agent (Sandboxes.Exec):
//
//	GET  /api/v1/sandboxes/{name}/files?path=/abs/path
//	PUT  /api/v1/sandboxes/{name}/files?path=/abs/path   (the bytes as the body)
//	GET  /api/v1/sandboxes/{name}/accessibility
//	ANY  /api/v1/sandboxes/{name}/osworld/{route...}
func (s *Server) guestRoutes() {
	m := s.mux
	m.HandleFunc("GET /api/v1/sandboxes/{name}/files", s.withSandboxes(s.fileGet))
	m.HandleFunc("PUT /api/v1/sandboxes/{name}/files", s.withSandboxes(s.filePut))
	m.HandleFunc("GET /api/v1/sandboxes/{name}/accessibility", s.withSandboxes(s.accessibility))
	m.HandleFunc("/api/v1/sandboxes/{name}/osworld/{route...}", s.withSandboxes(s.osworld))
}

// sandboxGuest is one sandbox of Sandboxes as osworld.Guest (and
// guest.Runner).
type sandboxGuest struct {
	s    Sandboxes
	name string
}

func (g sandboxGuest) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	return g.s.Exec(ctx, g.name, req)
}

func (g sandboxGuest) Screenshot(ctx context.Context) ([]byte, error) {
	img, typ, err := g.s.Screenshot(ctx, g.name, backend.ScreenshotOptions{})
	if err == nil && typ != "image/png" {
		err = fmt.Errorf("the backend's screenshot is %s, not a PNG", typ)
	}
	return img, err
}

// desktopOf is the guest of sandbox name as its template describes it.
func (s *Server) desktopOf(ctx context.Context, name string) (api.GuestInfo, error) {
	o, err := s.opts.Store.Get(ctx, api.KindSandbox, name)
	if err != nil {
		return api.GuestInfo{}, err
	}
	sb := o.(*api.Sandbox)
	tpl := sb.Status.Template
	if tpl == "" {
		tpl = sb.Spec.TemplateRef
	}
	info := api.GuestInfo{OS: api.DefaultGuestOS, User: api.DefaultGuestUser}
	if t, err := s.opts.Store.Get(ctx, api.KindTemplate, tpl); err == nil {
		g := t.(*api.Template).Spec.Guest
		if g.OS != "" {
			info.OS = g.OS
		}
		if g.User != "" {
			info.User = g.User
		}
	}
	return info, nil
}

// filePath reads and checks the path query parameter.
func filePath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	return p, guest.CheckPath("path", p)
}

// linuxOnly refuses what runs Linux programs on a Windows guest.
func linuxOnly(info api.GuestInfo, what string) error {
	if info.OS != "linux" {
		return fmt.Errorf("%s is served for Linux guests only (this sandbox's guest is %s): %w", what, info.OS, api.ErrUnsupported)
	}
	return nil
}

func (s *Server) fileGet(w http.ResponseWriter, r *http.Request) {
	p, err := filePath(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	name := r.PathValue("name")
	info, err := s.desktopOf(r.Context(), name)
	if err == nil {
		err = linuxOnly(info, "reading guest files")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	data, err := guest.ReadFile(ctx, sandboxGuest{s.opts.Sandboxes, name}, "", p, guest.MaxFile)
	if errors.Is(err, guest.ErrTooLarge) {
		err = &httpError{http.StatusRequestEntityTooLarge, err}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data)
}

// FileWritten answers PUT .../files.
type FileWritten struct {
	Path string `json:"path"`
	Size int    `json:"size"`
}

func (s *Server) filePut(w http.ResponseWriter, r *http.Request) {
	p, err := filePath(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	data, err := readGuestBody(w, r, guest.MaxFile)
	if err != nil {
		s.failBody(w, r, err)
		return
	}
	name := r.PathValue("name")
	info, err := s.desktopOf(r.Context(), name)
	if err == nil {
		err = linuxOnly(info, "writing guest files")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	if err := guest.WriteFile(ctx, sandboxGuest{s.opts.Sandboxes, name}, guest.OwnerOf(info.User, p), p, data); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, FileWritten{Path: p, Size: len(data)})
}

// readGuestBody reads a body of at most max bytes (more than the API's
// JSON bodies may be) and lifts the body's deadline, as readBody does.
func readGuestBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Errorf("request body is larger than %d bytes", mbe.Limit)}
	}
	return b, err
}

func (s *Server) accessibility(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	info, err := s.desktopOf(r.Context(), name)
	if err == nil {
		err = linuxOnly(info, "the accessibility tree")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	xml, err := osworld.Accessibility(r.Context(), sandboxGuest{s.opts.Sandboxes, name})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/xml; charset=utf-8")
	io.WriteString(w, xml)
}

// osworld serves OSWorld's guest API for the sandbox (internal/osworld).
func (s *Server) osworld(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	info, err := s.desktopOf(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	body, err := readGuestBody(w, r, osworld.MaxBody)
	if err != nil {
		s.failBody(w, r, err)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	osworld.Serve(w, r, sandboxGuest{s.opts.Sandboxes, name}, osworld.Desktop{User: info.User, OS: info.OS, Name: name, Recordings: &s.recordings, Holder: s.holderOf(name)}, "/"+r.PathValue("route"))
}

// holderOf says who holds sandbox name now, and since when: the agent it
// runs (its current attempt; "" for nobody) and the VM's process, which a
// reset replaces (as OSWorld's revert ends what ran in the VM).
func (s *Server) holderOf(name string) osworld.Holder {
	return func(ctx context.Context) (string, error) {
		o, err := s.opts.Store.Get(ctx, api.KindSandbox, name)
		if err != nil {
			return "", err
		}
		sb := o.(*api.Sandbox)
		vm := fmt.Sprintf("@%s/%d", sb.Status.BackendID, sb.Status.PID)
		if sb.Status.CurrentAgent == "" {
			return vm, nil
		}
		// The agent's UID and attempt: the same name again is another.
		a, err := s.opts.Store.Get(ctx, api.KindAgent, sb.Status.CurrentAgent)
		if errors.Is(err, api.ErrNotFound) {
			return "gone:" + sb.Status.CurrentAgent + vm, nil
		}
		if err != nil {
			return "", err
		}
		ag := a.(*api.Agent)
		return fmt.Sprintf("%s/%s/%d%s", ag.Metadata.Name, ag.Metadata.UID, ag.Status.Attempts, vm), nil
	}
}

package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/hvkube/hvkube/internal/api"
)

// Sandboxes runs operations on live sandboxes. The server calls it for the
// sandbox subresources; it is implemented over a backend.
type Sandboxes interface {
	// Pause, Resume, Save and Reset change a sandbox's run state and block
	// until the change is done.
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) error
	Save(ctx context.Context, name string) error
	Reset(ctx context.Context, name string) error
}

func (s *Server) sandboxRoutes() {
	m := s.mux
	for _, op := range []string{"pause", "resume", "save", "reset"} {
		m.HandleFunc("POST /api/v1/sandboxes/{name}/"+op, s.sandboxOp(op))
	}
	for _, route := range []string{
		"GET /api/v1/sandboxes/{name}/screen",
		"GET /api/v1/sandboxes/{name}/display",
		"POST /api/v1/sandboxes/{name}/input",
		"GET /api/v1/sandboxes/{name}/clipboard",
		"POST /api/v1/sandboxes/{name}/clipboard",
		"GET /api/v1/sandboxes/{name}/logs",
		"POST /api/v1/sandboxes/{name}/exec",
	} {
		m.HandleFunc(route, s.needsBackend)
	}
}

func (s *Server) sandboxOp(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if _, err := s.opts.Store.Get(r.Context(), api.KindSandbox, name); err != nil {
			s.fail(w, r, err)
			return
		}
		if s.opts.Sandboxes == nil {
			s.needsBackend(w, r)
			return
		}
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

func (s *Server) needsBackend(w http.ResponseWriter, r *http.Request) {
	if name := r.PathValue("name"); name != "" {
		if _, err := s.opts.Store.Get(r.Context(), api.KindSandbox, name); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeError(w, http.StatusNotImplemented, fmt.Errorf("%s %s needs a VM backend, and this server runs without one (start it with --backend qemu)", r.Method, r.URL.Path))
}

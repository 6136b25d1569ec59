package mcptools_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/mcptools"
)

// TestRemoteOldServer: a server without the questions API is told by its
// status codes (a 404 for the questions of an agent it has), whatever its
// 404 says; a 404 for an agent it does not have stays ErrNotFound.
func TestRemoteOldServer(t *testing.T) {
	for _, tt := range []struct {
		name     string
		hitl404  func(w http.ResponseWriter) // the answer to .../hitl
		hasAgent bool
		want     error
	}{
		{"plain text 404", func(w http.ResponseWriter) { http.Error(w, "404 page not found", http.StatusNotFound) }, true, api.ErrUnsupported},
		{"JSON 404 worded otherwise", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"unknown path /api/v1/agents/a1/hitl"}`)
		}, true, api.ErrUnsupported},
		{"agent missing", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"agent a1 not found"}`)
		}, false, api.ErrNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/api/v1/agents/a1/hitl":
					tt.hitl404(w)
				case "/api/v1/agents/a1":
					if !tt.hasAgent {
						w.WriteHeader(http.StatusNotFound)
						io.WriteString(w, `{"error":"agent a1 not found"}`)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					io.WriteString(w, `{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"a1"},"spec":{"type":"mcp-agent"}}`)
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			c, err := client.New(srv.URL, "")
			if err != nil {
				t.Fatal(err)
			}
			_, err = mcptools.NewRemote(c).AskHuman(context.Background(), "a1", "ok?", time.Second)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if tt.want == api.ErrNotFound && errors.Is(err, api.ErrUnsupported) {
				t.Fatalf("a missing agent read as an old server: %v", err)
			}
		})
	}
}

package server

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/store"
)

// TestAgentFiles serves an agent's attempt files through the server and a
// real node over its data directory: files are served; a directory, a
// missing name and a link out of the attempt are 404; a name with a NUL,
// a control character, invalid UTF-8, a backslash or a . or .. segment is
// 400 naming path. No answer carries the node's own paths.
func TestAgentFiles(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	nd := node.New(node.Options{Store: st, Name: "n1", DataDir: dir})
	srv := httptest.NewServer(New(Options{Store: st, Agents: nd}).Handler())
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	ts := &testServer{Server: srv, st: st}
	runningAgent(t, ts, "job", "desk")
	attempt := filepath.Join(dir, "agents", "job", "1")
	appendFile(t, filepath.Join(attempt, "artifacts", "out.txt"), "hello\n")
	appendFile(t, filepath.Join(attempt, "agent.log"), "log\n")
	appendFile(t, filepath.Join(dir, "secret.txt"), "not the agent's\n")
	links := os.Symlink(filepath.Join(dir, "secret.txt"), filepath.Join(attempt, "artifacts", "leak.txt")) == nil

	tests := []struct {
		name, path string
		code       int
		field      string
	}{
		{"file", "artifacts/out.txt", 200, ""},
		{"log", "agent.log", 200, ""},
		{"directory", "artifacts", 404, ""},
		{"missing", "artifacts/none.txt", 404, ""},
		{"under a file", "agent.log/x", 404, ""},
		{"NUL", "artifacts/out.txt%00.png", 400, "path"},
		{"newline", "artifacts/a%0Ab", 400, "path"},
		{"DEL", "artifacts/a%7Fb", 400, "path"},
		{"invalid UTF-8", "artifacts/%FF%FE", 400, "path"},
		{"backslash", "artifacts%5Cout.txt", 400, "path"},
		{"trailing slash", "artifacts/", 400, "path"},
		{"dot segment", "artifacts/.%2Fout.txt", 400, "path"},
		{"dotdot segment", "artifacts/..%2F..%2F..%2F..%2Fsecret.txt", 400, "path"},
	}
	if links {
		tests = append(tests, struct {
			name, path string
			code       int
			field      string
		}{"link out of the attempt", "artifacts/leak.txt", 404, ""})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := ts.do(t, "GET", "/api/v1/agents/job/files/"+tt.path, "", "")
			if code != tt.code {
				t.Fatalf("status %d, want %d: %s", code, tt.code, body)
			}
			if strings.Contains(string(body), dir) || strings.Contains(string(body), "not the agent's") {
				t.Fatalf("the answer shows the node's files: %s", body)
			}
			if code == 200 {
				if len(body) == 0 {
					t.Fatal("empty file")
				}
				return
			}
			var e struct {
				Error string `json:"error"`
				Field string `json:"field"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
				t.Fatalf("no JSON error: %s", body)
			}
			if e.Field != tt.field {
				t.Fatalf("field %q, want %q: %s", e.Field, tt.field, body)
			}
		})
	}
}

package node

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// TestAgentFile opens an attempt's files by their relative names: a file
// opens; a directory, a missing name, a name under a file and a link out
// of the attempt are ErrNotFound; a name that could not be a file of the
// attempt is ErrInvalid naming path. No error names the node's paths.
func TestAgentFile(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}, Metadata: api.ObjectMeta{Name: "job"},
		Spec: api.AgentSpec{SandboxName: "desk", Type: "mcp-agent"}}
	api.Default(a)
	o, err := st.Create(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	n := New(Options{Store: st, Name: "n1", DataDir: dir})
	if _, err := n.AgentFile(ctx, "job", "agent.log"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("before any attempt: %v, want ErrNotFound", err)
	}
	a = o.(*api.Agent)
	a.Status.Attempts = 1
	if _, err := st.UpdateStatus(ctx, a); err != nil {
		t.Fatal(err)
	}
	attempt := filepath.Join(dir, "agents", "job", "1")
	if err := os.MkdirAll(filepath.Join(attempt, "artifacts", "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(attempt, "artifacts", "out.txt"), []byte("hello"), 0o600)
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("secret"), 0o600)
	links := os.Symlink(filepath.Join(dir, "secret.txt"), filepath.Join(attempt, "artifacts", "leak.txt")) == nil &&
		os.Symlink(filepath.Join("..", "..", ".."), filepath.Join(attempt, "up")) == nil

	f, err := n.AgentFile(ctx, "job", "artifacts/out.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "hello" {
		t.Fatalf("read %q", b)
	}

	tests := []struct {
		rel  string
		want error
	}{
		{"artifacts", api.ErrNotFound},
		{"artifacts/sub", api.ErrNotFound},
		{"artifacts/none.txt", api.ErrNotFound},
		{"artifacts/out.txt/x", api.ErrNotFound},
		{"", api.ErrInvalid},
		{"artifacts/out.txt\x00.png", api.ErrInvalid},
		{"artifacts/a\nb", api.ErrInvalid},
		{"artifacts/a\u0085b", api.ErrInvalid},
		{"artifacts/\xff", api.ErrInvalid},
		{`artifacts\out.txt`, api.ErrInvalid},
		{"/etc/passwd", api.ErrInvalid},
		{"../../secret.txt", api.ErrInvalid},
		{"artifacts/../../../secret.txt", api.ErrInvalid},
		{"artifacts/./out.txt", api.ErrInvalid},
		{"artifacts//out.txt", api.ErrInvalid},
		{".", api.ErrInvalid},
	}
	if links {
		tests = append(tests, struct {
			rel  string
			want error
		}{"artifacts/leak.txt", api.ErrNotFound}, struct {
			rel  string
			want error
		}{"up/secret.txt", api.ErrNotFound})
	}
	for _, tt := range tests {
		f, err := n.AgentFile(ctx, "job", tt.rel)
		if err == nil {
			f.Close()
			t.Errorf("%q: opened", tt.rel)
			continue
		}
		if !errors.Is(err, tt.want) {
			t.Errorf("%q: %v, want %v", tt.rel, err, tt.want)
		}
		if tt.want == api.ErrInvalid && api.FieldOf(err) != "path" {
			t.Errorf("%q: %v names field %q, want path", tt.rel, err, api.FieldOf(err))
		}
		if strings.Contains(err.Error(), dir) {
			t.Errorf("%q: the error names the node's path: %v", tt.rel, err)
		}
	}
}

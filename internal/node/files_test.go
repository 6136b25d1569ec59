package node

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
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

// TestAttemptLogs: an attempt's log is a file beside the attempt's
// directory, which the log alone does not make; AgentFile reads it, and a
// log of the layout before it; a link put in its place is refused; the
// agent's removal removes its logs and its directories, also those a node
// before a restart wrote, and no other agent's.
func TestAttemptLogs(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(t.Context(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := t.Context()
	for _, name := range []string{"job", "job-2", "old"} {
		a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}, Metadata: api.ObjectMeta{Name: name},
			Spec: api.AgentSpec{SandboxName: "desk", Type: "mcp-agent"}}
		api.Default(a)
		o, err := st.Create(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		a = o.(*api.Agent)
		a.Status.Attempts = 2
		if _, err := st.UpdateStatus(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	agents := filepath.Join(dir, "agents")
	write := func(n *Node, agent string, attempt int, line string) {
		lg := n.newRunLog(agent, attempt)
		lg.printf("%s", line)
		if lg.f == nil {
			t.Fatalf("no log for %s attempt %d", agent, attempt)
		}
		lg.Close()
	}
	read := func(n *Node, agent string) (string, error) {
		f, err := n.AgentFile(ctx, agent, "agent.log")
		if err != nil {
			return "", err
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		return string(b), err
	}

	n := New(Options{Store: st, Name: "n1", DataDir: dir})
	write(n, "job", 1, "first attempt")
	write(n, "job", 2, "second attempt")
	write(n, "job-2", 2, "another agent")
	if _, err := os.Stat(filepath.Join(agents, "job")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a log alone made the attempt's directory: %v", err)
	}
	if got, err := read(n, "job"); err != nil || !strings.Contains(got, "second attempt") || strings.Contains(got, "first attempt") {
		t.Errorf("the latest attempt's log: %q, %v", got, err)
	}
	old := filepath.Join(agents, "old", "2")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(old, "agent.log"), []byte("older layout\n"), 0o600)
	if got, err := read(n, "old"); err != nil || got != "older layout\n" {
		t.Errorf("a log of the older layout: %q, %v", got, err)
	}
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("secret"), 0o600)
	if err := os.Symlink(filepath.Join(dir, "secret.txt"), filepath.Join(agents, "old.2.log")); err == nil {
		if got, err := read(n, "old"); !errors.Is(err, api.ErrNotFound) || strings.Contains(got, "secret") {
			t.Errorf("a link in place of the log: %q, %v; want ErrNotFound", got, err)
		}
	}

	// A node started again knows only what the directory holds.
	n = New(Options{Store: st, Name: "n1", DataDir: dir})
	os.MkdirAll(filepath.Join(agents, "job", "2", "artifacts"), 0o700)
	n.removeAgentFiles("job")
	left, _ := os.ReadDir(agents)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if want := []string{"job-2.2.log", "old", "old.2.log"}; !slices.Equal(names, want) {
		t.Errorf("after job's removal the agents directory holds %v, want %v", names, want)
	}
	write(n, "job-2", 3, "a third attempt")
	n.removeAgentFiles("job-2")
	if _, err := os.Stat(filepath.Join(agents, "job-2.3.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a log written after the scan outlived its agent: %v", err)
	}
}

func TestParseAttemptLog(t *testing.T) {
	tests := []struct {
		name    string
		agent   string
		attempt int
		ok      bool
	}{
		{"job.1.log", "job", 1, true},
		{"a-b-c.12.log", "a-b-c", 12, true},
		{"job.0.log", "", 0, false},
		{"job.01.log", "", 0, false},
		{"job.-1.log", "", 0, false},
		{"job.x.log", "", 0, false},
		{".1.log", "", 0, false},
		{"job.1", "", 0, false},
		{"job.log", "", 0, false},
		{"job", "", 0, false},
	}
	for _, tt := range tests {
		agent, attempt, ok := parseAttemptLog(tt.name)
		if agent != tt.agent || attempt != tt.attempt || ok != tt.ok {
			t.Errorf("%q: %q %d %v, want %q %d %v", tt.name, agent, attempt, ok, tt.agent, tt.attempt, tt.ok)
		}
	}
}

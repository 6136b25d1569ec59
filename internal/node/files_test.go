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

// TestAttemptLogs: an attempt's log goes to the node's journal and makes
// no directory or file of its own; AgentFile reads the latest attempt's,
// and logs of the two layouts before the journal; a link put in place of
// an old log is refused; the agent's removal removes its logs of every
// layout and its directories, also those a node before a restart wrote,
// and no other agent's; a node started again reads the journal.
func TestAttemptLogs(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(t.Context(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := t.Context()
	for _, name := range []string{"job", "job-2", "old", "older"} {
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
		o, err := st.Get(ctx, api.KindAgent, agent)
		if err != nil {
			t.Fatal(err)
		}
		lg := n.newRunLog(o.(*api.Agent), attempt)
		lg.printf("%s", line)
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
	list := func() []string {
		left, _ := os.ReadDir(agents)
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		return names
	}

	n := New(Options{Store: st, Name: "n1", DataDir: dir})
	write(n, "job", 1, "first attempt")
	write(n, "job", 2, "second attempt")
	write(n, "job-2", 2, "another agent")
	if got, want := list(), []string{journalName(0)}; !slices.Equal(got, want) {
		t.Errorf("three logs made %v in the agents directory, want %v", got, want)
	}
	if got, err := read(n, "job"); err != nil || !strings.Contains(got, "second attempt") || strings.Contains(got, "first attempt") {
		t.Errorf("the latest attempt's log: %q, %v", got, err)
	}
	// The two layouts before the journal.
	os.WriteFile(filepath.Join(agents, "old.2.log"), []byte("a file of its own\n"), 0o600)
	if got, err := read(n, "old"); err != nil || got != "a file of its own\n" {
		t.Errorf("a log of the layout before the journal: %q, %v", got, err)
	}
	older := filepath.Join(agents, "older", "2")
	if err := os.MkdirAll(older, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(older, "agent.log"), []byte("older layout\n"), 0o600)
	if got, err := read(n, "older"); err != nil || got != "older layout\n" {
		t.Errorf("a log of the older layout: %q, %v", got, err)
	}
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("secret"), 0o600)
	os.Remove(filepath.Join(agents, "old.2.log"))
	if err := os.Symlink(filepath.Join(dir, "secret.txt"), filepath.Join(agents, "old.2.log")); err == nil {
		if got, err := read(n, "old"); !errors.Is(err, api.ErrNotFound) || strings.Contains(got, "secret") {
			t.Errorf("a link in place of the log: %q, %v; want ErrNotFound", got, err)
		}
	}
	os.WriteFile(filepath.Join(agents, "job.1.log"), []byte("before the journal\n"), 0o600)

	// A node started again reads the journal; it appends to a segment of
	// its own.
	n.journal.close()
	n = New(Options{Store: st, Name: "n1", DataDir: dir})
	if got, err := read(n, "job-2"); err != nil || got == "" || !strings.HasSuffix(got, " another agent\n") {
		t.Errorf("job-2's log, read by the node started again: %q, %v", got, err)
	}
	os.MkdirAll(filepath.Join(agents, "job", "2", "artifacts"), 0o700)
	n.removeAgentFiles("job")
	if got, want := list(), []string{journalName(0), "old.2.log", "older"}; !slices.Equal(got, want) {
		t.Errorf("after job's removal the agents directory holds %v, want %v", got, want)
	}
	if _, err := read(n, "job"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("job's log after its removal: %v, want ErrNotFound", err)
	}
	write(n, "job-2", 3, "a third attempt")
	n.removeAgentFiles("job-2")
	if got, want := list(), []string{journalName(1), "old.2.log", "older"}; !slices.Equal(got, want) {
		t.Errorf("after job-2's removal the agents directory holds %v, want %v: a segment of no agent's records is removed, but for the one appended to", got, want)
	}
	n.removeAgentFiles("older")
	n.removeAgentFiles("old")
	n.journal.close()
	n = New(Options{Store: st, Name: "n1", DataDir: dir})
	n.journal.load()
	if got := list(); len(got) != 0 {
		t.Errorf("after every agent's removal and a restart the agents directory holds %v", got)
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

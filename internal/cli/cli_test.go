package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

var update = flag.Bool("update", false, "rewrite golden files")

func init() { time.Local = time.UTC } // describe prints local times

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// startServer runs a real API server whose store clock is fixed at t0.
func startServer(t *testing.T) string {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	// The agent controller runs, as in a server: an agent's deletion
	// waits for it. (Pools are left alone, so that the tables the tests
	// compare do not fill with sandboxes of random names.)
	mgr := reconcile.NewManager(st, nil, 0)
	controller.NewAgents(mgr, st, slog.Default(), func() time.Time { return t0 })
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A key: the server seals Secrets with one derived from it.
	key := authtoken.Key(strings.Repeat("k", 32))
	srv := httptest.NewServer(server.New(server.Options{Store: st, Version: "test", ScopedKey: key}).Handler())
	t.Cleanup(func() {
		srv.Close()
		mgr.Stop()
		st.Close()
	})
	return srv.URL
}

// run executes the CLI as a user would, five minutes after t0.
func run(t *testing.T, url string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(context.Background(), Options{
		Version: "test",
		Now:     func() time.Time { return t0.Add(5*time.Minute + 30*time.Second) },
		Stdin:   strings.NewReader(""),
		Stdout:  &out,
		Stderr:  &errOut,
	}, append([]string{"--server", url}, args...))
	return out.String(), errOut.String(), code
}

var uidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func golden(t *testing.T, name, got string) {
	t.Helper()
	got = uidRE.ReplaceAllString(got, "UID")
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// TestDoneWhen walks the session a new user runs after make run.
func TestDoneWhen(t *testing.T) {
	url := startServer(t)
	steps := []struct {
		golden string
		args   []string
	}{
		{"apply", []string{"apply", "-f", "../../examples/"}},
		{"apply-again", []string{"apply", "-f", "../../examples/"}},
		{"get-pools", []string{"get", "pools"}},
		{"get-agents-yaml", []string{"get", "agents", "-o", "yaml"}},
		{"scale", []string{"scale", "browser-workers", "--replicas", "3"}},
		{"get-pools-wide", []string{"get", "sandboxpools", "-o", "wide"}},
		{"get-agents", []string{"get", "agents"}},
		{"get-sandboxes", []string{"get", "sb"}},
		{"get-templates", []string{"get", "tpl"}},
		{"get-displayservices", []string{"get", "ds"}},
		{"describe-pool", []string{"describe", "pool", "browser-workers"}},
		{"delete-agent", []string{"delete", "agent", "book-flight-task-123"}},
		{"get-events", []string{"get", "events"}},
	}
	for _, s := range steps {
		out, errOut, code := run(t, url, s.args...)
		if code != 0 {
			t.Fatalf("hvkube %s: exit %d: %s", strings.Join(s.args, " "), code, errOut)
		}
		golden(t, s.golden, out)
	}
}

func TestErrors(t *testing.T) {
	url := startServer(t)
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"get", "widgets"}, `unknown resource type "widgets"`},
		{[]string{"get", "agent", "nope"}, `agent "nope" not found`},
		{[]string{"get", "pools", "-o", "xml"}, `unknown output format "xml"`},
		{[]string{"get", "pools", "-l", "a b c"}, "labelSelector"},
		{[]string{"delete", "agent", "nope"}, `agent "nope" not found`},
		{[]string{"scale", "nope", "--replicas", "2"}, `sandboxpool "nope" not found`},
		{[]string{"scale", "agent", "x", "--replicas", "2"}, "only sandboxpools can be scaled"},
		{[]string{"scale", "nope"}, "--replicas"},
		{[]string{"apply", "-f", "testdata/does-not-exist.yaml"}, "no such file"},
		{[]string{"apply"}, "apply needs -f"},
	}
	for _, tt := range tests {
		out, errOut, code := run(t, url, tt.args...)
		if code != 1 {
			t.Errorf("hvkube %v: exit %d, want 1", tt.args, code)
		}
		if !strings.Contains(errOut, tt.wantErr) || !strings.HasPrefix(errOut, "error: ") {
			t.Errorf("hvkube %v: stderr %q, want it to contain %q", tt.args, errOut, tt.wantErr)
		}
		if out != "" {
			t.Errorf("hvkube %v: stdout %q, want nothing", tt.args, out)
		}
	}
}

func TestApplyBadFileChangesNothing(t *testing.T) {
	url := startServer(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("apiVersion: hvkube/v1\nkind: Agent\nmetadata: {name: a}\nspec: {sandboxName: x}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("apiVersion: hvkube/v1\nkind: Agent\nmetadata: {name: b}\nspec: {sandboxNmae: x}\n"), 0o644)
	_, errOut, code := run(t, url, "apply", "-f", dir)
	if code != 1 || !strings.Contains(errOut, "spec.sandboxNmae: unknown field") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	out, _, _ := run(t, url, "get", "agents", "-o", "name")
	if out != "" {
		t.Fatalf("a decode error still applied objects: %q", out)
	}
}

func TestHumanDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {90 * time.Second, "90s"}, {150 * time.Second, "2m30s"}, {45 * time.Minute, "45m"},
		{4*time.Hour + 20*time.Minute, "4h20m"}, {30 * time.Hour, "30h"}, {3*24*time.Hour + 5*time.Hour, "3d5h"},
		{40 * 24 * time.Hour, "40d"}, {3 * 365 * 24 * time.Hour, "3y"},
	}
	for _, tt := range tests {
		if got := humanDuration(tt.d); got != tt.want {
			t.Errorf("humanDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// TestGetFollowsPages: get lists every object although the server hands
// them out a page at a time.
func TestGetFollowsPages(t *testing.T) {
	url := startServer(t)
	var sb strings.Builder
	const n = 1234
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "---\napiVersion: hvkube/v1\nkind: Agent\nmetadata: {name: job-%04d}\nspec: {sandboxName: desk}\n", i)
	}
	f := filepath.Join(t.TempDir(), "agents.yaml")
	os.WriteFile(f, []byte(sb.String()), 0o600)
	if _, stderr, code := run(t, url, "apply", "-f", f); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	out, stderr, code := run(t, url, "get", "agents", "-o", "name")
	if code != 0 {
		t.Fatalf("get: %s", stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != n || lines[0] != "agent/job-0000" || lines[n-1] != fmt.Sprintf("agent/job-%04d", n-1) {
		t.Fatalf("get listed %d agents (%q … %q), want %d", len(lines), lines[0], lines[len(lines)-1], n)
	}
}

func TestKindArgs(t *testing.T) {
	type group struct {
		kind  string
		names []string
	}
	tests := []struct {
		args    []string
		want    []group
		wantErr string
	}{
		{args: []string{"agents"}, want: []group{{"Agent", nil}}},
		{args: []string{"sb", "a", "b"}, want: []group{{"Sandbox", []string{"a", "b"}}}},
		{args: []string{"pools,agents"}, want: []group{{"SandboxPool", nil}, {"Agent", nil}}},
		{args: []string{"pool,sandbox", "x"}, want: []group{{"SandboxPool", []string{"x"}}, {"Sandbox", []string{"x"}}}},
		{args: []string{"sb/a", "agent/b", "sandbox/c"}, want: []group{{"Sandbox", []string{"a", "c"}}, {"Agent", []string{"b"}}}},
		{args: []string{"agents,widgets"}, wantErr: `unknown resource type "widgets"`},
		{args: []string{"agents,"}, wantErr: `unknown resource type ""`},
		{args: []string{"sb/a", "b"}, wantErr: `"b": when one argument is KIND/NAME, every argument must be`},
		{args: []string{"sb/"}, wantErr: "every argument must be"},
		{args: []string{"sb", "agent/b"}, wantErr: `"agent/b": give either KIND NAME… or KIND/NAME…`},
	}
	for _, tt := range tests {
		got, err := kindArgs(tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("kindArgs(%q) = %v, want the error %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("kindArgs(%q): %v", tt.args, err)
			continue
		}
		var gs []group
		for _, g := range got {
			gs = append(gs, group{g.kind.Kind, g.names})
		}
		if fmt.Sprint(gs) != fmt.Sprint(tt.want) {
			t.Errorf("kindArgs(%q) = %v, want %v", tt.args, gs, tt.want)
		}
	}
}

// TestGetSeveralKinds: kubectl's habits for several kinds at once, and
// the mistakes refused before anything is read or deleted.
func TestGetSeveralKinds(t *testing.T) {
	url := startServer(t)
	if _, errOut, code := run(t, url, "apply", "-f", "../../examples/"); code != 0 {
		t.Fatal(errOut)
	}
	out, errOut, code := run(t, url, "get", "pools,agents")
	if code != 0 {
		t.Fatal(errOut)
	}
	tables := strings.Split(out, "\n\n")
	if len(tables) != 2 || !strings.Contains(tables[0], "browser-workers") || !strings.Contains(tables[1], "book-flight-task-123") {
		t.Fatalf("get pools,agents printed:\n%s", out)
	}
	out, errOut, code = run(t, url, "get", "pool/browser-workers", "agent/book-flight-task-123", "-o", "name")
	if code != 0 || out != "sandboxpool/browser-workers\nagent/book-flight-task-123\n" {
		t.Fatalf("get KIND/NAME KIND/NAME -o name: exit %d, %q, %s", code, out, errOut)
	}
	out, _, code = run(t, url, "get", "pools,agents", "-o", "json")
	if code != 0 || !strings.Contains(out, `"kind": "List"`) || !strings.Contains(out, `"kind": "SandboxPool"`) || !strings.Contains(out, `"kind": "Agent"`) {
		t.Fatalf("get pools,agents -o json: exit %d:\n%s", code, out)
	}
	out, errOut, code = run(t, url, "describe", "pool/browser-workers", "agent/book-flight-task-123")
	if code != 0 || !strings.Contains(out, "Kind:             SandboxPool") || !strings.Contains(out, "Kind:             Agent") {
		t.Fatalf("describe of two kinds: exit %d, %s\n%s", code, errOut, out)
	}
	for _, args := range [][]string{
		{"get", "pools,agents", "-w"},
		{"get", "agents", "book-flight-task-123", "-l", "a=b"},
		{"delete", "agent/book-flight-task-123", "pool"},
		{"delete", "agents,pools"},
		{"delete", "agents,widgets", "book-flight-task-123"},
	} {
		if out, errOut, code := run(t, url, args...); code != 1 || out != "" || !strings.HasPrefix(errOut, "error: ") {
			t.Errorf("hvkube %q: exit %d, stdout %q, stderr %q; want a refusal", args, code, out, errOut)
		}
	}
	if out, _, code := run(t, url, "get", "agent/book-flight-task-123", "pool/browser-workers"); code != 0 {
		t.Fatalf("a refused delete deleted: %q", out)
	}
	if out, errOut, code := run(t, url, "delete", "agent/book-flight-task-123"); code != 0 || !strings.Contains(out, `agent "book-flight-task-123" deleted`) {
		t.Fatalf("delete agent/NAME: exit %d, %q, %s", code, out, errOut)
	}
}

package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// hostCommandSetup is what hvkube serve leaves on a host where host
// commands are allowed: a data directory of mode 0700 holding the store,
// the signing key, the token file and the agents' files, a token file
// elsewhere (--token-file, mode 0600), all under directories anyone may
// traverse, as / and /var/lib are.
type hostCommandSetup struct {
	base, data, tokenFile, public, work string
	nd                                  *Node
}

func newHostCommandSetup(t *testing.T, u *HostUser) *hostCommandSetup {
	t.Helper()
	base, err := os.MkdirTemp("", "hvkube-hostcmd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	s := &hostCommandSetup{base: base, data: filepath.Join(base, "data"), tokenFile: filepath.Join(base, "etc", "token"),
		public: filepath.Join(base, "public.txt"), work: filepath.Join(base, "work")}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{base, 0o755}, {filepath.Join(base, "etc"), 0o755}, {s.work, 0o755}, {s.data, 0o700}, {filepath.Join(s.data, "agents", "job", "1"), 0o700}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{filepath.Join(s.data, "hvkube.db"), 0o600},
		{filepath.Join(s.data, "token.key"), 0o600},
		{filepath.Join(s.data, "token"), 0o600},
		{filepath.Join(s.data, "agents", journalName(0)), 0o600},
		{filepath.Join(s.data, "agents", "job", "1", "result.json"), 0o600},
		{s.tokenFile, 0o600},
		{s.public, 0o644},
	} {
		if err := os.WriteFile(f.path, []byte("secret of "+filepath.Base(f.path)+"\n"), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	s.nd = New(Options{Name: "n1", DataDir: s.data, ServerURL: "http://127.0.0.1:1",
		HostCommands: &HostCommands{User: u, WorkRoot: s.work},
		Tokens:       func(context.Context, *api.Agent, time.Duration) (string, error) { return "scoped-token", nil }})
	return s
}

// run runs argv as agent job's host command and returns its standard
// output, exit code and the attempt's log.
func (s *hostCommandSetup) run(t *testing.T, argv ...string) (string, int, string) {
	t.Helper()
	a := &api.Agent{Metadata: api.ObjectMeta{Name: "job"}, Status: api.AgentStatus{Sandbox: "box", Attempts: 1}}
	a.Spec.Type, a.Spec.Task.Command = "custom", argv
	j := &logJournal{dir: t.TempDir()}
	lg := &runLog{j: j, key: "job/1", attempt: 1}
	out, code, err := s.nd.runHost(t.Context(), a, lg)
	lg.Close()
	if err != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	b, _ := readAll(j, "job/1", 1)
	return string(out), code, b
}

func requireRootAndNobody(t *testing.T) *HostUser {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a host command runs as another user only when the server is root")
	}
	u, err := LookupHostUser("nobody")
	if err != nil {
		t.Skipf("no unprivileged account to run as: %v", err)
	}
	return u
}

// TestHostCommandCannotReadServerSecrets runs real commands as the host
// command user that try to read the store, the signing key, the token
// files, the agents' files and the server's initial environment: each
// must be refused, while a file anyone may read is read (so the refusals
// are the user's, not a path that does not exist).
func TestHostCommandCannotReadServerSecrets(t *testing.T) {
	u := requireRootAndNobody(t)
	s := newHostCommandSetup(t, u)
	tests := []struct {
		name string
		argv []string
		ok   bool
	}{
		{"a public file (control)", []string{"cat", s.public}, true},
		{"the store", []string{"cat", filepath.Join(s.data, "hvkube.db")}, false},
		{"the signing key", []string{"cat", filepath.Join(s.data, "token.key")}, false},
		{"the token file in the data directory", []string{"cat", filepath.Join(s.data, "token")}, false},
		{"the --token-file", []string{"cat", s.tokenFile}, false},
		{"the agents' logs", []string{"cat", filepath.Join(s.data, "agents", journalName(0))}, false},
		{"an attempt's file", []string{"cat", filepath.Join(s.data, "agents", "job", "1", "result.json")}, false},
		{"a listing of the data directory", []string{"ls", s.data}, false},
		{"the server's initial environment", []string{"cat", fmt.Sprintf("/proc/%d/environ", os.Getpid())}, false},
		{"the server's memory", []string{"head", "-c", "1", fmt.Sprintf("/proc/%d/mem", os.Getpid())}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code, log := s.run(t, tt.argv...)
			if tt.ok {
				if code != 0 || !strings.Contains(out, "secret of public.txt") {
					t.Fatalf("exit %d, output %q, want the file read\n%s", code, out, log)
				}
				return
			}
			if code == 0 || strings.Contains(out, "secret of") {
				t.Fatalf("exit %d, output %q: the host command read it\n%s", code, out, log)
			}
			if !strings.Contains(log, "Permission denied") {
				t.Errorf("the log does not say it was refused:\n%s", log)
			}
		})
	}
}

// TestHostCommandIdentityAndWorkDir: the command runs as the user, with
// its primary group and no other, in a fresh directory of its own outside
// the data directory that is its HOME and TMPDIR and is removed
// afterwards; its environment is the minimal one with the scoped token.
func TestHostCommandIdentityAndWorkDir(t *testing.T) {
	u := requireRootAndNobody(t)
	s := newHostCommandSetup(t, u)
	tests := []struct {
		name string
		argv []string
		want string
	}{
		{"uid", []string{"id", "-u"}, fmt.Sprint(u.UID)},
		{"groups", []string{"id", "-G"}, fmt.Sprint(u.GID)},
		{"owner of the working directory", []string{"stat", "-c", "%u %a", "."}, fmt.Sprintf("%d 700", u.UID)},
		{"a file written there", []string{"sh", "-c", "echo written > f && cat f"}, "written"},
		{"HOME and TMPDIR", []string{"sh", "-c", `[ "$HOME" = "$PWD" ] && [ "$TMPDIR" = "$PWD" ] && echo same`}, "same"},
		{"token", []string{"sh", "-c", `echo "$HVKUBE_TOKEN $HVKUBE_AGENT $HVKUBE_SANDBOX"`}, "scoped-token job box"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code, log := s.run(t, tt.argv...)
			if got := strings.TrimSpace(out); code != 0 || got != tt.want {
				t.Fatalf("exit %d, output %q, want %q\n%s", code, got, tt.want, log)
			}
		})
	}
	out, _, _ := s.run(t, "pwd")
	wd := strings.TrimSpace(out)
	if !strings.HasPrefix(wd, s.work+string(filepath.Separator)) || within(s.data, wd) {
		t.Errorf("working directory %s, want one under %s", wd, s.work)
	}
	if _, err := os.Stat(wd); !os.IsNotExist(err) {
		t.Errorf("working directory %s is still there: %v", wd, err)
	}
	if left, _ := os.ReadDir(s.work); len(left) != 0 {
		t.Errorf("working directories left in %s: %v", s.work, left)
	}
}

// TestHostCommandLeavesNoProcess: what a host command starts in the
// background ends with it.
func TestHostCommandLeavesNoProcess(t *testing.T) {
	var u *HostUser
	if os.Geteuid() == 0 {
		u = requireRootAndNobody(t)
	}
	s := newHostCommandSetup(t, u)
	out, code, log := s.run(t, "sh", "-c", "sleep 300 & echo $!")
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if code != 0 || err != nil {
		t.Fatalf("exit %d, output %q\n%s", code, out, log)
	}
	for i := 0; ; i++ {
		if alive(pid) {
			if i > 100 {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("the command's background process %d still runs", pid)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		break
	}
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || !strings.HasPrefix(string(b[i+1:]), " Z")
}

// TestHostCommandWorkRootInsideDataDir is refused: the user would need a
// way into the data directory.
func TestHostCommandWorkRootInsideDataDir(t *testing.T) {
	data := t.TempDir()
	h := &HostCommands{WorkRoot: filepath.Join(data, "work")}
	if _, err := h.workDir(data, "job", 1); err == nil || !strings.Contains(err.Error(), "outside the data directory") {
		t.Fatalf("err %v, want a refusal", err)
	}
}

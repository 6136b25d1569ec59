package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/hostpath"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// foreignPath is a host path written for a host of the other kind.
func foreignPath() string {
	if runtime.GOOS == "windows" {
		return "/srv/workflows"
	}
	return `C:\workflows`
}

// volumeShell is an Options.Exec for the fake backend that answers the
// programs the node runs to copy a volume in (mkdir, chmod).
func volumeShell(id string, fs fake.FS, req backend.ExecRequest) (backend.ExecResult, error) {
	switch path.Base(req.Path) {
	case "mkdir", "chmod":
		return backend.ExecResult{}, nil
	}
	return backend.ExecResult{ExitCode: 127, Stderr: []byte(req.Path + ": command not found\n")}, nil
}

// newRootedNode is a directNode whose node allows host paths under roots,
// with the desk template built.
func newRootedNode(t *testing.T, roots hostpath.Roots) *directNode {
	t.Helper()
	clk := clock.NewFake(time.Now())
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir, store.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	be := fake.New(fake.Options{Now: clk.Now, Exec: volumeShell})
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nd := New(Options{Store: st, Backend: be, Name: "n1", DataDir: dir, Logger: log, DefaultTemplate: "desk", Now: clk.Now, AllowedRoots: roots})
	t.Cleanup(nd.Stop)
	d := &directNode{t: t, ctx: context.Background(), nd: nd, st: st, be: be, clk: clk}
	d.create(yamlObj(t, deskTemplate))
	reconcileTemplate(t, nd, "desk")
	return d
}

func volumeSandbox(t *testing.T, name, hostPath string) api.Object {
	t.Helper()
	return yamlObj(t, sandboxYAML(name, fmt.Sprintf("  volumes:\n  - {name: workflows, hostPath: '%s', sandboxPath: /home/agent/workflows, readOnly: true}\n", hostPath)))
}

// TestSandboxHostPathOnTheNode: a volume whose host path this node cannot
// use (another OS's syntax, outside the node's roots, a link out of them,
// missing) leaves the sandbox Pending with reason HostPathUnavailable, a
// message naming the field and the path, one event and a later retry; no
// VM is created. One under the roots that exists runs, copied in.
func TestSandboxHostPathOnTheNode(t *testing.T) {
	root := filepath.Join(t.TempDir(), "shared")
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "workflows"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "workflows", "init.sh"), []byte("echo hi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	roots, err := hostpath.NewRoots(root)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, hostPath string
		says           string // in the message, besides the field and path
	}{
		{"another OS's path", foreignPath(), "not an absolute path on this node"},
		{"outside the roots", outside, "outside the host paths"},
		{"a link out of the roots", filepath.Join(root, "escape"), "outside the host paths"},
		{"missing under the roots", filepath.Join(root, "missing"), "does not exist on this node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newRootedNode(t, roots)
			d.create(volumeSandbox(t, "box", tt.hostPath))
			res := d.reconcile("box")
			sb := d.sandbox("box")
			if got, want := sb.Status.Phase+"/"+sb.Status.Reason, "Pending/HostPathUnavailable"; got != want {
				t.Fatalf("phase/reason %s, want %s (%s)", got, want, sb.Status.Message)
			}
			for _, s := range []string{"spec.volumes[0].hostPath", fmt.Sprintf("%q", tt.hostPath), tt.says} {
				if !strings.Contains(sb.Status.Message, s) {
					t.Errorf("message %q does not say %q", sb.Status.Message, s)
				}
			}
			if res.RequeueAfter <= 0 {
				t.Errorf("requeue after %s, want a later look", res.RequeueAfter)
			}
			if n := d.be.Count(fake.OpCreate); n != 0 {
				t.Errorf("%d VMs created, want none", n)
			}
			if got := count(storeEvents(t, d.st, api.KindSandbox, "box"), "HostPathUnavailable"); got != 1 {
				t.Errorf("%d HostPathUnavailable events, want 1", got)
			}
			// Looking again at what has not changed writes nothing.
			rv := sb.Metadata.ResourceVersion
			d.reconcile("box")
			if got := d.sandbox("box").Metadata.ResourceVersion; got != rv {
				t.Errorf("a second look wrote the sandbox (rv %s -> %s)", rv, got)
			}
			if got := count(storeEvents(t, d.st, api.KindSandbox, "box"), "HostPathUnavailable"); got != 1 {
				t.Errorf("%d HostPathUnavailable events after a second look, want 1", got)
			}
		})
	}

	t.Run("under the roots", func(t *testing.T) {
		d := newRootedNode(t, roots)
		d.create(volumeSandbox(t, "box", filepath.Join(root, "workflows")))
		d.reconcile("box")
		sb := d.sandbox("box")
		if got, want := sb.Status.Phase, api.SandboxRunning; got != want {
			t.Fatalf("phase %s, want %s (%s: %s)", got, want, sb.Status.Reason, sb.Status.Message)
		}
		if data, ok := d.be.ReadFile("box", "/home/agent/workflows/init.sh"); !ok || string(data) != "echo hi\n" {
			t.Errorf("the volume's file in the guest: %q, %v", data, ok)
		}
	})
}

// TestSandboxHostPathAppears: a sandbox that waits for a missing folder
// runs once the folder is made, at the node's next look.
func TestSandboxHostPathAppears(t *testing.T) {
	root := t.TempDir()
	roots, err := hostpath.NewRoots(root)
	if err != nil {
		t.Fatal(err)
	}
	d := newRootedNode(t, roots)
	dir := filepath.Join(root, "later")
	d.create(volumeSandbox(t, "box", dir))
	d.reconcile("box")
	if sb := d.sandbox("box"); sb.Status.Reason != "HostPathUnavailable" {
		t.Fatalf("reason %s, want HostPathUnavailable (%s)", sb.Status.Reason, sb.Status.Message)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d.reconcile("box")
	if sb := d.sandbox("box"); sb.Status.Phase != api.SandboxRunning {
		t.Fatalf("phase %s, want Running (%s: %s)", sb.Status.Phase, sb.Status.Reason, sb.Status.Message)
	}
}

// TestSeedPoolOnLinuxNode runs the seed's SandboxPool, whose template asks
// for C:\workflows, on a Linux node: every sandbox it makes stays Pending
// with reason HostPathUnavailable and an event, and no VM is created.
func TestSeedPoolOnLinuxNode(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the seed's paths are this host's own on Windows")
	}
	roots, err := hostpath.NewRoots(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := newRootedCluster(t, roots)
	seed, err := os.ReadFile(filepath.Join("..", "api", "testdata", "seed", "sandboxpool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c.create(t, yamlObj(t, string(seed)))
	var members []*api.Sandbox
	eventually(t, "the pool's sandboxes wait for the host path", func() (bool, string) {
		members = c.members(t, "browser-workers")
		var states []string
		ok := len(members) > 0
		for _, sb := range members {
			states = append(states, sb.Metadata.Name+"="+sb.Status.Phase+"/"+sb.Status.Reason)
			ok = ok && sb.Status.Phase == api.SandboxPending && sb.Status.Reason == "HostPathUnavailable"
		}
		return ok, fmt.Sprint(states)
	})
	sb := members[0]
	first := sb.Metadata.Name
	if msg := sb.Status.Message; !strings.Contains(msg, "spec.volumes[0].hostPath") || !strings.Contains(msg, `workflows`) {
		t.Errorf("message %q does not name the field and the path", msg)
	}
	c.waitEvents(t, api.KindSandbox, first, "HostPathUnavailable", 1)
	if n := c.be.Count(fake.OpCreate); n != 0 {
		t.Errorf("%d VMs created, want none", n)
	}
	// The pool says why it cannot be satisfied, and adds no more.
	eventually(t, "the pool says it cannot be satisfied", func() (bool, string) {
		o, err := c.st.Get(context.Background(), api.KindSandboxPool, "browser-workers")
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range o.(*api.SandboxPool).Status.Conditions {
			if cond.Type == "Satisfiable" {
				return cond.Status == api.ConditionFalse && cond.Reason == "HostPathUnavailable", cond.Reason + ": " + cond.Message
			}
		}
		return false, "no Satisfiable condition"
	})
}

// newRootedCluster is a cluster whose node allows host paths under roots.
func newRootedCluster(t *testing.T, roots hostpath.Roots) *cluster {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c := &cluster{st: st, be: fake.New(fake.Options{}), dir: dir, log: log}
	c.mgr = reconcile.NewManager(c.st, c.log, time.Second)
	c.nd = New(Options{Store: c.st, Backend: c.be, Name: "n1", DataDir: c.dir, Logger: c.log, DefaultTemplate: "desk", AllowedRoots: roots})
	if err := c.nd.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.nd.Register(c.mgr)
	controller.RegisterAll(c.mgr, c.st, c.log, nil)
	if err := c.mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.mgr.Stop()
		c.nd.Stop()
	})
	c.create(t, yamlObj(t, deskTemplate))
	return c
}

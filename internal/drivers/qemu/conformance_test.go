//go:build linux

package qemu

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
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/conformance"
)

// requireImage skips when the desktop image is not built, unless
// HVKUBE_REQUIRE_QEMU is set (make test sets it: there a missing image is a
// failure, not a skip).
func requireImage(t testing.TB) string {
	t.Helper()
	dir := DefaultImageDir()
	if _, err := os.Stat(filepath.Join(dir, "linux-desktop", "current", "image.json")); err != nil {
		if os.Getenv("HVKUBE_REQUIRE_QEMU") != "" {
			t.Fatalf("the linux-desktop image is not built (%v): run make image", err)
		}
		t.Skipf("the linux-desktop image is not built: run make image (%v)", err)
	}
	return dir
}

// deskBackend starts a backend on cfg over a directory of the test's
// (cfg.Dir and cfg.ImageDir are set here) and builds template id from the
// linux-desktop image; the backend closes when the test ends.
func deskBackend(t testing.TB, ctx context.Context, cfg Config, id string) (*Backend, backend.TemplateInfo) {
	t.Helper()
	cfg.Dir, cfg.ImageDir = t.TempDir(), requireImage(t)
	b, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tpl, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: id, Image: api.QEMUImage{Image: "linux-desktop"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, tpl
}

// shOK runs script with sh in sandbox id and returns its output, trimmed;
// a failure or another exit than 0 fails the test.
func shOK(t testing.TB, ctx context.Context, b *Backend, id, script string) string {
	t.Helper()
	res, err := b.Exec(ctx, id, backend.ExecRequest{Path: "sh", Args: []string{"-c", script}})
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%s: %s: exit %d: %s", id, script, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func newTestBackend(t *testing.T, dir string) backend.Backend {
	t.Helper()
	b, err := New(context.Background(), Config{Dir: dir, ImageDir: requireImage(t)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	requireImage(t)
	conformance.Run(t, conformance.Options{
		New:      newTestBackend,
		Template: backend.TemplateSpec{ID: "linux-desktop-test", Image: api.QEMUImage{Image: "linux-desktop"}},
		Kill: func(t *testing.T, b backend.Backend, id string) {
			info, err := b.Inspect(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			syscall.Kill(info.PID, syscall.SIGKILL)
			deadline := time.Now().Add(10 * time.Second)
			for clonePrefix(info.PID) != "" && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		},
		Extra: testSpares,
		Network: &conformance.NetworkOptions{
			HostAddress: "10.0.2.2",
			Fetch: func(host string, port int) backend.ExecRequest {
				return backend.ExecRequest{Path: "timeout", Args: []string{"20", "bash", "-c", fetchScript, "fetch", host, strconv.Itoa(port)}}
			},
			RefusedExit: 7,
		},
		Leftovers: func(t *testing.T, b backend.Backend, id string, before backend.Info) []string {
			q := b.(*Backend)
			var left []string
			for _, p := range []string{q.sbDir(id), q.runDirFor(q.sbDir(id))} {
				if _, err := os.Stat(p); err == nil {
					left = append(left, p)
				}
			}
			if clonePrefix(before.PID) != "" {
				left = append(left, fmt.Sprintf("process %d", before.PID))
			}
			return left
		},
	})
}

// testSpares checks the spare clones: made in the background, taken by the
// next clone (files moved, QEMU kept, save and restore still working),
// replaced, skipped when dead, and never outliving a backend.
func testSpares(t *testing.T, bb backend.Backend, tplID string) {
	b := bb.(*Backend)
	ctx := context.Background()
	waitSpare := func(t *testing.T) *spare {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			b.mu.Lock()
			set := b.spares[tplID]
			var sp *spare
			if set != nil && len(set.ready) > 0 {
				sp = set.ready[0]
			}
			making := set != nil && set.making != nil
			b.mu.Unlock()
			switch {
			case sp != nil:
				return sp
			case set == nil:
				t.Fatal("no spare is kept for the template")
			case !making && time.Now().After(deadline):
				t.Fatal("no spare is being made")
			case time.Now().After(deadline):
				t.Fatal("the spare was not made in a minute")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	sparesLeft := func() []string {
		entries, _ := os.ReadDir(b.sparesDir())
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}

	t.Run("SpareTakenByNextClone", func(t *testing.T) {
		sp := waitSpare(t)
		info, err := b.Create(ctx, backend.SandboxSpec{ID: "spare-a", TemplateID: tplID})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Delete(ctx, "spare-a")
		if info.PID != sp.p.pid {
			t.Fatalf("the clone runs QEMU %d, not the spare's %d", info.PID, sp.p.pid)
		}
		// The QEMU keeps the name it started with, which says it was
		// made as a spare, and of which template; the sandbox's PID is
		// what ties the two.
		if got, want := qemuName(t, info.PID), spareNamePrefix+tplID+":"; !strings.HasPrefix(got, want) {
			t.Errorf("the spare's QEMU is named %q, want %s…", got, want)
		}
		if got := readPIDFile(t, b.sbDir("spare-a")); got != info.PID {
			t.Errorf("the sandbox's pid file says %d, want %d", got, info.PID)
		}
		if _, err := os.Stat(sp.dir); !os.IsNotExist(err) {
			t.Fatalf("the spare's directory is still there: %v", err)
		}
		if _, err := os.Stat(filepath.Join(b.sbDir("spare-a"), "disk.qcow2")); err != nil {
			t.Fatalf("the clone's disk: %v", err)
		}
		if err := b.Resume(ctx, "spare-a"); err != nil {
			t.Fatal(err)
		}
		// The first guest call after the first resume already sees the
		// sandbox's hostname.
		res, err := b.Exec(ctx, "spare-a", backend.ExecRequest{Path: "sh", Args: []string{"-c", "hostname; echo kept > /tmp/kept"}})
		if err != nil || string(res.Stdout) != "spare-a\n" {
			t.Fatalf("exec in the clone: %q %v", res.Stdout, err)
		}
		// QEMU reopens its disk around a migration; the spare's disk was
		// renamed after QEMU opened it.
		if err := b.Save(ctx, "spare-a"); err != nil {
			t.Fatal(err)
		}
		if err := b.Restore(ctx, "spare-a"); err != nil {
			t.Fatal(err)
		}
		if err := b.Resume(ctx, "spare-a"); err != nil {
			t.Fatal(err)
		}
		res, err = b.Exec(ctx, "spare-a", backend.ExecRequest{Path: "cat", Args: []string{"/tmp/kept"}})
		if err != nil || string(res.Stdout) != "kept\n" {
			t.Fatalf("after save and restore: %q %v", res.Stdout, err)
		}
		if next := waitSpare(t); next.p.pid == sp.p.pid {
			t.Fatal("no new spare was made")
		}
	})

	t.Run("DeadSpareSkipped", func(t *testing.T) {
		sp := waitSpare(t)
		syscall.Kill(sp.p.pid, syscall.SIGKILL)
		// kill returns before the process is gone; a spare that dies
		// while being taken is found by the next call to its QEMU.
		deadline := time.Now().Add(10 * time.Second)
		for sp.p.alive() {
			if time.Now().After(deadline) {
				t.Fatalf("the killed spare (%d) still runs", sp.p.pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
		info, err := b.Create(ctx, backend.SandboxSpec{ID: "spare-b", TemplateID: tplID})
		if err != nil {
			t.Fatalf("create after the spare died: %v", err)
		}
		defer b.Delete(ctx, "spare-b")
		if info.PID == sp.p.pid || info.State != backend.StatePaused {
			t.Fatalf("create after the spare died: %+v", info)
		}
		// Started on demand: its whole identity is written after the
		// first resume, before any guest call.
		if err := b.Resume(ctx, "spare-b"); err != nil {
			t.Fatal(err)
		}
		if got := hostnameOf(t, b, "spare-b"); got != "spare-b" {
			t.Fatalf("hostname of a clone started on demand: %q", got)
		}
	})

	t.Run("ResetSwapsInASpare", func(t *testing.T) {
		waitSpare(t)
		if _, err := b.Create(ctx, backend.SandboxSpec{ID: "spare-r", TemplateID: tplID}); err != nil {
			t.Fatal(err)
		}
		defer b.Delete(ctx, "spare-r")
		if err := b.Resume(ctx, "spare-r"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Exec(ctx, "spare-r", backend.ExecRequest{Path: "touch", Args: []string{"/tmp/used"}}); err != nil {
			t.Fatal(err)
		}
		before, _ := b.Inspect(ctx, "spare-r")
		sp := waitSpare(t)
		if err := b.Reset(ctx, "spare-r"); err != nil {
			t.Fatal(err)
		}
		after, _ := b.Inspect(ctx, "spare-r")
		if after.PID != sp.p.pid || after.State != backend.StatePaused {
			t.Fatalf("after the reset: %+v, want the spare's QEMU %d, paused", after, sp.p.pid)
		}
		deadline := time.Now().Add(10 * time.Second)
		for clonePrefix(before.PID) != "" {
			if time.Now().After(deadline) {
				t.Fatalf("the QEMU the reset replaced (%d) still runs", before.PID)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := b.Resume(ctx, "spare-r"); err != nil {
			t.Fatal(err)
		}
		if got := hostnameOf(t, b, "spare-r"); got != "spare-r" {
			t.Fatalf("hostname after the reset: %q", got)
		}
		res, err := b.Exec(ctx, "spare-r", backend.ExecRequest{Path: "ls", Args: []string{"/tmp/used"}})
		if err != nil || res.ExitCode == 0 {
			t.Fatalf("a file made before the reset is still there: %+v %v", res, err)
		}
	})

	t.Run("StaleSparesRemovedAtStart", func(t *testing.T) {
		sp := waitSpare(t)
		if !processAlive(sp.p.pid, sp.p.name) {
			t.Fatal("the spare does not run")
		}
		// A second backend on the same directory is a server restarted
		// after a crash: it kills the spares it finds.
		b2, err := New(ctx, Config{Dir: b.cfg.Dir, ImageDir: b.cfg.ImageDir, NoSpares: true})
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		if processAlive(sp.p.pid, sp.p.name) {
			t.Fatal("a spare left by an earlier backend still runs")
		}
		if left := sparesLeft(); len(left) > 0 {
			t.Fatalf("spares left: %v", left)
		}
	})

	t.Run("DeleteTemplateDropsSpare", func(t *testing.T) {
		b.dropSpare(tplID) // the one the restarted backend killed
		b.refillSpares(b.mustTemplate(t, tplID))
		sp := waitSpare(t)
		if !processAlive(sp.p.pid, sp.p.name) {
			t.Fatal("the spare does not run")
		}
		b.dropSpare(tplID)
		if processAlive(sp.p.pid, sp.p.name) {
			t.Fatal("a dropped spare still runs")
		}
		if left := sparesLeft(); len(left) > 0 {
			t.Fatalf("spares left: %v", left)
		}
	})

	t.Run("PendingIdentityKeptAcrossRestart", func(t *testing.T) {
		b.refillSpares(b.mustTemplate(t, tplID))
		waitSpare(t)
		if _, err := b.Create(ctx, backend.SandboxSpec{ID: "spare-p", TemplateID: tplID}); err != nil {
			t.Fatal(err)
		}
		// A server restarted between the clone and its first resume: b
		// lets go of the sandbox, b2 adopts it.
		b.mu.Lock()
		v := b.vms["spare-p"]
		delete(b.vms, "spare-p")
		b.mu.Unlock()
		v.disconnect()
		b.dropAllSpares()
		b2, err := New(ctx, Config{Dir: b.cfg.Dir, ImageDir: b.cfg.ImageDir, NoSpares: true})
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		defer b2.Delete(ctx, "spare-p")
		if err := b2.Resume(ctx, "spare-p"); err != nil {
			t.Fatal(err)
		}
		if got := hostnameOf(t, b2, "spare-p"); got != "spare-p" {
			t.Fatalf("hostname after a restart: %q", got)
		}
	})
}

// qemuName is the -name on the command line of process pid.
func qemuName(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	args := strings.Split(string(b), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-name" {
			return args[i+1]
		}
	}
	t.Fatalf("process %d has no -name: %q", pid, args)
	return ""
}

// readPIDFile is the pid in a sandbox directory's pid file.
func readPIDFile(t *testing.T, dir string) int {
	t.Helper()
	pid, err := readPID(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// hostnameOf is the guest's hostname, read by the first guest call.
func hostnameOf(t *testing.T, b *Backend, id string) string {
	t.Helper()
	res, err := b.Exec(context.Background(), id, backend.ExecRequest{Path: "cat", Args: []string{"/proc/sys/kernel/hostname"}})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func (b *Backend) mustTemplate(t *testing.T, id string) tplMeta {
	t.Helper()
	tpl, err := b.loadTemplate(id)
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

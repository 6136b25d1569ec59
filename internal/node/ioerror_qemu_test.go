//go:build linux

package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/testmount"
)

// qemuProcessName is the -name on the command line of process pid.
func qemuProcessName(t *testing.T, pid int) string {
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
	return ""
}

// TestQEMUSandboxOnAFullDisk runs the node over the QEMU backend, with the
// sandboxes' (and spares') files on a small tmpfs. A sandbox cloned from a
// spare keeps the spare's QEMU, named as a spare, and its status.pid is
// that QEMU's. When the disk fills and its guest writes, QEMU stops it;
// the node says so (event and condition IOError) and cannot run it while
// the disk is full; once there is room it runs it again (event Resumed),
// the guest's write goes through, and the guest call that waited for it
// (an agent's step) comes back with its result.
func TestQEMUSandboxOnAFullDisk(t *testing.T) {
	images := qemutest.RequireImage(t, "linux-desktop")
	if os.Geteuid() != 0 {
		t.Skip("the test mounts a small tmpfs for the sandboxes' disks: run it as root")
	}
	ctx := context.Background()
	disk := testmount.Tmpfs(t, "256m")
	dir := t.TempDir()
	qdir := filepath.Join(dir, "qemu")
	for _, d := range []string{"sandboxes", "spares"} {
		if err := os.MkdirAll(filepath.Join(disk, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(qdir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(disk, d), filepath.Join(qdir, d)); err != nil {
			t.Fatal(err)
		}
	}
	be, st, nd := qemuNode(t, qemu.Config{Dir: qdir, ImageDir: images, MaxSpares: 1}, dir)
	sandbox := func(name string) *api.Sandbox {
		t.Helper()
		o, err := st.Get(ctx, api.KindSandbox, name)
		if err != nil {
			t.Fatal(err)
		}
		return o.(*api.Sandbox)
	}
	reconcile := func(name string) {
		t.Helper()
		if _, err := nd.reconcileSandbox(ctx, name); err != nil {
			t.Fatalf("reconcile %s: %v", name, err)
		}
	}
	// The template's first clone starts its own QEMU and has a spare
	// made; the second takes the spare.
	for _, name := range []string{"first", "desk-1"} {
		if _, err := st.Create(ctx, yamlObj(t, sandboxYAML(name, "  templateRef: desk\n"))); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Delete(context.Background(), name) })
		reconcile(name)
		if sb := sandbox(name); sb.Status.Phase != api.SandboxRunning {
			t.Fatalf("sandbox %s: %s %s", name, sb.Status.Phase, sb.Status.Message)
		}
	}
	sb := sandbox("desk-1")
	info, err := be.Inspect(ctx, "desk-1")
	if err != nil {
		t.Fatal(err)
	}
	if sb.Status.PID == 0 || sb.Status.PID != info.PID {
		t.Fatalf("status.pid %d, want its QEMU's %d", sb.Status.PID, info.PID)
	}
	if got := qemuProcessName(t, sb.Status.PID); !strings.HasPrefix(got, "hvkube-spare:") {
		t.Errorf("the QEMU of a sandbox cloned from a spare is named %q, want the spare's name (hvkube-spare:…)", got)
	}
	if got := qemuProcessName(t, sandbox("first").Status.PID); !strings.HasPrefix(got, "hvkube-sandbox:first:") {
		t.Errorf("the QEMU a sandbox started for itself is named %q, want hvkube-sandbox:first:…", got)
	}

	// The first guest call waits for the clone's hostname to be written;
	// then the disk fills, and the guest writes.
	if _, err := be.Exec(ctx, "desk-1", backend.ExecRequest{Path: "sync"}); err != nil {
		t.Fatal(err)
	}
	filler := testmount.Fill(t, disk)
	// As an agent's step would: a program that writes, waited for.
	type execResult struct {
		res backend.ExecResult
		err error
	}
	wrote := make(chan execResult, 1)
	go func() {
		res, err := be.Exec(ctx, "desk-1", backend.ExecRequest{Path: "sh", Args: []string{"-c", "dd if=/dev/urandom of=/var/tmp/fill bs=1M count=8 oflag=direct 2>/dev/null; stat -c %s /var/tmp/fill"}})
		wrote <- execResult{res, err}
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		if info, _ := be.Inspect(ctx, "desk-1"); info.State == backend.StateIOError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guest wrote to a full disk and QEMU did not stop it")
		}
		time.Sleep(50 * time.Millisecond)
	}
	reconcile("desk-1")
	sb = sandbox("desk-1")
	if sb.Status.Phase != api.SandboxRunning || sb.Status.Reason != reasonIOError || !strings.Contains(sb.Status.Message, "KiB free") {
		t.Fatalf("with the disk full: %s/%s %q, want Running/IOError saying there is no room", sb.Status.Phase, sb.Status.Reason, sb.Status.Message)
	}
	if c := ioErrorCondition(sb); c == nil || c.Status != api.ConditionTrue {
		t.Errorf("IOError condition %+v, want True", c)
	}
	if got := count(storeEvents(t, st, api.KindSandbox, "desk-1"), reasonIOError); got != 1 {
		t.Errorf("%d IOError events, want 1", got)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	reconcile("desk-1")
	sb = sandbox("desk-1")
	if sb.Status.Phase != api.SandboxRunning || sb.Status.Reason != "Resumed" {
		t.Fatalf("with room again: %s/%s %q, want Running/Resumed", sb.Status.Phase, sb.Status.Reason, sb.Status.Message)
	}
	if got := count(storeEvents(t, st, api.KindSandbox, "desk-1"), "Resumed"); got != 1 {
		t.Errorf("%d Resumed events, want 1", got)
	}
	if info, _ := be.Inspect(ctx, "desk-1"); info.State != backend.StateRunning || info.PID != sb.Status.PID {
		t.Errorf("backend: %s, pid %d; want Running, pid %d", info.State, info.PID, sb.Status.PID)
	}
	// The guest call that waited through the stop comes back with the
	// write done.
	select {
	case r := <-wrote:
		if r.err != nil || strings.TrimSpace(string(r.res.Stdout)) != "8388608" {
			t.Fatalf("the guest program that wrote: %q %q %v, want the whole 8 MiB written", r.res.Stdout, r.res.Stderr, r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the guest call that waited for the write did not come back after the resume")
	}
}

// qemuNode runs a node "n1" over a QEMU backend of cfg (its Logger set
// here), with its store and data in dir, and a Ready template "desk" of
// the linux-desktop image.
func qemuNode(t *testing.T, cfg qemu.Config, dir string) (*qemu.Backend, *store.Store, *Node) {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Logger = log
	be, err := qemu.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	st, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	nd := New(Options{Store: st, Backend: be, Name: "n1", DataDir: dir, Logger: log, DefaultTemplate: "desk"})
	t.Cleanup(nd.Stop)
	if _, err := st.Create(ctx, yamlObj(t, deskTemplate)); err != nil {
		t.Fatal(err)
	}
	reconcileTemplate(t, nd, "desk")
	if tpl := getTemplate(t, st, "desk"); tpl.Status.Phase != api.TemplateReady {
		t.Fatalf("template %s: %s", tpl.Status.Phase, tpl.Status.Message)
	}
	return be, st, nd
}

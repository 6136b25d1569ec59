//go:build linux

package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// TestCheckpointOnQEMU runs a workflow with checkpoints on a real desktop,
// then, mid-run, stops the node and its controllers (as a crash of the
// server does) and kills the desktop's QEMU with SIGKILL. A new backend
// and node on the same directory and store take the attempt up from its
// latest checkpoint: a file written before the checkpoint is there, one
// written after it is not (the step that wrote it runs again and checks), and the agent completes once, in its first
// attempt, its result saying where it went on from.
func TestCheckpointOnQEMU(t *testing.T) {
	images := qemutest.RequireImage(t, "linux-desktop")
	ctx := context.Background()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// start runs a backend, a node and the controllers on dir and st, as
	// a start of the server does.
	start := func() (*qemu.Backend, func()) {
		be, err := qemu.New(ctx, qemu.Config{Dir: filepath.Join(dir, "qemu"), ImageDir: images, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		mgr := reconcile.NewManager(st, log, time.Second)
		nd := New(Options{Store: st, Backend: be, Name: "n1", DataDir: dir, Logger: log, DefaultTemplate: "desk"})
		nd.checkpointUnit = time.Second
		if err := nd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		nd.Register(mgr)
		controller.RegisterAll(mgr, st, log, nil)
		if err := mgr.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return be, func() {
			mgr.Stop()
			nd.Stop()
			be.Close()
		}
	}
	be, stop := start()
	t.Cleanup(func() {
		vms, _ := be.List(context.Background())
		for _, v := range vms {
			be.Delete(context.Background(), v.ID)
		}
	})
	for _, y := range []string{deskTemplate, poolYAML("web", 1, "")} {
		if _, err := st.Create(ctx, yamlObj(t, y)); err != nil {
			t.Fatal(err)
		}
	}
	// A checkpoint every 2 s falls between two of the first three steps
	// (a step holds it off until it ends); the node is stopped during
	// step 3, after its write: no checkpoint has that write, and step 3
	// runs again on a desktop without it.
	if _, err := st.Create(ctx, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: long}
spec:
  type: workflow
  sandboxSelector: {pool: web}
  checkpoint: {everyMinutes: 2}
  completion: {timeoutMinutes: 20}
  task:
    steps:
    - {action: exec, command: [sh, -c, "echo before > /root/marker && sync"]}
    - {action: wait, duration: 3}
    - {action: exec, command: [sh, -c, "test ! -e /root/after || { echo the write after the checkpoint is there; exit 9; }; echo after > /root/after && sync && sleep 20"]}
    - {action: exec, command: [sh, -c, "cat /root/marker"]}
`)); err != nil {
		t.Fatal(err)
	}
	agent := func() *api.Agent {
		o, err := st.Get(ctx, api.KindAgent, "long")
		if err != nil {
			t.Fatal(err)
		}
		return o.(*api.Agent)
	}
	var sandbox string
	waitFor(t, 10*time.Minute, 200*time.Millisecond, "a checkpoint, then the write after it", func() (bool, string) {
		a := agent()
		if a.Status.Phase == api.AgentFailed || a.Status.Phase == api.AgentCompleted {
			t.Fatalf("agent %s: %s", a.Status.Phase, a.Status.Message)
		}
		sandbox = a.Status.Sandbox
		if a.Status.Checkpoint == nil || sandbox == "" {
			return false, a.Status.Phase + " " + a.Status.Message
		}
		res, err := be.Exec(ctx, sandbox, backend.ExecRequest{Path: "test", Args: []string{"-e", "/root/after"}})
		return err == nil && res.ExitCode == 0, fmt.Sprintf("checkpoint %+v", a.Status.Checkpoint)
	})
	before := agent().Status.Checkpoint
	t.Logf("checkpoint at %s with %d steps done; the node and the desktop's QEMU go now", before.At.Format(time.RFC3339Nano), before.Steps)
	info, err := be.Inspect(ctx, sandbox)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	be, stop = start()
	defer stop()
	waitFor(t, 10*time.Minute, 200*time.Millisecond, "the agent completes", func() (bool, string) {
		a := agent()
		if a.Status.Phase == api.AgentFailed {
			t.Fatalf("agent failed: %s %s", a.Status.Reason, a.Status.Message)
		}
		return a.Status.Phase == api.AgentCompleted, a.Status.Phase + " " + a.Status.Message
	})
	a := agent()
	if a.Status.Attempts != 1 || a.Status.Failures != 0 {
		t.Errorf("attempts %d, failures %d: want the first attempt to go on", a.Status.Attempts, a.Status.Failures)
	}
	res := a.Status.Result
	if res == nil || res.ResumedFrom == nil || len(res.Steps) != 4 {
		t.Fatalf("result %+v: want 4 steps and where it went on from", res)
	}
	if !res.ResumedFrom.Equal(before.At) || before.Steps > 2 {
		t.Errorf("went on from the checkpoint of %s, want the one of %s with at most 2 steps done (%d)", res.ResumedFrom, before.At, before.Steps)
	}
	if got := strings.TrimSpace(res.Steps[3].Output); got != "before" {
		t.Errorf("the file written before the checkpoint reads %q, want before", got)
	}
	if evs := storeEvents(t, st, api.KindAgent, "long", "ResumedFromCheckpoint", "Interrupted", "Completed"); fmt.Sprint(evs) != "[ResumedFromCheckpoint Completed]" {
		t.Errorf("events %v, want it resumed once and completed once", evs)
	}
	checkpointed := storeEvents(t, st, api.KindAgent, "long", "Checkpointed")
	t.Logf("%d checkpoints; result resumed from %s", len(checkpointed), res.ResumedFrom.Format(time.RFC3339Nano))
}

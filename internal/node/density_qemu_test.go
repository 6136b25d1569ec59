//go:build linux

package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/capacity"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// squeezable is the host's real memory, except that a test can make the
// host look short of it (5 % available) to force memory pressure.
type squeezable struct {
	capacity.ProcReader
	squeezed atomic.Bool
}

func (s *squeezable) Host() (capacity.Host, error) {
	h, err := s.ProcReader.Host()
	if err == nil && s.squeezed.Load() {
		h.AvailableMB = h.TotalMB / 20
	}
	return h, err
}

// TestDensityOnQEMU fills a pool of 40 real QEMU desktops of 512 MB, past
// the 38 a 24 GiB host held when every VM counted its guest memory: the
// node counts what they use, measured. Then the host is made to look
// short of memory: the node moves idle desktops to disk (saved, with an
// event), and an agent sent to one of them runs on it, restored.
func TestDensityOnQEMU(t *testing.T) {
	images := qemutest.RequireImage(t, "linux-desktop")
	const replicas = 40
	ctx := context.Background()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mem := &squeezable{}
	be, err := qemu.New(ctx, qemu.Config{Dir: filepath.Join(dir, "qemu"), ImageDir: images, Logger: log, Memory: mem})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vms, _ := be.List(context.Background())
		for _, v := range vms {
			be.Delete(context.Background(), v.ID)
		}
		be.Close()
	})
	st, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	mgr := reconcile.NewManager(st, log, time.Second)
	nd := New(Options{Store: st, Backend: be, Name: "n1", DataDir: dir, Logger: log, DefaultTemplate: "desk", StatusInterval: 500 * time.Millisecond})
	if err := nd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	nd.Register(mgr)
	controller.RegisterAll(mgr, st, log, nil)
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mgr.Stop()
		nd.Stop()
	})
	for _, y := range []string{deskTemplate, poolYAML("dense", replicas, "")} {
		if _, err := st.Create(ctx, yamlObj(t, y)); err != nil {
			t.Fatal(err)
		}
	}
	members := func() []*api.Sandbox {
		items, _, err := st.List(ctx, api.KindSandbox, api.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		var out []*api.Sandbox
		for _, it := range items {
			out = append(out, it.(*api.Sandbox))
		}
		return out
	}
	waitFor(t, 20*time.Minute, 200*time.Millisecond, fmt.Sprintf("%d desktops paused", replicas), func() (bool, string) {
		phases := map[string]int{}
		for _, sb := range members() {
			phases[sb.Status.Phase+"/"+sb.Status.Reason]++
		}
		return phases[api.SandboxPaused+"/Started"] == replicas, fmt.Sprint(phases)
	})
	// Clones cloned on demand are readied in the background; the count
	// drains.
	waitFor(t, 10*time.Minute, 200*time.Millisecond, "every clone readied", func() (bool, string) {
		return be.Readying() == 0, fmt.Sprintf("%d clones still to ready", be.Readying())
	})
	node := func() *api.Node {
		o, err := st.Get(ctx, api.KindNode, "n1")
		if err != nil {
			t.Fatal(err)
		}
		return o.(*api.Node)
	}
	waitFor(t, time.Minute, 200*time.Millisecond, "the node counts them", func() (bool, string) {
		n := node()
		return n.Status.Sandboxes[api.SandboxPaused] == replicas && len(n.Status.Templates) == 1 && n.Status.Templates[0].CloneMB > 0, fmt.Sprintf("%+v", n.Status)
	})
	n := node()
	tp := n.Status.Templates[0]
	t.Logf("%d desktops: %d MiB used, %d MiB reserved, %d MiB free, a clone %d MiB, %d more fit", replicas, n.Status.Memory.UsedMB, n.Status.Memory.ReservedMB, n.Status.Memory.FreeMB, tp.CloneMB, tp.Fit)
	if tp.CloneMB >= tp.GuestMB/2 || n.Status.Memory.UsedMB >= replicas*tp.GuestMB/2 {
		t.Errorf("a clone counts %d MiB and %d desktops %d MiB: want far under their %d MiB of guest memory", tp.CloneMB, replicas, n.Status.Memory.UsedMB, tp.GuestMB)
	}

	// Pressure: the node moves idle desktops to disk.
	mem.squeezed.Store(true)
	var moved string
	waitFor(t, 5*time.Minute, 200*time.Millisecond, "a desktop moved to disk", func() (bool, string) {
		for _, sb := range members() {
			if sb.Status.Phase == api.SandboxSaved && sb.Status.Reason == ReasonMovedToDisk {
				moved = sb.Metadata.Name
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", node().Status.Pressure)
	})
	mem.squeezed.Store(false)
	if evs := storeEvents(t, st, api.KindSandbox, moved, ReasonMovedToDisk); len(evs) != 1 {
		t.Errorf("events of %s: %v, want one MovedToDisk", moved, evs)
	}
	waitFor(t, time.Minute, 200*time.Millisecond, "the node records it", func() (bool, string) {
		n := node()
		return n.Status.Pressure.Moved > 0 && n.Status.Sandboxes[api.SandboxSaved] > 0, fmt.Sprintf("%+v", n.Status.Pressure)
	})

	// A claim brings it back.
	if _, err := st.Create(ctx, yamlObj(t, fmt.Sprintf(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: back}
spec:
  sandboxName: %s
  task:
    steps:
    - {action: exec, command: [hostname]}
`, moved))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Minute, 200*time.Millisecond, "the agent completes on the moved desktop", func() (bool, string) {
		o, err := st.Get(ctx, api.KindAgent, "back")
		if err != nil {
			t.Fatal(err)
		}
		a := o.(*api.Agent)
		if a.Status.Phase == api.AgentFailed {
			t.Fatalf("agent failed: %s %s", a.Status.Reason, a.Status.Message)
		}
		return a.Status.Phase == api.AgentCompleted && a.Status.Sandbox == moved, a.Status.Phase + " " + a.Status.Message
	})
}

//go:build linux

package qemu

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/testbench"
)

// TestCaptureTemplate makes a template of a running sandbox after writing
// a file in it and starting a program: a clone of the new template has
// both (its memory and its disk are the sandbox's as captured), the
// source runs on and keeps its own later writes to itself, and the new
// template outlives the old one.
func TestCaptureTemplate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	b, tpl := deskBackend(t, ctx, Config{NoSpares: true}, "capture-base")
	run := func(t *testing.T, id, script string) string {
		t.Helper()
		return shOK(t, ctx, b, id, script)
	}
	start := func(t *testing.T, id, tplID string) {
		t.Helper()
		if _, err := b.Create(ctx, backend.SandboxSpec{ID: id, TemplateID: tplID}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Delete(context.Background(), id) })
		if err := b.Resume(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	start(t, "src", tpl.ID)
	// A file on disk, synced, and a program that holds a value in memory
	// only (its own process, asleep).
	run(t, "src", "echo set-up-by-hand > /root/marker && sync && (setsid sleep 3600 >/dev/null 2>&1 &) && sleep 0.5")

	if _, err := b.CaptureTemplate(ctx, "src", "capture-base", nil); err == nil {
		t.Fatal("a capture over an existing template was not refused")
	}
	if _, err := b.CaptureTemplate(ctx, "no-such-sandbox", "capture-x", nil); err == nil {
		t.Fatal("a capture of a missing sandbox was not refused")
	}
	began := time.Now()
	var steps []string
	info, err := b.CaptureTemplate(ctx, "src", "capture-new", func(s string) { steps = append(steps, s) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("captured in %s: %v", time.Since(began).Round(time.Millisecond), steps)
	if info.ID != "capture-new" || info.MemoryBytes == 0 {
		t.Errorf("captured template: %+v", info)
	}
	// The source runs on, and its writes after stay its own.
	if st, _ := b.Inspect(ctx, "src"); st.State != backend.StateRunning {
		t.Errorf("the source is %s after the capture, want running", st.State)
	}
	run(t, "src", "echo later > /root/marker && sync")

	// The old template goes; the new one needs nothing of it.
	b.Delete(ctx, "src")
	if err := b.DeleteTemplate(ctx, tpl.ID); err != nil {
		t.Fatal(err)
	}
	start(t, "clone", "capture-new")
	if got := run(t, "clone", "cat /root/marker"); got != "set-up-by-hand" {
		t.Errorf("the clone's marker: %q, want the one captured", got)
	}
	if got := run(t, "clone", "pgrep -x sleep >/dev/null && echo running"); got != "running" {
		t.Errorf("the program started before the capture does not run in the clone")
	}

	// A template of a clone of a captured template: the chain stays one
	// overlay of the image deep.
	run(t, "clone", "echo again >> /root/marker && sync")
	if _, err := b.CaptureTemplate(ctx, "clone", "capture-again", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteTemplate(ctx, "capture-new"); err != nil {
		t.Fatal(err)
	}
	start(t, "clone2", "capture-again")
	if got := run(t, "clone2", "cat /root/marker | tr '\\n' ' '"); got != "set-up-by-hand again" {
		t.Errorf("the second generation's marker: %q", got)
	}
}

// BenchmarkCaptureOnQEMU captures a running linux desktop into a new
// template b.N times: how long the sandbox stands stopped, and the whole.
func BenchmarkCaptureOnQEMU(b *testing.B) {
	ctx := context.Background()
	be, tpl := deskBackend(b, ctx, Config{NoSpares: true}, "capture-bench")
	if _, err := be.Create(ctx, backend.SandboxSpec{ID: "bench", TemplateID: tpl.ID}); err != nil {
		b.Fatal(err)
	}
	defer be.Delete(context.Background(), "bench")
	if err := be.Resume(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	shOK(b, ctx, be, "bench", "echo set-up > /root/marker && sync")
	var stopped, total []time.Duration
	n := 0
	for b.Loop() {
		n++
		id := fmt.Sprintf("capture-bench-%d", n)
		began := time.Now()
		info, err := be.CaptureTemplate(ctx, "bench", id, nil)
		if err != nil {
			b.Fatal(err)
		}
		total = append(total, time.Since(began))
		stopped = append(stopped, info.Stopped)
		b.StopTimer()
		if err := be.DeleteTemplate(ctx, id); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second)
		b.StartTimer()
	}
	b.StopTimer()
	testbench.Percentiles(b, "stopped", stopped)
	testbench.Percentiles(b, "capture", total)
	b.ReportMetric(0, "ns/op")
}

//go:build linux

package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/testbench"
)

// TestIdlePauseOnQEMU: a desktop with lifecycle.idlePauseSeconds is paused
// by its node once nothing used it that long (its status says why), and
// the next exec through the API resumes it and runs: the caller sees only
// the resume's time.
func TestIdlePauseOnQEMU(t *testing.T) {
	d := deskOnQEMU(t, func(s *api.SandboxSpec) { s.Lifecycle.IdlePauseSeconds = 2 })
	// The node's status round (every 5 s) pauses idle desktops.
	if err := d.nd.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	status := func() api.SandboxStatus {
		o, err := d.st.Get(context.Background(), api.KindSandbox, "desk")
		if err != nil {
			t.Fatal(err)
		}
		return o.(*api.Sandbox).Status
	}
	var s api.SandboxStatus
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if s = status(); s.Phase == api.SandboxPaused || time.Now().After(deadline) {
			break
		}
	}
	if s.Phase != api.SandboxPaused || s.Reason != node.ReasonIdlePaused || !strings.Contains(s.Message, "idlePauseSeconds") {
		t.Fatalf("desk is %s (%s: %s), want Paused for being idle", s.Phase, s.Reason, s.Message)
	}

	start := time.Now()
	var res ExecResponse
	d.call(t, "POST", "/api/v1/sandboxes/desk/exec", `{"command":"echo","args":["awake"],"timeoutSeconds":60}`, &res)
	took := time.Since(start)
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "awake" {
		t.Fatalf("exec on the idle desktop: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if s = status(); s.Phase != api.SandboxRunning {
		t.Fatalf("desk is %s (%s) after the exec, want Running", s.Phase, s.Reason)
	}
	t.Logf("exec on the idle-paused desktop answered in %s, resume included", took.Round(time.Millisecond))
}

// BenchmarkIdleResumeOnQEMU times the first use of a desktop its node
// paused for being idle (lifecycle.idlePauseSeconds 1): an exec, and an
// input action, each through the API, the resume included.
func BenchmarkIdleResumeOnQEMU(b *testing.B) {
	d := deskOnQEMU(b, func(s *api.SandboxSpec) { s.Lifecycle.IdlePauseSeconds = 1 })
	ctx := context.Background()
	if err := d.nd.Start(ctx); err != nil {
		b.Fatal(err)
	}
	paused := func() {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			o, err := d.st.Get(ctx, api.KindSandbox, "desk")
			if err != nil {
				b.Fatal(err)
			}
			if s := o.(*api.Sandbox).Status; s.Phase == api.SandboxPaused {
				return
			} else if time.Now().After(deadline) {
				b.Fatalf("desk is %s (%s), not paused for being idle", s.Phase, s.Reason)
			}
		}
	}
	var execs, inputs []time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		paused()
		b.StartTimer()
		start := time.Now()
		if n%2 == 0 {
			var res ExecResponse
			d.call(b, "POST", "/api/v1/sandboxes/desk/exec", `{"command":"true","timeoutSeconds":60}`, &res)
			execs = append(execs, time.Since(start))
		} else {
			d.call(b, "POST", "/api/v1/sandboxes/desk/input", `{"action":"mouse_move","coordinate":[10,10]}`, nil)
			inputs = append(inputs, time.Since(start))
		}
		n++
	}
	b.StopTimer()
	testbench.Percentiles(b, "exec", execs)
	testbench.Percentiles(b, "input", inputs)
	b.ReportMetric(0, "ns/op")
}

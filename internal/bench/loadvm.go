package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
)

// Names of the rows compareLoadvm measures.
const (
	loadvmRevertName = "QEMU loadvm in place (plain QEMU, same image): revert"
	loadvmAnswerName = "QEMU loadvm in place (plain QEMU, same image): revert + guest agent answers"
)

// compareLoadvm measures the obvious alternative to hvkube's reset: the
// same image booted in a plain QEMU (same devices and command line as
// hvkube's clones, guest RAM in ordinary memory), an internal snapshot
// taken once with savevm when the desktop is ready, and then o.Runs times:
// the desktop used a little (a file written and a program run through the
// guest agent, a command typed into the terminal; not timed), then
// reverted in place with loadvm. revert times loadvm alone (QEMU has
// loaded the snapshot and the guest runs again); answer times loadvm until
// the guest agent answers. It costs one cold boot.
func compareLoadvm(ctx context.Context, o QEMUOptions, logf func(string, ...any)) (revert, answer Result, err error) {
	revert = Result{Name: loadvmRevertName, Target: "reference"}
	answer = Result{Name: loadvmAnswerName, Target: "reference"}
	be, _, closeBackend, err := newBackend(ctx, "hvkube-bench-loadvm-", qemu.Config{ImageDir: o.ImageDir})
	if err != nil {
		return revert, answer, err
	}
	defer closeBackend()
	v, err := be.NewPlainVM(api.QEMUImage{Image: o.Image})
	if err != nil {
		return revert, answer, err
	}
	defer v.Close()
	logf("loadvm comparison: cold-booting a plain QEMU of %s (%s)", o.Image, be.Accel())
	t := time.Now()
	if err := v.Start(ctx); err != nil {
		return revert, answer, err
	}
	logf("loadvm comparison: desktop ready after %s; savevm", time.Since(t).Round(time.Millisecond))
	t = time.Now()
	if err := v.SaveVM(ctx, "clean"); err != nil {
		return revert, answer, err
	}
	logf("loadvm comparison: savevm took %s; use the desktop, then loadvm ×%d", time.Since(t).Round(time.Millisecond), o.Runs)
	const marker = "/var/tmp/hvkube-bench-loadvm"
	for i := 0; i < o.Runs; i++ {
		if err := useDesktop(ctx, v, marker); err != nil {
			return revert, answer, fmt.Errorf("loadvm comparison: use the desktop: %w", err)
		}
		t := time.Now()
		if err := v.LoadVM(ctx, "clean"); err != nil {
			return revert, answer, err
		}
		loaded := time.Since(t)
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := v.Ping(pctx)
		cancel()
		if err != nil {
			return revert, answer, fmt.Errorf("loadvm comparison: after loadvm: %w", err)
		}
		revert.Samples = append(revert.Samples, loaded)
		answer.Samples = append(answer.Samples, time.Since(t))
		if i == 0 {
			// What is timed must be a revert: the file written since the
			// snapshot is gone.
			res, err := v.Exec(ctx, backend.ExecRequest{Path: "/usr/bin/test", Args: []string{"-e", marker}})
			if err != nil {
				return revert, answer, err
			}
			if res.ExitCode == 0 {
				return revert, answer, fmt.Errorf("loadvm comparison: %s is still there after loadvm", marker)
			}
		}
	}
	return revert, answer, nil
}

// useDesktop gives a revert work to undo: it writes 256 KiB of random data
// to path and hashes it through the guest agent, and types ls and Enter
// into the terminal (clicked first) through QMP input. Then it gives the
// guest a moment to draw.
func useDesktop(ctx context.Context, v *qemu.PlainVM, path string) error {
	data := make([]byte, 256<<10)
	rand.Read(data)
	if err := v.WriteFile(ctx, path, data); err != nil {
		return err
	}
	if _, err := v.Exec(ctx, backend.ExecRequest{Path: "/usr/bin/sha256sum", Args: []string{path}}); err != nil {
		return err
	}
	// The terminal covers this point of the desktop.
	x, y := qmp.AbsMax*2/5, qmp.AbsMax*2/5
	steps := [][]qmp.InputEvent{
		append(qmp.AbsMove(x, y), qmp.ButtonDown(qmp.ButtonLeft)),
		{qmp.ButtonUp(qmp.ButtonLeft)},
	}
	for _, key := range []string{"l", "s", "ret"} {
		steps = append(steps, []qmp.InputEvent{qmp.KeyDown(key)}, []qmp.InputEvent{qmp.KeyUp(key)})
	}
	for _, ev := range steps {
		if err := v.Input(ctx, ev); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(300 * time.Millisecond):
	}
	return nil
}

// ratioFact compares hvkube's reset with QEMU's loadvm in place plus the
// guest agent's answer (both end with a clean desktop whose agent can be
// used), p50 against p50, against the target of at most half. It is empty
// when either has no samples.
func ratioFact(reset, answer Result) string {
	if len(reset.Samples) == 0 || len(answer.Samples) == 0 {
		return ""
	}
	r50, a50 := reset.Percentile(50), answer.Percentile(50)
	return fmt.Sprintf("hvkube's reset p50 %s is %.2fx QEMU's loadvm in place + guest agent answer p50 %s (plain QEMU, same image; target ≤ 0.50x); p95 %s vs %s",
		fmtDur(r50), float64(r50)/float64(a50), fmtDur(a50), fmtDur(reset.Percentile(95)), fmtDur(answer.Percentile(95)))
}

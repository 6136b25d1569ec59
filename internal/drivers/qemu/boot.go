package qemu

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/backend"
)

// A cold boot is bounded by the progress the guest makes, not by the
// clock alone. On a busy host an emulated guest gets a fraction of a core:
// its boot takes longer on the clock but not in the work it does, and a
// fixed deadline failed it again at every retry. So each stage of a boot
// (the guest agent answers; the desktop is ready) may use BootTimeout of
// the CPU time QEMU gets, and at most bootWallFactor times that on the
// clock, whatever the CPU.
const (
	bootWallFactor = 6
	// bootPoll is how often the watch reads QEMU's CPU time.
	bootPoll = time.Second
	// bootReport is how often a long stage says how it goes (progress).
	bootReport = 30 * time.Second
)

// bootWatch bounds the stages of one cold boot of process pid.
type bootWatch struct {
	pid int
	// budget is a stage's CPU time: BootTimeout for each vCPU (QEMU's
	// CPU time counts every vCPU thread's).
	budget   time.Duration
	wall     time.Duration // a stage's bound on the clock
	progress backend.Progress
	cancel   context.CancelCauseFunc
	now      func() time.Time
	cpu      func(pid int) (time.Duration, error)

	mu sync.Mutex // guards the following fields
	// stage is what the boot waits for; since and cpuAt are when it began
	// on the clock and in QEMU's CPU time.
	stage    string
	since    time.Time
	cpuAt    time.Duration
	reported time.Time
}

// watchBoot returns a context that ends when the stage under way has used
// its budget (the cause says which stage, and how long it took), and a
// function that stops the watch and returns once it has stopped (it may be
// called more than once; after it, progress is told nothing more). The
// guest has cpus vCPUs. progress, when not nil, is told how a long stage
// goes every bootReport.
func (b *Backend) watchBoot(ctx context.Context, pid, cpus int, progress backend.Progress) (context.Context, *bootWatch, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &bootWatch{pid: pid, budget: b.cfg.BootTimeout * time.Duration(max(cpus, 1)), wall: bootWallFactor * b.cfg.BootTimeout,
		progress: progress, cancel: cancel, now: time.Now, cpu: processCPU}
	w.begin("the guest agent")
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(bootPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := w.check(); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
	var once sync.Once
	return ctx, w, func() {
		once.Do(func() {
			close(done)
			<-stopped
			cancel(nil)
		})
	}
}

// begin starts a stage: what the boot waits for now, with a budget of its
// own.
func (w *bootWatch) begin(stage string) {
	cpu, _ := w.cpu(w.pid)
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	w.stage, w.since, w.cpuAt, w.reported = stage, now, cpu, now
}

// check returns why the stage under way is over its budget, or nil; it
// reports progress when a report is due.
func (w *bootWatch) check() error {
	cpu, err := w.cpu(w.pid)
	w.mu.Lock()
	now := w.now()
	stage, took := w.stage, now.Sub(w.since)
	used := cpu - w.cpuAt
	report := w.progress != nil && now.Sub(w.reported) >= bootReport
	if report {
		w.reported = now
	}
	w.mu.Unlock()
	if err != nil {
		// No CPU time to go by (the process went, or no /proc): the
		// clock alone bounds the stage, at the budget.
		used = took
	}
	switch {
	case used >= w.budget:
		return fmt.Errorf("waited %s for %s: the guest had %s of CPU time, the budget of a boot stage (%s)", took.Round(time.Second), stage, used.Round(time.Second), w.budget)
	case took >= w.wall:
		return fmt.Errorf("waited %s for %s: the guest had only %s of CPU time in that time (the host is too busy)", took.Round(time.Second), stage, used.Round(time.Second))
	}
	if report {
		w.progress(fmt.Sprintf("waiting for %s: %s so far, %s of the guest's CPU time of %s", stage, took.Round(time.Second), used.Round(time.Second), w.budget))
	}
	return nil
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/capacity"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/scheduler"
)

// DensityOptions size the density benchmark on QEMU.
type DensityOptions struct {
	ImageDir string
	Image    string // image name: linux-desktop, browser-desktop or osworld
	// Max is the most desktops the pool asks for.
	Max int
	// Resumes is how many held desktops are resumed one at a time.
	Resumes int
	// Burst is how many agents are submitted at once on the full host.
	Burst int
	// Pressure is the size of a second pool created on the full host; 0
	// skips the step.
	Pressure int
	// KSMRunning is how many desktops run for the KSM on/off step; 0
	// skips it.
	KSMRunning int
	// MemoryLimitPercent is the backend's qemu.Config.MemoryLimitPercent;
	// 0 is the backend's default.
	MemoryLimitPercent int
	// ReadyAhead is hvkube serve's --ready-ahead: the fewest idle
	// desktops of the pool readied ahead (0 none), or -1 for every clone.
	ReadyAhead int
	Log        io.Writer
}

// Key is the benchmarks.md section of a run: "density" for linux-desktop,
// "density-IMAGE" for another image; a run with a pressure step has
// "density-pressure[-IMAGE]" of its own.
func (o DensityOptions) Key() string {
	if o.Pressure > 0 {
		return sectionKey("density-pressure", o.Image)
	}
	return sectionKey("density", o.Image)
}

// command is the command line that reproduces a run.
func (o DensityOptions) command() string {
	s := fmt.Sprintf("hvkube bench density --image %s --max %d --resumes %d --burst %d --pressure %d --ksm-running %d",
		o.Image, o.Max, o.Resumes, o.Burst, o.Pressure, o.KSMRunning)
	if o.MemoryLimitPercent != 0 {
		s += fmt.Sprintf(" --memory-limit-percent %d", o.MemoryLimitPercent)
	}
	return s + fmt.Sprintf(" --ready-ahead %d", o.ReadyAhead)
}

// Names of what the benchmark creates, and its bounds.
const (
	densityTemplate = "density"
	densityPool     = "density"
	pressurePool    = "density-pressure"
	// refusalQuiet is how long no desktop may reach Paused, while one
	// waits for memory, before the fill counts as refused.
	refusalQuiet = time.Minute
	// noMoveQuiet is how long the pressure step waits for a first desktop
	// to move to disk.
	noMoveQuiet = 3 * time.Minute
	// opTimeout bounds one API call on a sandbox.
	opTimeout = 2 * time.Minute
	// restoreClaims is how many agents claim moved desktops.
	restoreClaims = 5
	// ksmScanTimeout bounds the wait for KSM's two full scans.
	ksmScanTimeout = 5 * time.Minute
	// ksmPagesToScan is pages_to_scan while KSM is measured.
	ksmPagesToScan = 1000
)

// Density measures how many warm desktops one host holds, through a real
// server's API on the QEMU backend: a pool of o.Max desktops is filled
// until all are paused or the node refuses more for memory; then held
// desktops are resumed, agents are submitted at once, optionally a second
// pool puts the host under pressure and KSM is switched on and off. Every
// object and VM it creates is deleted on the way out, also on failure or
// when ctx ends. On an error after the template is built, the report
// holds what was measured so far.
func Density(ctx context.Context, o DensityOptions) (rep *Report, err error) {
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, format+"\n", args...) }
	qb, err := startQEMUBench(ctx, "hvkube-bench-density-", qemu.Config{ImageDir: o.ImageDir, MemoryLimitPercent: o.MemoryLimitPercent, WarmOnRequest: o.ReadyAhead >= 0}, nil, o.Log,
		func(no *node.Options) { no.ReadyAhead = node.ReadyAheadFlag(o.ReadyAhead) })
	if err != nil {
		return nil, err
	}
	defer qb.close()
	be, h, c, tr := qb.be, qb.h, qb.c, qb.tr
	sw, err := newSandboxWatch(qb.wctx, c)
	if err != nil {
		return nil, err
	}
	d := &densityRun{o: o, be: be, h: h, c: c, tr: tr, sw: sw, logf: logf}
	if err := d.run(ctx); err != nil {
		return d.rep, err
	}
	return d.rep, nil
}

// densityRun is one run of Density: what its steps share.
type densityRun struct {
	o    DensityOptions
	be   *qemu.Backend
	h    *httpAPI
	c    *client.Client
	tr   *agentTracker
	sw   *sandboxWatch
	logf func(string, ...any)
	rep  *Report
	// held are the desktops the fill held (Paused), by name.
	held []string
}

func (d *densityRun) run(ctx context.Context) error {
	if err := d.buildTemplate(ctx); err != nil {
		return err
	}
	if err := d.fill(ctx); err != nil {
		return err
	}
	if len(d.held) == 0 {
		return errors.New("the fill held no desktop")
	}
	if err := d.checkHeld(ctx); err != nil {
		return err
	}
	if err := d.resumes(ctx); err != nil {
		return err
	}
	if err := d.burst(ctx); err != nil {
		return err
	}
	if d.o.Pressure > 0 {
		if err := d.pressure(ctx); err != nil {
			return err
		}
	}
	if d.o.KSMRunning > 0 {
		if err := d.ksm(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (d *densityRun) fact(format string, args ...any) {
	d.rep.Facts = append(d.rep.Facts, fmt.Sprintf(format, args...))
}

// buildTemplate builds the template from the image (a cold boot) and
// starts the report, whose title names the image, guest memory and
// accelerator.
func (d *densityRun) buildTemplate(ctx context.Context) error {
	d.logf("accelerator: %s (%s)", d.be.Accel(), d.be.AccelReason())
	d.logf("building the template from %s (a cold boot)…", d.o.Image)
	img, err := readImage(d.o.ImageDir, d.o.Image)
	if err != nil {
		return err
	}
	tpl := benchTemplate(densityTemplate, d.o.Image)
	tpl.Spec.Resources.MemoryMB = img.MemoryMB // the guest memory the image is made for
	if err := d.h.create(ctx, "templates", tpl); err != nil {
		return fmt.Errorf("create template: %w", err)
	}
	start := time.Now()
	if err := waitFor(ctx, 45*time.Minute, func() (bool, error) { return templateReady(ctx, d.h, densityTemplate) }); err != nil {
		return fmt.Errorf("template %s: %w", densityTemplate, err)
	}
	var t api.Template
	if err := d.h.get(ctx, "/api/v1/templates/"+densityTemplate, &t); err != nil {
		return fmt.Errorf("get template: %w", err)
	}
	d.logf("template built in %s", time.Since(start).Round(time.Second))
	d.rep = &Report{
		Title:   fmt.Sprintf("Warm desktop density on QEMU (%s, %d MB guest, %s)%s", d.o.Image, t.Spec.Resources.MemoryMB, d.be.Accel(), pressureTitle(d.o.Pressure)),
		Command: d.o.command(),
	}
	d.fact("accelerator: %s (%s)", d.be.Accel(), d.be.AccelReason())
	return nil
}

// fillTimeout bounds a fill of n desktops.
func fillTimeout(n int) time.Duration { return 10*time.Minute + time.Duration(n)*5*time.Second }

// fill creates one pool of o.Max desktops and follows it until all are
// paused or the node refuses more, then records what the host holds.
func (d *densityRun) fill(ctx context.Context) error {
	memBefore, err := readMeminfo()
	if err != nil {
		return err
	}
	cpu0, self0 := qemuCPUTicks(), selfCPUTicks()
	pool := benchPool(densityPool, densityTemplate, d.o.Max)
	pool.Spec.WarmTier = "paused"
	d.logf("fill: a pool of %d desktops, until all are paused or the node refuses more…", d.o.Max)
	created := time.Now()
	if err := d.h.create(ctx, "sandboxpools", pool); err != nil {
		return fmt.Errorf("create pool: %w", err)
	}
	outcome, err := d.waitFill(ctx, created)
	if err != nil {
		return err
	}
	if err := d.waitReadied(ctx); err != nil {
		return err
	}
	if err := d.waitAhead(ctx); err != nil {
		return err
	}
	self1 := selfCPUTicks()
	memAfter, err := readMeminfo()
	if err != nil {
		return err
	}
	held := d.heldDesktops()
	d.held = make([]string, len(held))
	for i, sb := range held {
		d.held[i] = sb.Metadata.Name
	}
	d.logf("fill: %s; %d desktops held", outcome, len(held))
	d.fact("fill: %d of %d desktops held (Paused): %s", len(held), d.o.Max, outcome)
	d.fillTimes(created, held)
	d.fillCPU(held, cpu0, self1-self0)
	d.fact("host memory before the fill: %s; after: %s", memBefore, memAfter)
	d.footprints(held)
	return nil
}

// pressureTitle ends the title of a run with a pressure step.
func pressureTitle(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(", then a second pool of %d under memory pressure", n)
}

// waitReadied waits until the backend has readied every clone it made on
// demand (warm.go), so that what is measured next (memory, footprints,
// resumes) is of readied desktops, as on a host left to settle.
func (d *densityRun) waitReadied(ctx context.Context) error {
	start := time.Now()
	last := start
	for n := d.be.Readying(); n > 0; n = d.be.Readying() {
		if time.Since(start) > readyTimeout {
			return fmt.Errorf("fill: %d clones still to ready after %s", n, readyTimeout)
		}
		if time.Since(last) >= 10*time.Second {
			d.logf("  fill: %d clones still to ready…", n)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if took := time.Since(start); took > time.Second {
		d.fact("fill: the last clones were readied %s after the fill ended", took.Round(time.Second))
	}
	return nil
}

// waitAhead waits, where the node readies desktops ahead, until it has
// readied those next in line for a claim, and records how many of the
// held desktops are readied.
func (d *densityRun) waitAhead(ctx context.Context) error {
	if d.o.ReadyAhead < 0 {
		return nil
	}
	start := time.Now()
	for {
		cold := d.unreadied(ctx)
		next := d.nextInLine(d.heldDesktops(), d.o.ReadyAhead)
		waiting := 0
		for _, sb := range next {
			if cold[sb.Status.BackendID] {
				waiting++
			}
		}
		if waiting == 0 && d.be.Readying() == 0 {
			held := d.heldDesktops()
			ready := 0
			for _, sb := range held {
				if !cold[sb.Status.BackendID] {
					ready++
				}
			}
			d.fact("fill: %d of the %d held desktops readied (the node readies the %d next in line for a claim, --ready-ahead), the others as cloned", ready, len(held), d.o.ReadyAhead)
			return nil
		}
		if time.Since(start) > readyTimeout {
			return fmt.Errorf("fill: %d of the desktops next in line still to ready after %s", waiting, readyTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// unreadied is the backend's clones still as cloned, by backend ID.
func (d *densityRun) unreadied(ctx context.Context) map[string]bool {
	cold := map[string]bool{}
	for _, id := range d.be.Unreadied(ctx) {
		cold[id] = true
	}
	return cold
}

// nextInLine is the first n of sbs in the order the scheduler hands them
// out.
func (d *densityRun) nextInLine(sbs []*api.Sandbox, n int) []*api.Sandbox {
	views := make([]scheduler.Sandbox, len(sbs))
	byName := make(map[string]*api.Sandbox, len(sbs))
	for i, sb := range sbs {
		views[i] = scheduler.ViewOf(sb)
		byName[sb.Metadata.Name] = sb
	}
	scheduler.SortForClaim(views, time.Now())
	out := make([]*api.Sandbox, 0, min(n, len(views)))
	for _, v := range views[:min(n, len(views))] {
		out = append(out, byName[v.Name])
	}
	return out
}

// readyTimeout bounds the wait for clones to be readied after the fill.
const readyTimeout = 20 * time.Minute

// waitFill follows the pool's sandboxes until all are paused or the node
// refuses more, logging progress every 10 s, and says which.
func (d *densityRun) waitFill(ctx context.Context, created time.Time) (string, error) {
	var outcome string
	lastLog := created
	err := d.sw.until(ctx, fillTimeout(d.o.Max), func(now time.Time) bool {
		sbs := d.sw.pool(densityPool)
		n := countPhases(sbs)
		if now.Sub(lastLog) >= 10*time.Second {
			lastLog = now
			d.logf("  fill: %s after %s", n, now.Sub(created).Round(time.Second))
		}
		switch {
		case n.Paused >= d.o.Max:
			outcome = "all paused"
		case refused(sbs, d.sw.lastPaused(densityPool, created), now, refusalQuiet):
			outcome = fmt.Sprintf("the node refused more: %d waiting for memory (InsufficientMemory), none paused for %s", n.WaitingMemory, refusalQuiet)
		}
		return outcome != ""
	})
	if err != nil {
		return "", fmt.Errorf("fill: %s: %w", countPhases(d.sw.pool(densityPool)), err)
	}
	return outcome, nil
}

// heldDesktops are the pool's sandboxes now Paused, in the order they
// first paused.
func (d *densityRun) heldDesktops() []*api.Sandbox {
	var held []*api.Sandbox
	for _, sb := range d.sw.pool(densityPool) {
		if sb.Status.Phase == api.SandboxPaused {
			held = append(held, sb)
		}
	}
	at := d.sw.pausedAt(held)
	sort.SliceStable(held, func(i, j int) bool { return at[i].Before(at[j]) })
	return held
}

// fillTimes records when the held desktops paused and the fill's rates.
func (d *densityRun) fillTimes(created time.Time, held []*api.Sandbox) {
	times := d.sw.pausedAt(held)
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	times = nonZero(times)
	if len(times) == 0 {
		return
	}
	first, last := times[0], times[len(times)-1]
	d.fact("fill time: first desktop Paused %s after the pool was created, last after %s; first → last %s",
		fmtDur(first.Sub(created)), fmtDur(last.Sub(created)), fmtDur(last.Sub(first)))
	d.fact("fill rate (desktops reaching Paused per second): %.2f/s overall (first → last), %.2f/s sustained over the middle 80 %%",
		rate(times), middleRate(times, 0.8))
}

func nonZero(ts []time.Time) []time.Time {
	out := ts[:0:0]
	for _, t := range ts {
		if !t.IsZero() {
			out = append(out, t)
		}
	}
	return out
}

// fillCPU records the CPU time the fill cost per held desktop: its QEMU's
// (from /proc/PID/stat, less what it had used before the fill, as a
// spare made earlier had) and this process's (the server, node and
// controllers).
func (d *densityRun) fillCPU(held []*api.Sandbox, before map[int]int64, self int64) {
	var qemuTicks int64
	missing := 0
	for _, sb := range held {
		st, err := readStat(sb.Status.PID)
		if sb.Status.PID <= 0 || err != nil {
			missing++
			continue
		}
		qemuTicks += st.CPUTicks - before[sb.Status.PID]
	}
	n := float64(len(held))
	q, s := ticksToSeconds(qemuTicks), ticksToSeconds(self)
	d.fact("CPU per held desktop over the fill: %.2f s (QEMU %.2f s + hvkube %.2f s, of %.1f s and %.1f s in all; %d desktops without a readable process)",
		(q+s)/n, q/n, s/n, q, s, missing)
}

// footprints records the Pss of the held desktops' QEMU processes.
func (d *densityRun) footprints(held []*api.Sandbox) {
	var pss []int64
	var sum int64
	for _, sb := range held {
		kb, err := readPssKB(sb.Status.PID)
		if err != nil {
			d.logf("footprint of %s: %v", sb.Metadata.Name, err)
			continue
		}
		pss = append(pss, kb)
		sum += kb
	}
	if len(pss) == 0 {
		d.fact("footprint per held desktop: no QEMU process could be read")
		return
	}
	d.fact("footprint per held desktop (Pss of its QEMU, smaps_rollup): p50 %.1f MiB, p95 %.1f MiB, max %.1f MiB; %.0f MiB for all %d",
		kibToMiB(percentile(pss, 50)), kibToMiB(percentile(pss, 95)), kibToMiB(percentile(pss, 100)), kibToMiB(sum), len(pss))
	if d.o.ReadyAhead < 0 {
		return
	}
	cold := d.unreadied(context.Background())
	var ready, asCloned []int64
	for _, sb := range held {
		if kb, err := readPssKB(sb.Status.PID); err == nil {
			if cold[sb.Status.BackendID] {
				asCloned = append(asCloned, kb)
			} else {
				ready = append(ready, kb)
			}
		}
	}
	for _, g := range []struct {
		what string
		kb   []int64
	}{{"readied", ready}, {"as cloned", asCloned}} {
		if len(g.kb) > 0 {
			d.fact("footprint of a desktop %s: p50 %.1f MiB, p95 %.1f MiB (%d desktops)", g.what, kibToMiB(percentile(g.kb, 50)), kibToMiB(percentile(g.kb, 95)), len(g.kb))
		}
	}
}

// checkHeld checks, through the API, that every held desktop still exists
// with a live QEMU.
func (d *densityRun) checkHeld(ctx context.Context) error {
	sbs, err := d.listPool(ctx, densityPool)
	if err != nil {
		return err
	}
	problems := heldProblems(d.held, sbs, pidAlive)
	if len(problems) == 0 {
		d.fact("after the fill: all %d held desktops exist with a live QEMU process", len(d.held))
		return nil
	}
	d.fact("after the fill: %d of %d held desktops lost: %s", len(problems), len(d.held), strings.Join(firstFew(problems, 5), "; "))
	return nil
}

// heldProblems says which of the names is missing from sbs or has no live
// process (alive says whether a PID lives).
func heldProblems(names []string, sbs []*api.Sandbox, alive func(int) bool) []string {
	byName := map[string]*api.Sandbox{}
	for _, sb := range sbs {
		byName[sb.Metadata.Name] = sb
	}
	var out []string
	for _, n := range names {
		sb := byName[n]
		switch {
		case sb == nil:
			out = append(out, n+" is gone")
		case !alive(sb.Status.PID):
			out = append(out, fmt.Sprintf("%s (%s) has no live process (pid %d)", n, sb.Status.Phase, sb.Status.PID))
		}
	}
	return out
}

func (d *densityRun) listPool(ctx context.Context, pool string) ([]*api.Sandbox, error) {
	objs, err := d.c.List(ctx, "sandboxes", "pool="+pool)
	if err != nil {
		return nil, fmt.Errorf("list the sandboxes of pool %s: %w", pool, err)
	}
	out := make([]*api.Sandbox, len(objs))
	for i, o := range objs {
		out[i] = o.(*api.Sandbox)
	}
	return out, nil
}

// op runs pause, resume, save or reset on a sandbox through the API, as
// hvkube vm resume does, bounded by opTimeout.
func (d *densityRun) op(ctx context.Context, name, op string) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := d.c.SandboxOp(ctx, name, op); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	return nil
}

// resumes resumes o.Resumes held desktops one at a time, timing each,
// and pauses each again (untimed) so that it stays warm: first those next
// in line for a claim (readied ahead where the node readies some), then
// as many picked at random among the others (as cloned unless readied).
func (d *densityRun) resumes(ctx context.Context) error {
	if d.o.Resumes <= 0 {
		return nil
	}
	held := d.heldDesktops()
	n := min(d.o.Resumes, len(held))
	if d.o.ReadyAhead >= 0 {
		n = min(n, d.o.ReadyAhead)
	}
	next := d.nextInLine(held, n)
	taken := map[string]bool{}
	var first []string
	for _, sb := range next {
		first = append(first, sb.Metadata.Name)
		taken[sb.Metadata.Name] = true
	}
	r := Result{Name: "resume a held (paused) desktop via the API, after the fill, next in line for a claim"}
	if d.o.Image == "" || d.o.Image == "linux-desktop" {
		r.Target = "p50 ≤ 10 ms" // the target is set for linux desktops
	}
	own := Result{Name: "↳ the backend's own resume (cont, guest answers), from its Resumed event"}
	d.logf("resume: %d held desktops next in line for a claim, one at a time…", len(first))
	if err := d.resumeEach(ctx, first, &r, &own); err != nil {
		return err
	}
	if d.o.ReadyAhead < 0 {
		return nil
	}
	var others []string
	for _, i := range rand.Perm(len(held)) {
		if name := held[i].Metadata.Name; !taken[name] && len(others) < d.o.Resumes {
			others = append(others, name)
		}
	}
	d.logf("resume: %d other held desktops picked at random, one at a time…", len(others))
	cold := d.unreadied(ctx)
	asCloned := 0
	for _, sb := range held {
		if slices.Contains(others, sb.Metadata.Name) && cold[sb.Status.BackendID] {
			asCloned++
		}
	}
	r2 := Result{Name: fmt.Sprintf("resume a held desktop picked at random (%d of %d as cloned, first resume)", asCloned, len(others))}
	own2 := Result{Name: "↳ the backend's own resume, from its Resumed event"}
	return d.resumeEach(ctx, others, &r2, &own2)
}

// resumeEach resumes names one at a time, timing each into r (and the
// backend's own share into own), pauses each again, and records both.
func (d *densityRun) resumeEach(ctx context.Context, names []string, r, own *Result) error {
	for _, name := range names {
		t := time.Now()
		if err := d.op(ctx, name, "resume"); err != nil {
			return err
		}
		r.Samples = append(r.Samples, time.Since(t))
		if took, ok := d.resumeTook(ctx, name); ok {
			own.Samples = append(own.Samples, took)
		}
		// The clock is set in the background after a resume: paused
		// under it, the next resume of this desktop would first finish
		// it.
		time.Sleep(resumeSettle)
		if err := d.op(ctx, name, "pause"); err != nil {
			return err
		}
	}
	if len(r.Samples) > 0 {
		d.rep.Results = append(d.rep.Results, *r)
	}
	if len(own.Samples) > 0 {
		d.rep.Results = append(d.rep.Results, *own)
	}
	return nil
}

// resumeSettle is how long a desktop resumed by the benchmark runs before
// it is paused again.
const resumeSettle = 500 * time.Millisecond

// resumeTook reads what the backend's resume of name took from the node's
// newest Resumed event ("resume in D"), which is recorded just after the
// status; ok is false when none is found within a second.
func (d *densityRun) resumeTook(ctx context.Context, name string) (time.Duration, bool) {
	for try := 0; try < 20; try++ {
		evs, err := d.c.Events(ctx, api.KindSandbox, name)
		if err != nil {
			return 0, false
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Reason != "Resumed" {
				continue
			}
			if v, ok := strings.CutPrefix(evs[i].Message, "resume in "); ok {
				if took, err := time.ParseDuration(v); err == nil {
					return took, true
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, false
}

// submitAgents submits n one-step agents on pool at once, named
// prefix-NN, and returns their names and when each was submitted.
func (d *densityRun) submitAgents(ctx context.Context, prefix, pool string, n int) ([]string, []time.Time, error) {
	return d.submitEach(ctx, prefix, n, func(name string, _ int) *api.Agent { return stepAgent(name, pool, "b") })
}

// submitEach submits n agents at once, agent(name, i) each, named
// prefix-NN, and returns their names and when each was submitted.
func (d *densityRun) submitEach(ctx context.Context, prefix string, n int, agent func(name string, i int) *api.Agent) ([]string, []time.Time, error) {
	names := make([]string, n)
	starts := make([]time.Time, n)
	errs := make(chan error, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%02d", prefix, i)
		a := agent(names[i], i)
		go func() {
			starts[i] = time.Now()
			errs <- d.h.create(ctx, "agents", a)
		}()
	}
	var first error
	for range names {
		if err := <-errs; err != nil && first == nil {
			first = fmt.Errorf("submit: %w", err)
		}
	}
	return names, starts, first
}

// burst submits o.Burst agents at once on the full pool and records
// submitted → Running.
func (d *densityRun) burst(ctx context.Context) error {
	if d.o.Burst <= 0 {
		return nil
	}
	d.logf("burst: %d agents at once on the full host…", d.o.Burst)
	names, starts, err := d.submitAgents(ctx, "density-burst", densityPool, d.o.Burst)
	if err != nil {
		return err
	}
	seen, err := d.tr.waitDone(ctx, names, 5*time.Minute+time.Duration(d.o.Burst)*5*time.Second)
	if err != nil {
		return fmt.Errorf("burst: %w", err)
	}
	r := Result{Name: fmt.Sprintf("%d agents at once after the fill: submitted → Running", d.o.Burst)}
	for i, n := range names {
		r.Samples = append(r.Samples, seen[n].running.Sub(starts[i]))
	}
	d.rep.Results = append(d.rep.Results, r)
	// Their desktops are reset on release; later steps want them warm.
	if err := waitPoolWarm(ctx, d.h, densityPool, len(d.held), 3*time.Minute); err != nil {
		d.logf("burst: %v", err)
		d.fact("after the burst the pool was not all warm again within 3 minutes: %v", err)
	}
	return nil
}

// pressureTimeout bounds the pressure step for a pool of n.
func pressureTimeout(n int) time.Duration { return 10*time.Minute + time.Duration(n)*5*time.Second }

// pressure creates a second pool of o.Pressure desktops on the full host
// and records how many idle desktops of the first the node moves to disk
// for it, whether it filled, whether anything was lost, and how fast a
// moved desktop is claimed.
func (d *densityRun) pressure(ctx context.Context) error {
	before, err := d.listPool(ctx, densityPool)
	if err != nil {
		return err
	}
	d.logf("pressure: a second pool of %d desktops on the full host…", d.o.Pressure)
	start := time.Now()
	if err := d.h.create(ctx, "sandboxpools", benchPool(pressurePool, densityTemplate, d.o.Pressure)); err != nil {
		return fmt.Errorf("create pool %s: %w", pressurePool, err)
	}
	filled, err := d.waitPressure(ctx, start)
	if err != nil {
		return err
	}
	moved := d.sw.movedSince(densityPool, start)
	paused2 := countPhases(d.sw.pool(pressurePool)).Paused
	switch {
	case len(moved) == 0:
		d.fact("pressure: no desktop was moved to disk within %s of creating a second pool of %d; %d of it paused", noMoveQuiet, d.o.Pressure, paused2)
	default:
		d.fact("pressure: %d idle desktops of the first pool moved to disk (Saved, MovedToDisk) for a second pool of %d; the second pool filled: %t (%d paused)",
			len(moved), d.o.Pressure, filled, paused2)
	}
	if err := d.checkLost(ctx, len(before)); err != nil {
		return err
	}
	if len(moved) == 0 {
		return nil
	}
	return d.claimMoved(ctx, moved)
}

// waitPressure follows the second pool until it filled, or until nothing
// progressed (a desktop paused in it or moved to disk) for a minute, or
// for noMoveQuiet while nothing has moved; it says whether it filled.
func (d *densityRun) waitPressure(ctx context.Context, start time.Time) (bool, error) {
	filled := false
	lastProgress, lastLog := start, start
	seenPaused, seenMoved := 0, 0
	err := d.sw.until(ctx, pressureTimeout(d.o.Pressure), func(now time.Time) bool {
		paused := countPhases(d.sw.pool(pressurePool)).Paused
		moved := len(d.sw.movedSince(densityPool, start))
		if paused > seenPaused || moved > seenMoved {
			seenPaused, seenMoved, lastProgress = paused, moved, now
		}
		if now.Sub(lastLog) >= 10*time.Second {
			lastLog = now
			d.logf("  pressure: %d of %d paused in the second pool, %d moved to disk, after %s", paused, d.o.Pressure, moved, now.Sub(start).Round(time.Second))
		}
		quiet := refusalQuiet
		if moved == 0 {
			quiet = noMoveQuiet
		}
		filled = paused >= d.o.Pressure
		return filled || now.Sub(lastProgress) >= quiet
	})
	if err != nil {
		return false, fmt.Errorf("pressure: %w", err)
	}
	return filled, nil
}

// checkLost records whether the first pool lost a sandbox, whether any of
// either pool is in Error, and whether every one that should have a
// process (Paused or Running) has a live one: a QEMU killed by the OOM
// killer would not.
func (d *densityRun) checkLost(ctx context.Context, before int) error {
	first, err := d.listPool(ctx, densityPool)
	if err != nil {
		return err
	}
	second, err := d.listPool(ctx, pressurePool)
	if err != nil {
		return err
	}
	all := append(append([]*api.Sandbox(nil), first...), second...)
	failed, dead := lostProblems(all, pidAlive)
	d.fact("pressure: the first pool has %d sandboxes (%d before), the second %d; in Error or Failed: %d; Paused or Running without a live QEMU (killed, e.g. by the OOM killer): %d%s",
		len(first), before, len(second), len(failed), len(dead), listed(append(failed, dead...)))
	return nil
}

func listed(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(firstFew(s, 5), "; ") + ")"
}

// lostProblems lists the sandboxes in phase Error (or Failed), and those
// that should have a process (Paused or Running) whose process is not
// alive; a Saved sandbox has none by design.
func lostProblems(sbs []*api.Sandbox, alive func(int) bool) (failed, dead []string) {
	for _, sb := range sbs {
		switch sb.Status.Phase {
		case api.SandboxError, "Failed":
			failed = append(failed, fmt.Sprintf("%s is %s: %s", sb.Metadata.Name, sb.Status.Phase, sb.Status.Message))
		case api.SandboxPaused, api.SandboxRunning:
			if !alive(sb.Status.PID) {
				dead = append(dead, fmt.Sprintf("%s is %s without a live process (pid %d)", sb.Metadata.Name, sb.Status.Phase, sb.Status.PID))
			}
		}
	}
	return failed, dead
}

// claimMoved sends agents to desktops moved to disk, each by name (a
// restore), and as many to the first pool (desktops still in RAM, the
// scheduler's choice), and records submitted → Running for each kind.
func (d *densityRun) claimMoved(ctx context.Context, moved map[string]bool) error {
	var targets []string
	for name := range moved {
		if sb := d.sw.get(name); sb != nil && sb.Status.Phase == api.SandboxSaved && sb.Status.CurrentAgent == "" && len(targets) < restoreClaims {
			targets = append(targets, name)
		}
	}
	d.logf("pressure: %d agents sent to moved desktops, %d to the first pool…", len(targets), restoreClaims)
	restore := Result{Name: "claim of a moved desktop (restored from disk): submitted → Running"}
	if err := d.claims(ctx, "density-restore", len(targets), func(name string, i int) *api.Agent {
		a := stepAgent(name, densityPool, "b")
		a.Spec.SandboxSelector, a.Spec.SandboxName = nil, targets[i]
		return a
	}, &restore); err != nil {
		return err
	}
	other := Result{Name: "claim of a desktop still in RAM, host under pressure: submitted → Running"}
	if err := d.claims(ctx, "density-inram", restoreClaims, func(name string, _ int) *api.Agent {
		return stepAgent(name, densityPool, "b")
	}, &other); err != nil {
		return err
	}
	d.fact("pressure: %d agents sent by name to desktops moved to disk completed on them", len(restore.Samples))
	for _, r := range []Result{restore, other} {
		if len(r.Samples) > 0 {
			d.rep.Results = append(d.rep.Results, r)
		}
	}
	return nil
}

// claims submits n agents at once and adds each one's submitted →
// Running to r once all are done.
func (d *densityRun) claims(ctx context.Context, prefix string, n int, agent func(string, int) *api.Agent, r *Result) error {
	if n == 0 {
		return nil
	}
	names, starts, err := d.submitEach(ctx, prefix, n, agent)
	if err != nil {
		return err
	}
	seen, err := d.tr.waitDone(ctx, names, 5*time.Minute)
	if err != nil {
		return fmt.Errorf("claims under pressure: %w", err)
	}
	for i, name := range names {
		r.Samples = append(r.Samples, seen[name].running.Sub(starts[i]))
	}
	return nil
}

// sandboxWatch follows every sandbox and every MovedToDisk event through
// client watches: each sandbox's latest state, when it was first seen
// Paused, and when it was first seen moved to disk.
type sandboxWatch struct {
	mu      sync.Mutex // guards the following fields
	items   map[string]*api.Sandbox
	paused  map[string]time.Time
	moved   map[string]time.Time
	err     error
	changed chan struct{}
}

func newSandboxWatch(ctx context.Context, c *client.Client) (*sandboxWatch, error) {
	w := &sandboxWatch{items: map[string]*api.Sandbox{}, paused: map[string]time.Time{}, moved: map[string]time.Time{}, changed: make(chan struct{})}
	for _, kind := range []string{"sandboxes", "events"} {
		ch, err := c.Watch(ctx, kind, "")
		if err != nil {
			return nil, fmt.Errorf("watch %s: %w", kind, err)
		}
		go func() {
			for ev := range ch {
				w.apply(ev)
			}
		}()
	}
	return w, nil
}

func (w *sandboxWatch) apply(ev client.WatchEvent) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if ev.Err != nil {
		w.err = ev.Err
	}
	switch x := ev.Object.(type) {
	case *api.Sandbox:
		name := x.Metadata.Name
		if ev.Type == "DELETED" {
			delete(w.items, name)
			break
		}
		w.items[name] = x
		if x.Status.Phase == api.SandboxPaused && w.paused[name].IsZero() {
			w.paused[name] = now
		}
		if x.Status.Phase == api.SandboxSaved && x.Status.Reason == node.ReasonMovedToDisk && w.moved[name].IsZero() {
			w.moved[name] = now
		}
	case *api.Event:
		name := x.InvolvedObject.Name
		if x.InvolvedObject.Kind == api.KindSandbox && x.Reason == node.ReasonMovedToDisk && w.moved[name].IsZero() {
			w.moved[name] = x.Timestamp
		}
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// pool returns the sandboxes of pool (label pool=NAME), by name.
func (w *sandboxWatch) pool(name string) []*api.Sandbox {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*api.Sandbox
	for _, sb := range w.items {
		if sb.Metadata.Labels["pool"] == name {
			out = append(out, sb)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Metadata.Name < out[j].Metadata.Name })
	return out
}

// get returns the sandbox's latest state, nil if it was never seen.
func (w *sandboxWatch) get(name string) *api.Sandbox {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.items[name]
}

// pausedAt returns when each sandbox was first seen Paused (zero if not).
func (w *sandboxWatch) pausedAt(sbs []*api.Sandbox) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]time.Time, len(sbs))
	for i, sb := range sbs {
		out[i] = w.paused[sb.Metadata.Name]
	}
	return out
}

// lastPaused is when a sandbox of pool was last first seen Paused, or
// since if none was.
func (w *sandboxWatch) lastPaused(pool string, since time.Time) time.Time {
	last := since
	for _, t := range w.pausedAt(w.pool(pool)) {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// movedSince returns the sandboxes of pool seen moved to disk since t.
func (w *sandboxWatch) movedSince(pool string, t time.Time) map[string]bool {
	sbs := w.pool(pool)
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for _, sb := range sbs {
		if m := w.moved[sb.Metadata.Name]; !m.IsZero() && !m.Before(t) {
			out[sb.Metadata.Name] = true
		}
	}
	return out
}

// until calls done on every change the watches see, and every second for
// the conditions that are about time, until it returns true; it fails
// when timeout passes, ctx ends or a watch breaks for good.
func (w *sandboxWatch) until(ctx context.Context, timeout time.Duration, done func(now time.Time) bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		w.mu.Lock()
		err, ch := w.err, w.changed
		w.mu.Unlock()
		if err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		if done(time.Now()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("not done after %s", timeout)
		case <-tick.C:
		case <-ch:
		}
	}
}

// phaseCounts counts sandboxes by phase.
type phaseCounts struct {
	Paused, Running, Saved, Creating, Pending, WaitingMemory, Error, Other int
}

func (n phaseCounts) String() string {
	return fmt.Sprintf("%d paused, %d running, %d saved, %d creating, %d pending (%d waiting for memory), %d in error",
		n.Paused, n.Running, n.Saved, n.Creating, n.Pending, n.WaitingMemory, n.Error)
}

func countPhases(sbs []*api.Sandbox) phaseCounts {
	var n phaseCounts
	for _, sb := range sbs {
		switch sb.Status.Phase {
		case api.SandboxPaused:
			n.Paused++
		case api.SandboxRunning:
			n.Running++
		case api.SandboxSaved:
			n.Saved++
		case api.SandboxCreating:
			n.Creating++
		case api.SandboxPending, "":
			n.Pending++
			if sb.Status.Reason == "InsufficientMemory" {
				n.WaitingMemory++
			}
		case api.SandboxError:
			n.Error++
		default:
			n.Other++
		}
	}
	return n
}

// refused reports whether the node refuses more desktops: none reached
// Paused for quiet since lastPaused while at least one of sbs waits
// Pending for memory (the node's reason when the backend's admission
// refuses).
func refused(sbs []*api.Sandbox, lastPaused, now time.Time, quiet time.Duration) bool {
	if now.Sub(lastPaused) < quiet {
		return false
	}
	for _, sb := range sbs {
		if sb.Status.Phase == api.SandboxPending && sb.Status.Reason == "InsufficientMemory" {
			return true
		}
	}
	return false
}

// rate is events per second between the first and the last of sorted
// times (n-1 intervals); 0 for fewer than two or no time between them.
func rate(times []time.Time) float64 {
	if len(times) < 2 {
		return 0
	}
	d := times[len(times)-1].Sub(times[0])
	if d <= 0 {
		return 0
	}
	return float64(len(times)-1) / d.Seconds()
}

// middleRate is rate over the middle share of sorted times: as many are
// left off at each end, so that a slow start or a slow end (the last
// desktops waiting for memory) does not count.
func middleRate(times []time.Time, share float64) float64 {
	// The epsilon keeps 10 × 0.1 at one (1 - 0.8 is not exactly 0.2).
	cut := int(float64(len(times))*(1-share)/2 + 1e-9)
	return rate(times[cut : len(times)-cut])
}

// ksm resumes o.KSMRunning desktops and measures them with KSM off and
// then on, if this process may switch KSM; the original settings are
// restored on the way out.
func (d *densityRun) ksm(ctx context.Context) (err error) {
	if !writable(ksmPath("run")) {
		d.fact("KSM: skipped, %s is not writable here", ksmPath("run"))
		return nil
	}
	restore, err := saveKSM()
	if err != nil {
		return err
	}
	defer func() {
		if rerr := restore(); rerr != nil {
			d.logf("KSM: restoring the settings: %v", rerr)
			err = errors.Join(err, rerr)
		}
	}()
	if err := ksmOff(); err != nil {
		return err
	}
	names, err := d.runningForKSM(ctx)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		d.fact("KSM: skipped, no idle paused desktop to run")
		return nil
	}
	d.logf("KSM: off; %d desktops running, waiting 20 s…", len(names))
	if err := clock.Sleep(ctx, 20*time.Second); err != nil {
		return err
	}
	pids, err := d.pids(ctx, names)
	if err != nil {
		return err
	}
	off, err := measureKSMWindow(pids)
	if err != nil {
		return err
	}
	d.fact("KSM off, %d desktops running for 20 s: host used (every process on it) %.0f MiB, Pss of their QEMUs %.0f MiB", len(pids), kibToMiB(off.usedKB), kibToMiB(off.pssKB))
	return d.ksmOn(ctx, pids, off)
}

// runningForKSM resumes o.KSMRunning idle paused desktops of the first
// pool and returns their names.
func (d *densityRun) runningForKSM(ctx context.Context) ([]string, error) {
	sbs, err := d.listPool(ctx, densityPool)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, sb := range sbs {
		if len(names) < d.o.KSMRunning && sb.Status.Phase == api.SandboxPaused && sb.Status.CurrentAgent == "" {
			names = append(names, sb.Metadata.Name)
		}
	}
	if len(names) < d.o.KSMRunning {
		d.fact("KSM: only %d idle paused desktops to run, of %d asked for", len(names), d.o.KSMRunning)
	}
	for _, n := range names {
		if err := d.op(ctx, n, "resume"); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// pids returns the QEMU PIDs of the named sandboxes as the API shows them.
func (d *densityRun) pids(ctx context.Context, names []string) ([]int, error) {
	var out []int
	for _, n := range names {
		o, err := d.c.Get(ctx, "sandboxes", n)
		if err != nil {
			return nil, fmt.Errorf("get sandbox %s: %w", n, err)
		}
		out = append(out, o.(*api.Sandbox).Status.PID)
	}
	return out, nil
}

// ksmOn switches KSM on with more pages scanned, waits for two full
// scans, and records what it saved and what ksmd cost.
func (d *densityRun) ksmOn(ctx context.Context, pids []int, off ksmWindow) error {
	if err := writeKSM("pages_to_scan", strconv.Itoa(ksmPagesToScan)); err != nil {
		return err
	}
	scans0, err := readKSMInt("full_scans")
	if err != nil {
		return err
	}
	ksmd0, ksmdPID := ksmdTicks()
	if err := writeKSM("run", "1"); err != nil {
		return err
	}
	d.logf("KSM: on (pages_to_scan %d), waiting for 2 full scans (at most %s)…", ksmPagesToScan, ksmScanTimeout)
	start := time.Now()
	scanned, err := waitKSMScans(ctx, scans0+2, ksmScanTimeout)
	if err != nil {
		return err
	}
	took := time.Since(start)
	on, err := measureKSMWindow(pids)
	if err != nil {
		return err
	}
	sharing, _ := readKSMInt("pages_sharing")
	shared, _ := readKSMInt("pages_shared")
	ksmd1, _ := ksmdTicks()
	page := int64(os.Getpagesize())
	scans := "after 2 full scans"
	if !scanned {
		scans = "2 full scans not done"
	}
	d.fact("KSM on (pages_to_scan %d), %s in %s: host used (every process on it) %.0f MiB (%+.0f MiB), Pss of the %d QEMUs %.0f MiB (%+.0f MiB)",
		ksmPagesToScan, scans, fmtDur(took), kibToMiB(on.usedKB), kibToMiB(on.usedKB-off.usedKB), len(pids), kibToMiB(on.pssKB), kibToMiB(on.pssKB-off.pssKB))
	cpu := "ksmd not found"
	if ksmdPID > 0 {
		cpu = fmt.Sprintf("ksmd used %.2f CPU s over the %s", ticksToSeconds(ksmd1-ksmd0), fmtDur(took))
	}
	d.fact("KSM: pages_sharing %d, pages_shared %d: %.0f MiB saved (pages_sharing × %d B); %s", sharing, shared, float64(sharing*page)/(1<<20), page, cpu)
	return nil
}

// ksmWindow is what one KSM setting leaves: host memory used (MemTotal -
// MemAvailable) and the Pss sum of the running desktops' QEMUs, in KiB.
type ksmWindow struct {
	usedKB, pssKB int64
}

func measureKSMWindow(pids []int) (ksmWindow, error) {
	m, err := readMeminfo()
	if err != nil {
		return ksmWindow{}, err
	}
	w := ksmWindow{usedKB: m.UsedKB()}
	for _, pid := range pids {
		kb, err := readPssKB(pid)
		if err != nil {
			return ksmWindow{}, err
		}
		w.pssKB += kb
	}
	return w, nil
}

// waitKSMScans waits until full_scans reaches want; false if timeout
// passed first.
func waitKSMScans(ctx context.Context, want int64, timeout time.Duration) (bool, error) {
	err := waitFor(ctx, timeout, func() (bool, error) {
		n, err := readKSMInt("full_scans")
		return n >= want, err
	})
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		if _, rerr := readKSMInt("full_scans"); rerr != nil {
			return false, rerr
		}
		return false, nil // the timeout: report what there is
	}
	return true, nil
}

func ksmPath(name string) string { return "/sys/kernel/mm/ksm/" + name }

func readKSM(name string) (string, error) {
	b, err := os.ReadFile(ksmPath(name))
	if err != nil {
		return "", fmt.Errorf("ksm: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func readKSMInt(name string) (int64, error) {
	s, err := readKSM(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ksm %s: %w", name, err)
	}
	return n, nil
}

func writeKSM(name, value string) error {
	if err := os.WriteFile(ksmPath(name), []byte(value), 0); err != nil {
		return fmt.Errorf("ksm: write %s to %s: %w", value, name, err)
	}
	return nil
}

// saveKSM reads run and pages_to_scan and returns a function that writes
// them back.
func saveKSM() (func() error, error) {
	run, err := readKSM("run")
	if err != nil {
		return nil, err
	}
	pages, err := readKSM("pages_to_scan")
	if err != nil {
		return nil, err
	}
	return func() error {
		return errors.Join(writeKSM("pages_to_scan", pages), writeKSM("run", run))
	}, nil
}

// ksmOff stops KSM, unmerging what it merged first if it ran.
func ksmOff() error {
	run, err := readKSM("run")
	if err != nil {
		return err
	}
	if run == "1" {
		if err := writeKSM("run", "2"); err != nil {
			return err
		}
	}
	return writeKSM("run", "0")
}

// writable reports whether path can be opened for writing (sysfs mounted
// read-only in a container cannot).
func writable(path string) bool {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// ---- /proc ----

// userHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture Go runs on).
const userHZ = 100

func ticksToSeconds(t int64) float64 { return float64(t) / userHZ }

func kibToMiB(kb int64) float64 { return float64(kb) / 1024 }

// memInfo is what /proc/meminfo says of host memory, in KiB.
type memInfo struct {
	TotalKB, AvailableKB int64
}

// UsedKB is memory not available: MemTotal - MemAvailable.
func (m memInfo) UsedKB() int64 { return m.TotalKB - m.AvailableKB }

func (m memInfo) String() string {
	return fmt.Sprintf("total %.0f MiB, used %.0f MiB, available %.0f MiB", kibToMiB(m.TotalKB), kibToMiB(m.UsedKB()), kibToMiB(m.AvailableKB))
}

// parseMeminfo reads MemTotal and MemAvailable from /proc/meminfo's text.
func parseMeminfo(text string) (memInfo, error) {
	total, ok1 := capacity.FieldKB([]byte(text), "MemTotal:")
	avail, ok2 := capacity.FieldKB([]byte(text), "MemAvailable:")
	if !ok1 || !ok2 || total == 0 || avail == 0 {
		return memInfo{}, errors.New("meminfo: no MemTotal or MemAvailable")
	}
	return memInfo{TotalKB: total, AvailableKB: avail}, nil
}

func readMeminfo() (memInfo, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return memInfo{}, err
	}
	return parseMeminfo(string(b))
}

// parsePss reads the Pss line (KiB) of /proc/PID/smaps_rollup's text.
func parsePss(text string) (int64, error) {
	kb, ok := capacity.FieldKB([]byte(text), "Pss:")
	if !ok {
		return 0, errors.New("smaps_rollup: no Pss line")
	}
	return kb, nil
}

func readPssKB(pid int) (int64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("no pid")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	kb, err := parsePss(string(b))
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return kb, nil
}

// procStat is what the benchmark reads of /proc/PID/stat.
type procStat struct {
	Comm  string
	State string
	// CPUTicks is utime + stime, in userHZ ticks.
	CPUTicks int64
}

// parseStat parses /proc/PID/stat's line. The command name is between
// the first "(" and the last ")", and may hold spaces and parentheses.
func parseStat(line string) (procStat, error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("stat: no command name in %q", line)
	}
	f := strings.Fields(line[end+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("stat: %d fields after the command name", len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return procStat{}, fmt.Errorf("stat: %w", err)
	}
	return procStat{Comm: line[open+1 : end], State: f[0], CPUTicks: utime + stime}, nil
}

func readStatFile(path string) (procStat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, err
	}
	return parseStat(strings.TrimSpace(string(b)))
}

func readStat(pid int) (procStat, error) {
	if pid <= 0 {
		return procStat{}, fmt.Errorf("no pid")
	}
	return readStatFile(fmt.Sprintf("/proc/%d/stat", pid))
}

// selfCPUTicks is this process's CPU time so far.
func selfCPUTicks() int64 {
	st, _ := readStatFile("/proc/self/stat")
	return st.CPUTicks
}

// pidAlive reports whether pid is a live (not zombie) QEMU process.
func pidAlive(pid int) bool {
	st, err := readStat(pid)
	return err == nil && st.State != "Z" && st.State != "X" && strings.HasPrefix(st.Comm, "qemu")
}

// procPIDs lists the PIDs in /proc.
func procPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// qemuCPUTicks returns the CPU time so far of every QEMU process, by PID.
func qemuCPUTicks() map[int]int64 {
	out := map[int]int64{}
	for _, pid := range procPIDs() {
		if st, err := readStat(pid); err == nil && strings.HasPrefix(st.Comm, "qemu-system") {
			out[pid] = st.CPUTicks
		}
	}
	return out
}

// ksmdTicks returns the CPU time so far of the ksmd kernel thread and its
// PID (0 when there is none).
func ksmdTicks() (int64, int) {
	for _, pid := range procPIDs() {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "ksmd" {
			continue
		}
		if st, err := readStat(pid); err == nil {
			return st.CPUTicks, pid
		}
	}
	return 0, 0
}

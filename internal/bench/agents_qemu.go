package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/node"
)

// qemuBench is a QEMU backend in a temporary directory, a server over it
// and its API clients, with a watch of its agents. close deletes every
// object and VM and removes the directory.
type qemuBench struct {
	be   *qemu.Backend
	h    *httpAPI
	c    *client.Client
	tr   *agentTracker
	wctx context.Context // ends at close: for more watches
	undo []func()
}

// startQEMUBench starts a qemuBench; cfg's Dir and Logger are set here.
func startQEMUBench(ctx context.Context, prefix string, cfg qemu.Config, open StoreFunc, logw io.Writer, more ...func(*node.Options)) (_ *qemuBench, err error) {
	qb := &qemuBench{}
	defer func() {
		if err != nil {
			qb.close() // what was started, even when the result is nil
		}
	}()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	qb.undo = append(qb.undo, func() { os.RemoveAll(dir) })
	log := quietLogger(logw)
	cfg.Dir, cfg.Logger = filepath.Join(dir, "qemu"), log
	if qb.be, err = qemu.New(ctx, cfg); err != nil {
		return nil, err
	}
	// VMs outlive a backend: end them, even on failure.
	qb.undo = append(qb.undo, func() { qb.be.Close() }, func() { deleteSandboxes(ctx, qb.be) })
	cl, err := startCluster(ctx, dir, qb.be, open, log, more...)
	if err != nil {
		return nil, err
	}
	qb.undo = append(qb.undo, cl.stop)
	qb.h = newHTTPAPI(cl.url, 16)
	qb.undo = append(qb.undo, func() {
		fmt.Fprintln(logw, "deleting everything…")
		if cerr := deleteEverything(context.WithoutCancel(ctx), qb.h); cerr != nil {
			fmt.Fprintf(logw, "cleaning up: %v\n", cerr)
		}
	})
	if qb.c, err = client.New(cl.url, ""); err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(ctx)
	qb.wctx = wctx
	qb.undo = append(qb.undo, stop)
	if qb.tr, err = newAgentTracker(wctx, qb.c); err != nil {
		return nil, err
	}
	return qb, nil
}

// close undoes what startQEMUBench did, last first.
func (qb *qemuBench) close() {
	for i := len(qb.undo) - 1; i >= 0; i-- {
		qb.undo[i]()
	}
	qb.undo = nil
}

// AgentsOptions size the agent benchmark on QEMU.
type AgentsOptions struct {
	ImageDir string
	Image    string // image name, e.g. linux-desktop
	// Runs is how many agents run one at a time, how many bursts of 10
	// run, and how many times a pool of 10 is filled.
	Runs int
	// Parallel is how many agents go at once on a pool of as many (10
	// when 0).
	Parallel int
	// Store opens the server's store (nil: SQLite in the benchmark's
	// directory); StoreName names it in the report.
	Store     StoreFunc
	StoreName string
	Log       io.Writer
}

// Agents measures agents end to end on the QEMU backend through a real
// server's API: submitted until Running on a warm (paused) sandbox of a
// pool, one at a time and ten at once; submitted until Completed for a
// one-step workflow; and a pool of 10 filled from zero. Everything it
// creates is deleted on the way out, also when a step fails.
func Agents(ctx context.Context, o AgentsOptions) (rep *Report, err error) {
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, format+"\n", args...) }
	if o.Parallel <= 0 {
		o.Parallel = 10
	}
	qb, err := startQEMUBench(ctx, "hvkube-bench-agents-", qemu.Config{ImageDir: o.ImageDir}, o.Store, o.Log)
	if err != nil {
		return nil, err
	}
	defer qb.close()
	be, h, tr := qb.be, qb.h, qb.tr

	logf("building the template (a cold boot)…")
	if err := h.create(ctx, "templates", benchTemplate("bench", o.Image)); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 10*time.Minute, func() (bool, error) { return templateReady(ctx, h, "bench") }); err != nil {
		return nil, fmt.Errorf("template bench: %w", err)
	}
	rep = &Report{Title: fmt.Sprintf("Agents on QEMU desktops (%s, 512 MB guest)", be.Accel())}

	// One at a time, on a pool of one warm sandbox.
	logf("one agent at a time on a warm sandbox ×%d", o.Runs)
	if err := h.create(ctx, "sandboxpools", benchPool("single", "bench", 1)); err != nil {
		return nil, err
	}
	toRun := Result{Name: "submitted → Running, warm sandbox, one at a time", Target: "p50 ≤ 50 ms"}
	toAcq := Result{Name: "submitted → its sandbox resumed, one at a time", Target: "p50 ≤ 50 ms"}
	toDone := Result{Name: "submitted → Completed, 1-step workflow"}
	// The same with 5 env values and 2 Secrets, taken in turns with the
	// plain one: what the session's variables add to a claim.
	envDone := Result{Name: "submitted → Completed, 1-step workflow, 5 env values and 2 Secrets", Target: "≤ 10 ms more than without (p50)"}
	for _, name := range []string{"bench-a", "bench-b"} {
		sec := &api.Secret{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSecret}}
		sec.Metadata.Name = name
		sec.Spec.StringData = map[string]string{"VALUE": "value-of-" + name}
		if err := h.create(ctx, "secrets", sec); err != nil {
			return nil, err
		}
	}
	var toSched, schedToRun, runToAcq Result
	for i := 0; i < o.Runs; i++ {
		if err := waitPoolWarm(ctx, h, "single", 1, 2*time.Minute); err != nil {
			return nil, err
		}
		// As in a pool that waited a while: the sandbox is paused, and the
		// spare clones the backend keeps are made.
		if err := waitQuiet(ctx, be); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("one-%03d", i)
		t, err := submit(ctx, h, name, "single")
		if err != nil {
			return nil, err
		}
		seen, err := tr.waitDone(ctx, []string{name}, 2*time.Minute)
		if err != nil {
			return nil, err
		}
		s := seen[name]
		toRun.Samples = append(toRun.Samples, s.running.Sub(t))
		toAcq.Samples = append(toAcq.Samples, s.acquired.Sub(t))
		toDone.Samples = append(toDone.Samples, s.completed.Sub(t))
		toSched.Samples = append(toSched.Samples, s.scheduled.Sub(t))
		schedToRun.Samples = append(schedToRun.Samples, s.running.Sub(s.scheduled))
		runToAcq.Samples = append(runToAcq.Samples, s.acquired.Sub(s.running))

		if err := waitPoolWarm(ctx, h, "single", 1, 2*time.Minute); err != nil {
			return nil, err
		}
		if err := waitQuiet(ctx, be); err != nil {
			return nil, err
		}
		name = fmt.Sprintf("env-%03d", i)
		t = time.Now()
		if err := h.create(ctx, "agents", envAgent(name, "single")); err != nil {
			return nil, err
		}
		if seen, err = tr.waitDone(ctx, []string{name}, 2*time.Minute); err != nil {
			return nil, err
		}
		envDone.Samples = append(envDone.Samples, seen[name].completed.Sub(t))
	}
	rep.Results = append(rep.Results, toRun, toAcq, toDone, envDone)
	// A claim marks a warm sandbox Running, so its watch may bring the
	// resume before the agent's shows it Running.
	resumed := "Running → sandbox resumed " + fmtDur(runToAcq.Percentile(50))
	if d := runToAcq.Percentile(50); d < 0 {
		resumed = "sandbox resumed " + fmtDur(-d) + " before Running"
	}
	rep.Facts = append(rep.Facts, fmt.Sprintf("one at a time, p50: submitted → claimed %s, claimed → Running %s, %s (as seen by watches of the API; a claim marks a warm sandbox Running, so its resume is seen with the claim)",
		fmtDur(toSched.Percentile(50)), fmtDur(schedToRun.Percentile(50)), resumed))
	if err := deletePool(ctx, h, "single"); err != nil {
		return nil, err
	}

	// Pools of n filled from zero, then n agents at once on them.
	n := o.Parallel
	logf("a pool of %d filled from zero, then %d agents at once ×%d", n, n, o.Runs)
	fill := Result{Name: fmt.Sprintf("pool of %d filled from zero (created → %d warm)", n, n)}
	if n == 10 {
		fill.Target = "≤ 5 s"
	}
	burstRun := Result{Name: fmt.Sprintf("%d at once on %d warm: submitted → Running", n, n)}
	burstAcq := Result{Name: fmt.Sprintf("%d at once: submitted → its sandbox resumed", n)}
	burstDone := Result{Name: fmt.Sprintf("%d at once: submitted → Completed", n)}
	del := Result{Name: fmt.Sprintf("pool of %d deleted (→ its sandboxes gone)", n)}
	for i := 0; i < o.Runs; i++ {
		pool := fmt.Sprintf("burst-%03d", i)
		t := time.Now()
		if err := h.create(ctx, "sandboxpools", benchPool(pool, "bench", n)); err != nil {
			return nil, err
		}
		if err := waitPoolWarm(ctx, h, pool, n, 3*time.Minute); err != nil {
			return nil, err
		}
		fill.Samples = append(fill.Samples, time.Since(t))
		if err := waitQuiet(ctx, be); err != nil {
			return nil, err
		}
		names := make([]string, n)
		starts := make([]time.Time, n)
		errs := make(chan error, len(names))
		for j := range names {
			names[j] = fmt.Sprintf("%s-%02d", pool, j)
			go func() {
				var err error
				starts[j], err = submit(ctx, h, names[j], pool)
				errs <- err
			}()
		}
		for range names {
			if err := <-errs; err != nil {
				return nil, err
			}
		}
		seen, err := tr.waitDone(ctx, names, 3*time.Minute)
		if err != nil {
			return nil, err
		}
		for j, n := range names {
			s := seen[n]
			burstRun.Samples = append(burstRun.Samples, s.running.Sub(starts[j]))
			burstAcq.Samples = append(burstAcq.Samples, s.acquired.Sub(starts[j]))
			burstDone.Samples = append(burstDone.Samples, s.completed.Sub(starts[j]))
		}
		t = time.Now()
		if err := deletePool(ctx, h, pool); err != nil {
			return nil, err
		}
		del.Samples = append(del.Samples, time.Since(t))
	}
	rep.Results = append(rep.Results, burstRun, burstAcq, burstDone, fill, del)
	rep.Command = fmt.Sprintf("hvkube bench agents --runs %d", o.Runs)
	if n != 10 {
		rep.Command += fmt.Sprintf(" --parallel %d", n)
	}
	if o.StoreName != "" {
		rep.Command += " --store " + o.StoreName
		rep.Title += ", " + o.StoreName + " store"
	}
	return rep, nil
}

// envAgent is stepAgent with 5 env values and 2 Secrets' (bench-a and
// bench-b, key VALUE) in its desktop's session.
func envAgent(name, pool string) *api.Agent {
	a := stepAgent(name, pool, "b")
	for i := range 5 {
		a.Spec.Env = append(a.Spec.Env, api.EnvVar{Name: fmt.Sprintf("PLAIN_%d", i), Value: fmt.Sprintf("value %d", i)})
	}
	for _, s := range []string{"bench-a", "bench-b"} {
		a.Spec.Env = append(a.Spec.Env, api.EnvVar{Name: "SECRET_" + s[len(s)-1:], ValueFrom: &api.EnvVarSource{SecretKeyRef: &api.SecretKeySelector{Name: s, Key: "VALUE"}}})
	}
	return a
}

// submit creates a one-step workflow agent on pool and returns when the
// request was sent.
func submit(ctx context.Context, h *httpAPI, name, pool string) (time.Time, error) {
	t := time.Now()
	return t, h.create(ctx, "agents", stepAgent(name, pool, "b"))
}

// deletePool deletes a pool and waits until its sandboxes are gone.
func deletePool(ctx context.Context, h *httpAPI, pool string) error {
	if err := h.remove(ctx, "sandboxpools", pool); err != nil {
		return err
	}
	return waitFor(ctx, 2*time.Minute, func() (bool, error) {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := h.get(ctx, "/api/v1/sandboxes?labelSelector="+url.QueryEscape("pool="+pool), &list); err != nil {
			return false, err
		}
		return len(list.Items) == 0, nil
	})
}

// deleteEverything deletes the agents, pools and sandboxes through the API
// and waits (a while) until the sandboxes are gone.
func deleteEverything(ctx context.Context, h *httpAPI) error {
	for _, resource := range []string{"agents", "sandboxpools", "sandboxes"} {
		var list struct {
			Items []struct {
				Metadata api.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if err := h.get(ctx, "/api/v1/"+resource, &list); err != nil {
			return err
		}
		for _, it := range list.Items {
			if err := h.remove(ctx, resource, it.Metadata.Name); err != nil {
				return err
			}
		}
	}
	return waitFor(ctx, 2*time.Minute, func() (bool, error) {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := h.get(ctx, "/api/v1/sandboxes", &list); err != nil {
			return false, err
		}
		return len(list.Items) == 0, nil
	})
}

// agentTracker notes, from watches of the API, when each agent was first
// seen Scheduled, Running and Completed, and when its sandbox was first
// seen running for it (acquired).
type agentTracker struct {
	mu      sync.Mutex // guards the following fields
	seen    map[string]*agentTimes
	failed  map[string]string
	err     error
	changed chan struct{}
}

type agentTimes struct {
	scheduled, running, acquired, completed time.Time
}

func newAgentTracker(ctx context.Context, c *client.Client) (*agentTracker, error) {
	t := &agentTracker{seen: map[string]*agentTimes{}, failed: map[string]string{}, changed: make(chan struct{})}
	for _, kind := range []string{"agents", "sandboxes"} {
		ch, err := c.Watch(ctx, kind, "")
		if err != nil {
			return nil, err
		}
		go func() {
			for ev := range ch {
				t.apply(ev)
			}
		}()
	}
	return t, nil
}

func (t *agentTracker) times(name string) *agentTimes {
	s := t.seen[name]
	if s == nil {
		s = &agentTimes{}
		t.seen[name] = s
	}
	return s
}

func (t *agentTracker) apply(ev client.WatchEvent) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if ev.Err != nil {
		t.err = ev.Err
	}
	switch x := ev.Object.(type) {
	case *api.Agent:
		s := t.times(x.Metadata.Name)
		switch x.Status.Phase {
		case api.AgentCompleted:
			if s.completed.IsZero() {
				s.completed = now
			}
			fallthrough
		case api.AgentRunning:
			if s.running.IsZero() {
				s.running = now
			}
			fallthrough
		case api.AgentScheduled:
			if s.scheduled.IsZero() {
				s.scheduled = now
			}
		case api.AgentFailed:
			t.failed[x.Metadata.Name] = x.Status.Message
		}
	case *api.Sandbox:
		if a := x.Status.CurrentAgent; a != "" {
			s := t.times(a)
			if s.scheduled.IsZero() {
				s.scheduled = now // the claim: the agent's binding
			}
			if x.Status.Phase == api.SandboxRunning && s.acquired.IsZero() {
				s.acquired = now
			}
		}
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

// waitDone waits until every named agent has completed and returns the
// times seen for them.
func (t *agentTracker) waitDone(ctx context.Context, names []string, timeout time.Duration) (map[string]agentTimes, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		out := map[string]agentTimes{}
		var missing string
		for _, n := range names {
			if msg, ok := t.failed[n]; ok {
				t.mu.Unlock()
				return nil, fmt.Errorf("agent %s failed: %s", n, msg)
			}
			s := t.seen[n]
			if s == nil || s.completed.IsZero() || s.acquired.IsZero() {
				missing = n
				break
			}
			out[n] = *s
		}
		err, ch := t.err, t.changed
		t.mu.Unlock()
		switch {
		case err != nil:
			return nil, err
		case missing == "":
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, fmt.Errorf("agent %s has not completed after %s", missing, timeout)
		case <-ch:
		}
	}
}

// waitQuiet waits until the backend makes no spare clone (each is a QEMU
// that takes CPU until it is paused), then a second more, as a pool that
// has waited a while for its next claim is.
func waitQuiet(ctx context.Context, be *qemu.Backend) error {
	if err := waitFor(ctx, time.Minute, func() (bool, error) { return !be.MakingSpares(), nil }); err != nil {
		return fmt.Errorf("spare clones still being made: %w", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second):
		return nil
	}
}

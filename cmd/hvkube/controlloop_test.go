//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
)

// TestDemo runs the demo of `make run` against a fresh server, as a new
// user would: the template, a desktop of its own, a pool of two desktops
// and five workflow agents that each leave their city in an artifact.
func TestDemo(t *testing.T) {
	qemutest.RequireImage(t, "linux-desktop")
	p := startServe(t, t.TempDir(), nil)
	out := t.TempDir()
	cmd := exec.Command("../../scripts/demo.sh")
	cmd.Env = append(os.Environ(), "HVKUBE_SERVER="+p.url(), "HVKUBE_DEMO_DIR="+out, "HVKUBE_BIN="+binary)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s\nserver log:\n%s", err, b, p.logs)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	shown := strings.Join(lines, "\n")
	for _, city := range []string{"Lisbon", "Nairobi", "Osaka", "Quito", "Tromso"} {
		name := "write-" + strings.ToLower(city)
		if !strings.Contains(shown, name+" artifacts/result.txt: "+city) {
			t.Errorf("the demo did not show %s's artifact:\n%s", name, b)
		}
	}
	if !strings.Contains(string(b), "Running") || !strings.Contains(string(b), "Completed") {
		t.Errorf("the agents' watch did not show them move:\n%s", b)
	}
}

// loop is a server with the linux-desktop template built, for the control
// loop's end-to-end tests.
type loop struct {
	t   *testing.T
	dir string
	p   *proc
	c   *client.Client
}

func newLoop(t *testing.T) *loop {
	t.Helper()
	qemutest.RequireImage(t, "linux-desktop")
	l := &loop{t: t, dir: t.TempDir()}
	l.start()
	mustHV(t, l.p, "apply", "-f", "../../examples/template.yaml")
	mustHV(t, l.p, "wait", "template", "linux-desktop", "--for", "phase=Ready", "--timeout", "10m", "-q")
	return l
}

func (l *loop) start(args ...string) {
	l.p = startServe(l.t, l.dir, nil, args...)
	c, err := client.New(l.p.url(), "")
	if err != nil {
		l.t.Fatal(err)
	}
	l.c = c
}

func (l *loop) apply(yaml string) {
	l.t.Helper()
	f := filepath.Join(l.t.TempDir(), "objects.yaml")
	os.WriteFile(f, []byte(yaml), 0o600)
	mustHV(l.t, l.p, "apply", "-f", f)
}

func (l *loop) agent(name string) *api.Agent {
	l.t.Helper()
	o, err := l.c.Get(context.Background(), api.KindAgent, name)
	if err != nil {
		l.t.Fatalf("get agent %s: %v", name, err)
	}
	return o.(*api.Agent)
}

// waitFor polls until cond holds or timeout passes.
func (l *loop) waitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(100 * time.Millisecond)
	}
	l.t.Fatalf("%s: after %s still %s\nserver log:\n%s", what, timeout, last, l.p.logs)
}

// completedEvents counts an agent's Completed events.
func (l *loop) completedEvents(name string) int {
	evs, err := l.c.Events(context.Background(), api.KindAgent, name)
	if err != nil {
		l.t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Reason == "Completed" {
			n++
		}
	}
	return n
}

func poolYAML(name string, replicas int, extra string) string {
	return fmt.Sprintf(`apiVersion: hvkube/v1
kind: SandboxPool
metadata: {name: %s}
spec:
  replicas: %d
  maxPerHost: %d
  template:
    spec:
      templateRef: linux-desktop
%s`, name, replicas, replicas, extra)
}

// slowAgentYAML is a workflow that waits seconds before it writes its
// name to a file and checks it, so that a test can hit it mid-run.
func slowAgentYAML(name, pool string, seconds float64, retries int) string {
	return fmt.Sprintf(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: %[1]s}
spec:
  sandboxSelector: {pool: %[2]s}
  type: workflow
  task:
    steps:
    - {action: wait, duration: %[3]g}
    - {action: exec, command: [sh, -c, 'echo %[1]s > /tmp/done']}
    - {action: assert, fileContains: {path: /tmp/done, text: %[1]s}}
  completion: {maxRetries: %[4]d, timeoutMinutes: 5}
---
`, name, pool, seconds, retries)
}

// TestControlLoopOnQEMU drives pools and agents on real QEMU: a sandbox's
// QEMU killed mid-task is retried on a fresh sandbox and replaced; a pool
// that cannot be satisfied says why; a server killed mid-run restarts and
// every agent ends Completed exactly once.
func TestControlLoopOnQEMU(t *testing.T) {
	l := newLoop(t)

	t.Run("RetryAfterQEMUKilled", func(t *testing.T) {
		l.apply(poolYAML("retry", 2, ""))
		// Both sandboxes are free before the agent comes, so that its
		// retry has one to take other than the one its attempt failed on.
		l.waitFor("the pool's two sandboxes are free", 3*time.Minute, func() (bool, string) {
			objs, err := l.c.List(context.Background(), api.KindSandbox, "pool=retry")
			if err != nil {
				return false, err.Error()
			}
			free, seen := 0, []string{}
			for _, o := range objs {
				sb := o.(*api.Sandbox)
				seen = append(seen, fmt.Sprintf("%s %s %q", sb.Metadata.Name, sb.Status.Phase, sb.Status.CurrentAgent))
				if sb.Status.CurrentAgent == "" && (sb.Status.Phase == api.SandboxPaused || sb.Status.Phase == api.SandboxRunning) {
					free++
				}
			}
			return free == 2, strings.Join(seen, ", ")
		})
		l.apply(slowAgentYAML("survivor", "retry", 4, 1))
		var sandbox string
		l.waitFor("the agent runs", 2*time.Minute, func() (bool, string) {
			a := l.agent("survivor")
			sandbox = a.Status.Sandbox
			return a.Status.Phase == api.AgentRunning, a.Status.Phase
		})
		// Killed mid-task: once the sandbox is acquired (a kill during the
		// acquire is healed by the acquire itself: it restores the clean
		// snapshot and the attempt goes on).
		var pid int
		l.waitFor("the sandbox is acquired", time.Minute, func() (bool, string) {
			o, err := l.c.Get(context.Background(), api.KindSandbox, sandbox)
			if err != nil {
				return false, err.Error()
			}
			s := o.(*api.Sandbox).Status
			pid = s.PID
			// The agent's Started event comes once its sandbox is acquired.
			evs, err := l.c.Events(context.Background(), api.KindAgent, "survivor")
			if err != nil {
				return false, err.Error()
			}
			acquired := slices.ContainsFunc(evs, func(ev *api.Event) bool { return ev.Reason == "Started" })
			return s.Phase == api.SandboxRunning && acquired && pid != 0, fmt.Sprintf("%s %s, acquired %v", s.Phase, s.Reason, acquired)
		})
		syscall.Kill(pid, syscall.SIGKILL)
		l.waitFor("the agent completes on a fresh sandbox", 3*time.Minute, func() (bool, string) {
			a := l.agent("survivor")
			return a.Status.Phase == api.AgentCompleted, fmt.Sprintf("%s %s %s", a.Status.Phase, a.Status.Reason, a.Status.Message)
		})
		a := l.agent("survivor")
		if a.Status.Attempts != 2 || a.Status.Failures != 1 || a.Status.Sandbox == sandbox || a.Status.FailedSandbox != sandbox {
			t.Fatalf("attempts %d, failures %d, sandbox %s (the killed one was %s)", a.Status.Attempts, a.Status.Failures, a.Status.Sandbox, sandbox)
		}
		// The killed sandbox comes back: restored from the clean snapshot
		// when it is released, or replaced by the pool.
		l.waitFor("the pool is whole again", 2*time.Minute, func() (bool, string) {
			p, err := l.c.Get(context.Background(), api.KindSandboxPool, "retry")
			if err != nil {
				return false, err.Error()
			}
			ready := p.(*api.SandboxPool).Status.Ready
			return ready == 2, fmt.Sprintf("ready %d", ready)
		})
		mustHV(t, l.p, "delete", "pool", "retry")
	})

	t.Run("UnsatisfiablePoolSaysWhy", func(t *testing.T) {
		for _, tt := range []struct {
			pool, extra, reason string
		}{
			{"gpu", "      resources: {gpu: true}\n", "NoGPU"},
			{"missing", "", "TemplateNotFound"},
		} {
			y := poolYAML(tt.pool, 2, tt.extra)
			if tt.reason == "TemplateNotFound" {
				y = strings.Replace(y, "templateRef: linux-desktop", "templateRef: no-such-template", 1)
			}
			l.apply(y)
			l.waitFor("pool "+tt.pool+" says why", time.Minute, func() (bool, string) {
				o, err := l.c.Get(context.Background(), api.KindSandboxPool, tt.pool)
				if err != nil {
					return false, err.Error()
				}
				c := api.FindCondition(o.(*api.SandboxPool).Status.Conditions, "Satisfiable")
				if c == nil {
					return false, "no Satisfiable condition"
				}
				return c.Status == api.ConditionFalse && c.Reason == tt.reason, fmt.Sprintf("%+v", *c)
			})
			evs, _ := l.c.Events(context.Background(), api.KindSandboxPool, tt.pool)
			warned := false
			for _, ev := range evs {
				warned = warned || (ev.Type == api.EventWarning && ev.Reason == tt.reason)
			}
			if !warned {
				t.Errorf("pool %s: no %s warning event", tt.pool, tt.reason)
			}
			// It does not spin: the pool holds its replicas, no more.
			time.Sleep(2 * time.Second)
			items, err := l.c.List(context.Background(), api.KindSandbox, "pool="+tt.pool)
			if err != nil || len(items) > 2 {
				t.Errorf("pool %s: %d sandboxes (%v)", tt.pool, len(items), err)
			}
			mustHV(t, l.p, "delete", "pool", tt.pool)
		}
	})

	t.Run("ServerKilledMidRun", func(t *testing.T) {
		l.apply(poolYAML("crash", 2, ""))
		var y strings.Builder
		names := []string{"crash-a", "crash-b", "crash-c", "crash-d"}
		for _, n := range names {
			y.WriteString(slowAgentYAML(n, "crash", 3, 0))
		}
		l.apply(y.String())
		l.waitFor("an agent runs", 2*time.Minute, func() (bool, string) {
			for _, n := range names {
				if l.agent(n).Status.Phase == api.AgentRunning {
					return true, ""
				}
			}
			return false, "none running"
		})
		l.p.cmd.Process.Signal(syscall.SIGKILL)
		<-l.p.done
		l.start()
		l.waitFor("every agent completes", 4*time.Minute, func() (bool, string) {
			var states []string
			done := true
			for _, n := range names {
				a := l.agent(n)
				states = append(states, n+"="+a.Status.Phase+"/"+a.Status.Reason)
				done = done && a.Status.Phase == api.AgentCompleted
			}
			return done, strings.Join(states, " ")
		})
		time.Sleep(time.Second)
		for _, n := range names {
			a := l.agent(n)
			if a.Status.Failures != 0 {
				t.Errorf("%s: %d failures: a restart is not the agent's failure", n, a.Status.Failures)
			}
			if got := l.completedEvents(n); got != 1 {
				t.Errorf("%s completed %d times", n, got)
			}
		}
		b, _ := json.Marshal(l.agent(names[0]).Status)
		t.Logf("after the restart: %s", b)
		mustHV(t, l.p, "delete", "pool", "crash")
	})
}

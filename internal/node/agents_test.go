package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// poolYAML is a pool of replicas sandboxes of the desk template; extra is
// more of its spec, indented by two spaces.
func poolYAML(name string, replicas int, extra string) string {
	return fmt.Sprintf(`apiVersion: hvkube/v1
kind: SandboxPool
metadata: {name: %s}
spec:
  replicas: %d
  template:
    spec: {templateRef: desk}
%s`, name, replicas, extra)
}

// runningBox creates the sandbox box of its own and waits until it runs.
func (c *cluster) runningBox(t *testing.T) {
	t.Helper()
	c.runningBoxOf(t, "desk")
}

// smallBox creates a template "small" with a small screen, which keeps
// screenshots cheap, and the sandbox box of it, and waits until it runs.
func (c *cluster) smallBox(t *testing.T) {
	t.Helper()
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Template
metadata: {name: small}
spec:
  qemu: {image: linux-desktop}
  display: {resolution: 320x200}
`))
	c.runningBoxOf(t, "small")
}

func (c *cluster) runningBoxOf(t *testing.T, template string) {
	t.Helper()
	c.create(t, yamlObj(t, sandboxYAML("box", "  templateRef: "+template+"\n")))
	eventually(t, "sandbox box runs", func() (bool, string) {
		sb := c.sandbox(t, "box")
		return sb.Status.Phase == api.SandboxRunning, sb.Status.Phase + "/" + sb.Status.Reason
	})
}

func (c *cluster) attemptDir(agent string, attempt int) string {
	return filepath.Join(c.dir, "agents", agent, fmt.Sprint(attempt))
}

// attemptLog is what the node logged of agent's attempt.
func (c *cluster) attemptLog(agent string, attempt int) ([]byte, error) {
	return attemptLogOf(c.nd, agent, attempt)
}

// waitReleased waits until sandbox name has no agent and is in phase.
func (c *cluster) waitReleased(t *testing.T, name, phase string) *api.Sandbox {
	t.Helper()
	var sb *api.Sandbox
	eventually(t, fmt.Sprintf("sandbox %s is released and %s", name, phase), func() (bool, string) {
		sb = c.sandbox(t, name)
		if sb == nil {
			return false, "gone"
		}
		return sb.Status.CurrentAgent == "" && sb.Status.Phase == phase, fmt.Sprintf("%s/%s, agent %q", sb.Status.Phase, sb.Status.Reason, sb.Status.CurrentAgent)
	})
	return sb
}

func TestWorkflowAgentRunsToCompletion(t *testing.T) {
	c := newClusterWith(t, clusterOptions{fake: fake.Options{Exec: guestShell}})
	c.smallBox(t)
	c.be.WriteFile("box", "/home/agent/report.txt", []byte("total: 42\n"))
	c.be.WriteFile("box", "/home/agent/notes.txt", []byte("checked\n"))
	c.be.WriteFile("box", "/home/agent/image.png", []byte("not collected"))
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxName: box
  task:
    input: {"ticket": 7}
    steps:
    - {action: left_click, coordinate: [100, 150]}
    - {action: type, text: "hello world"}
    - {action: key, text: "ctrl+s"}
    - {action: assert, fileContains: {path: /home/agent/report.txt, text: "42"}}
    - {action: exec, command: [cat, /home/agent/report.txt]}
    - {action: screenshot}
  output:
    screenshots: true
    artifacts: [/home/agent/*.txt]
`))
	a := c.waitAgent(t, "job", api.AgentCompleted)

	if got, want := c.be.Typed("box"), "hello world"; got != want {
		t.Errorf("typed %q, want %q", got, want)
	}
	// The click is a move and a press and release of the left button.
	var clicks []string
	for _, e := range c.be.Events("box") {
		if e.Kind != backend.EventKey {
			clicks = append(clicks, fmt.Sprintf("%s:%s:%v", e.Kind, e.Button, e.Down))
		}
	}
	if got, want := fmt.Sprint(clicks), "[move::false button:left:true button:left:false]"; got != want {
		t.Errorf("pointer events %s, want %s", got, want)
	}
	if got, want := [2]int{a.Status.Attempts, a.Status.Failures}, [2]int{1, 0}; got != want {
		t.Errorf("attempts/failures %v, want %v", got, want)
	}
	res := a.Status.Result
	if res == nil || !res.Success {
		t.Fatalf("result %+v, want success", res)
	}
	if got, want := len(res.Steps), 6; got != want {
		t.Fatalf("%d step results, want %d", got, want)
	}
	for i, sr := range res.Steps {
		if !sr.OK || sr.Error != "" {
			t.Errorf("step %d (%s): ok %v, error %q", i+1, sr.Action, sr.OK, sr.Error)
		}
	}
	if got, want := res.Steps[4].Output, "total: 42\n"; got != want {
		t.Errorf("exec step output %q, want %q", got, want)
	}

	// Artifacts: the matching guest files, copied into the attempt.
	dir := c.attemptDir("job", 1)
	if got, want := fmt.Sprint(res.Artifacts), "[artifacts/notes.txt artifacts/report.txt]"; got != want {
		t.Errorf("artifacts %s, want %s", got, want)
	}
	for file, want := range map[string]string{"notes.txt": "checked\n", "report.txt": "total: 42\n"} {
		got, err := os.ReadFile(filepath.Join(dir, "artifacts", file))
		if err != nil || string(got) != want {
			t.Errorf("artifact %s: %q, %v; want %q", file, got, err, want)
		}
	}

	// Screenshots: one after each step (the screenshot step is one) and
	// a final one.
	want := []string{"screenshots/step-01.png", "screenshots/step-02.png", "screenshots/step-03.png",
		"screenshots/step-04.png", "screenshots/step-05.png", "screenshots/step-06.png", "screenshots/final.png"}
	if got := res.Screenshots; !slices.Equal(got, want) {
		t.Errorf("screenshots %v, want %v", got, want)
	}
	for _, rel := range res.Screenshots {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("screenshot %s: %d bytes, %v; want a PNG", rel, len(b), err)
		}
	}
	if got := res.Steps[5].Screenshot; got != "screenshots/step-06.png" {
		t.Errorf("screenshot step names %q", got)
	}

	// The task's input reached the guest programs.
	var env []string
	for _, ex := range c.be.Execs("box") {
		if ex.Path == "cat" {
			env = ex.Env
		}
	}
	if !slices.Contains(env, "HVKUBE_AGENT=job") || !slices.Contains(env, `HVKUBE_TASK_INPUT={"ticket":7}`) {
		t.Errorf("exec environment %v, want the agent's name and input", env)
	}

	c.waitEvents(t, api.KindAgent, "job", "Completed", 1)
	// The run logs its outcome after writing it, before its event.
	if b, err := c.attemptLog("job", 1); err != nil || !strings.Contains(string(b), "completed") {
		t.Errorf("agent.log: %v, %q", err, b)
	}
	// The claim is recorded by no event of its own: the node's start
	// says where the attempt runs.
	if evs := c.events(t, api.KindAgent, "job", "Scheduled", "Started", "Completed"); !slices.Equal(evs, []string{"Started", "Completed"}) {
		t.Errorf("events %v, want Started, then Completed", evs)
	}
	// A sandbox of its own is released as the agent left it.
	c.waitReleased(t, "box", api.SandboxRunning)
	if got := c.be.Count(fake.OpReset); got != 0 {
		t.Errorf("%d resets of a sandbox of its own, want 0", got)
	}
}

func TestWorkflowAgentFailsAndRetries(t *testing.T) {
	tests := []struct {
		name  string
		step  string
		error string // in the failed step's error
	}{
		{"exec fails", `{action: exec, command: ["false"]}`, "exited with 1"},
		{"no such program", `{action: exec, command: [frobnicate]}`, "exited with 127"},
		{"file lacks the text", `{action: assert, fileContains: {path: /tmp/out.txt, text: "done"}}`, `does not contain "done"`},
		{"no such file", `{action: assert, fileContains: {path: /tmp/missing.txt, text: "done"}}`, "read /tmp/missing.txt"},
		{"exit code", `{action: assert, command: ["true"], exitCode: 3}`, "exited with 0, want 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			c.create(t, yamlObj(t, poolYAML("web", 2, "")))
			c.waitPool(t, "web", 2, api.SandboxPaused)
			c.create(t, yamlObj(t, fmt.Sprintf(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxSelector: {pool: web}
  completion: {maxRetries: 1}
  task:
    steps:
    - {action: type, text: "x"}
    - {action: exec, command: [touch, /tmp/out.txt]}
    - %s
    - {action: type, text: "never"}
`, tt.step)))
			a := c.waitAgent(t, "job", api.AgentFailed)
			if got, want := [2]int{a.Status.Attempts, a.Status.Failures}, [2]int{2, 2}; got != want {
				t.Errorf("attempts/failures %v, want %v", got, want)
			}
			if got, want := a.Status.Reason, "Failed"; got != want {
				t.Errorf("reason %q, want %q", got, want)
			}
			if !strings.Contains(a.Status.Message, "no retries left of 1") {
				t.Errorf("message %q, want it to say the retries are used up", a.Status.Message)
			}
			res := a.Status.Result
			if res == nil || res.Success || len(res.Steps) != 3 {
				t.Fatalf("result %+v, want a failure at step 3", res)
			}
			if last := res.Steps[2]; last.OK || !strings.Contains(last.Error, tt.error) {
				t.Errorf("failed step: ok %v, error %q; want an error with %q", last.OK, last.Error, tt.error)
			}
			if got := c.waitEvents(t, api.KindAgent, "job", "Failed", 2); got != 2 {
				t.Errorf("%d Failed events, want 2", got)
			}
			if got := c.waitEvents(t, api.KindAgent, "job", "Started", 2); got != 2 {
				t.Errorf("%d Started events, want 2: each try is placed again", got)
			}
			// Each try ran on a clean sandbox: both releases reset theirs.
			names := c.waitPool(t, "web", 2, api.SandboxPaused)
			if got, want := c.be.Count(fake.OpReset), 2; got != want {
				t.Errorf("%d resets, want %d", got, want)
			}
			typed := ""
			for _, n := range names {
				typed += c.be.Typed(n)
				if _, ok := c.be.ReadFile(n, "/tmp/out.txt"); ok {
					t.Errorf("sandbox %s keeps the failed attempt's file", n)
				}
			}
			if got, want := typed, "xx"; got != want {
				t.Errorf("typed %q over the pool, want %q: the step after the failure must not run", got, want)
			}
		})
	}
}

func TestCustomAgent(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		command string
		phase   string
		exit    int
		output  string // the result's output, as compact JSON
	}{
		{"guest cat of JSON", "guest", `[cat, /home/agent/answer.json]`, api.AgentCompleted, 0, `{"answer":42}`},
		{"guest cat of text", "guest", `[cat, /home/agent/notes.txt]`, api.AgentCompleted, 0, `"plain text"`},
		{"guest tee", "guest", `[tee, /tmp/written]`, api.AgentCompleted, 0, ``},
		{"guest cat of a missing file", "guest", `[cat, /nowhere]`, api.AgentFailed, 1, ``},
		{"host echo", "host", `[echo, '{"ok": true}']`, api.AgentCompleted, 0, `{"ok":true}`},
		{"host false", "host", `["false"]`, api.AgentFailed, 1, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClusterWith(t, clusterOptions{hostCommands: &HostCommands{}})
			c.runningBox(t)
			c.be.WriteFile("box", "/home/agent/answer.json", []byte(`{"answer": 42}`+"\n"))
			c.be.WriteFile("box", "/home/agent/notes.txt", []byte("plain text\n"))
			c.create(t, yamlObj(t, fmt.Sprintf(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxName: box
  type: custom
  task:
    in: %s
    command: %s
    input: {"q": 1}
`, tt.in, tt.command)))
			a := c.waitAgent(t, "job", tt.phase)
			res := a.Status.Result
			if res == nil || res.ExitCode == nil || *res.ExitCode != tt.exit {
				t.Fatalf("result %+v, want exit code %d", res, tt.exit)
			}
			if got := string(res.Output); got != tt.output {
				t.Errorf("output %s, want %s", got, tt.output)
			}
			if tt.phase == api.AgentFailed && !strings.Contains(a.Status.Message, fmt.Sprintf("exited with %d", tt.exit)) {
				t.Errorf("message %q, want the exit code", a.Status.Message)
			}
			if tt.in != "guest" {
				return
			}
			execs := c.be.Execs("box")
			if len(execs) == 0 {
				t.Fatal("nothing ran in the guest")
			}
			last := execs[len(execs)-1]
			if !slices.Contains(last.Env, "HVKUBE_AGENT=job") || !slices.Contains(last.Env, "HVKUBE_SANDBOX=box") || !slices.Contains(last.Env, `HVKUBE_TASK_INPUT={"q":1}`) {
				t.Errorf("guest environment %v, want the agent, sandbox and input", last.Env)
			}
			if tt.name == "guest tee" {
				if _, ok := c.be.ReadFile("box", "/tmp/written"); !ok {
					t.Error("tee wrote no file in the guest")
				}
			}
		})
	}
}

func TestMCPAgentCompletedThroughTheAPI(t *testing.T) {
	tests := []struct {
		name    string
		success bool
		phase   string
	}{
		{"success", true, api.AgentCompleted},
		{"failure", false, api.AgentFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			c.create(t, yamlObj(t, poolYAML("web", 1, "")))
			member := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
			c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxSelector: {pool: web}
  type: mcp-agent
`))
			c.waitAgent(t, "job", api.AgentRunning)
			eventually(t, "the sandbox runs for the agent", func() (bool, string) {
				sb := c.sandbox(t, member)
				return sb.Status.Phase == api.SandboxRunning && sb.Status.CurrentAgent == "job", sb.Status.Phase + " " + sb.Status.CurrentAgent
			})
			// What the API's complete call does.
			now := time.Now()
			out, err := reconcile.UpdateStatus(context.Background(), c.st, api.KindAgent, "job", func(a *api.Agent) bool {
				if a.Status.Phase != api.AgentRunning {
					return false
				}
				res := &api.AgentResult{Success: tt.success, Output: json.RawMessage(`{"done": true}`)}
				if tt.success {
					agentstate.Complete(a, res, now)
				} else {
					a.Status.Result = res
					agentstate.FailAttempt(a, "AgentFailed", "gave up", now)
				}
				return true
			})
			if err != nil || out.Status.Phase != tt.phase {
				t.Fatalf("complete: %v, phase %s", err, out.Status.Phase)
			}
			c.waitReleased(t, member, api.SandboxPaused)
			if got, want := c.be.Count(fake.OpReset), 1; got != want {
				t.Errorf("%d resets, want %d", got, want)
			}
			a := c.agent(t, "job")
			if a.Status.Phase != tt.phase || string(a.Status.Result.Output) != `{"done":true}` {
				t.Errorf("agent %s with output %s after the release, want %s as completed", a.Status.Phase, a.Status.Result.Output, tt.phase)
			}
		})
	}
}

// runningMCPAgent runs mcp-agent "job", with the completion given (YAML),
// on the one sandbox of pool "web", on an injected clock; it returns once
// the agent runs.
func runningMCPAgent(t *testing.T, completion string) (*cluster, *clock.Fake, string) {
	t.Helper()
	clk := clock.NewFake(time.Now())
	c := newClusterWith(t, clusterOptions{now: clk.Now})
	c.create(t, yamlObj(t, poolYAML("web", 1, "")))
	member := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxSelector: {pool: web}
  type: mcp-agent
  completion: `+completion+`
`))
	c.waitAgent(t, "job", api.AgentRunning)
	return c, clk, member
}

// TestMCPAgentDeadline lets an mcp-agent's deadline pass on the injected
// clock with nothing completing it: it fails with DeadlineExceeded and
// its sandbox is released.
func TestMCPAgentDeadline(t *testing.T) {
	c, clk, member := runningMCPAgent(t, "{timeoutMinutes: 1}")
	clk.Advance(3*time.Minute + time.Second)
	a := c.waitAgent(t, "job", api.AgentFailed)
	if got, want := a.Status.Reason, "DeadlineExceeded"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	c.waitReleased(t, member, api.SandboxPaused)
}

// TestMCPAgentHeartbeat: an mcp-agent that takes heartbeats runs on while
// they come, past the heartbeat interval, and fails with HeartbeatLost,
// its sandbox released, once they stop: a lease held by a process that
// died goes back to the pool long before its timeout.
func TestMCPAgentHeartbeat(t *testing.T) {
	c, clk, member := runningMCPAgent(t, "{timeoutMinutes: 60, heartbeatSeconds: 30}")
	beat := func() {
		t.Helper()
		now := clk.Now()
		if _, err := reconcile.UpdateStatus(context.Background(), c.st, api.KindAgent, "job", func(a *api.Agent) bool {
			a.Status.HeartbeatAt = &now
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ {
		clk.Advance(20 * time.Second)
		beat()
	}
	time.Sleep(200 * time.Millisecond) // the node sees the last one
	if a := c.agent(t, "job"); a.Status.Phase != api.AgentRunning {
		t.Fatalf("agent %s (%s) after 80 s of heartbeats every 20 s, want Running", a.Status.Phase, a.Status.Message)
	}
	clk.Advance(31 * time.Second)
	a := c.waitAgent(t, "job", api.AgentFailed)
	if got, want := a.Status.Reason, "HeartbeatLost"; got != want {
		t.Errorf("reason %q (%s), want %q", got, a.Status.Message, want)
	}
	c.waitReleased(t, member, api.SandboxPaused)
}

// waitingAgent starts agent "job" on the one sandbox of pool "web": it
// types "a", waits seconds, then types "b". It returns once the agent is in
// its wait.
func waitingAgent(t *testing.T, seconds string) (*cluster, string) {
	t.Helper()
	c := newCluster(t)
	c.create(t, yamlObj(t, poolYAML("web", 1, "")))
	member := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxSelector: {pool: web}
  task:
    steps:
    - {action: type, text: "a"}
    - {action: wait, duration: `+seconds+`}
    - {action: type, text: "b"}
`))
	eventually(t, "the agent is in its wait step", func() (bool, string) {
		return c.be.Typed(member) == "a", c.be.Typed(member)
	})
	return c, member
}

func TestDeleteRunningAgent(t *testing.T) {
	c, member := waitingAgent(t, "60")
	if _, _, err := c.st.Delete(context.Background(), api.KindAgent, "job", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitGone(t, api.KindAgent, "job")
	c.waitReleased(t, member, api.SandboxPaused)
	if got, want := c.be.Count(fake.OpReset), 1; got != want {
		t.Errorf("%d resets, want %d", got, want)
	}
	if got, want := c.be.Typed(member), "a"; got != want {
		t.Errorf("typed %q, want %q: the run went on after the delete", got, want)
	}
	evs := c.events(t, api.KindAgent, "job", "Cancelled", "Completed", "Failed")
	if got, want := fmt.Sprint(evs), "[Cancelled]"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	// The node removes them when it sees the agent gone, which may be
	// just after the store says so.
	eventually(t, "the agent's files are removed once it is gone", func() (bool, string) {
		_, err := os.Stat(filepath.Join(c.dir, "agents", "job"))
		return errors.Is(err, os.ErrNotExist), fmt.Sprint(err)
	})
}

// TestDeleteRunningAgentsFreesTheWorkers: an agent deleted while it runs
// does not hold one of the node's agent workers while its sandbox resets.
// With every reset held back, deleting more running agents than the node
// has workers still leaves a worker to start the next agent.
func TestDeleteRunningAgentsFreesTheWorkers(t *testing.T) {
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	c := newClusterWith(t, clusterOptions{fake: fake.Options{Delay: func(op string) time.Duration {
		if op == fake.OpReset {
			<-gate
		}
		return 0
	}}})
	t.Cleanup(open)
	const deleted = 5 // more than the node's 4 agent workers
	c.create(t, yamlObj(t, poolYAML("web", deleted+1, "")))
	c.waitPool(t, "web", deleted+1, api.SandboxPaused)
	agent := func(name, steps string) {
		c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: `+name+`}
spec:
  sandboxSelector: {pool: web}
  task:
    steps: [`+steps+`]
`))
	}
	for i := range deleted {
		agent(fmt.Sprintf("job-%d", i), `{action: wait, duration: 100}`)
	}
	for i := range deleted {
		c.waitAgent(t, fmt.Sprintf("job-%d", i), api.AgentRunning)
	}
	// Each attempt is Running before its sandbox is resumed; a sandbox
	// released before it ran for its agent needs no reset. Wait until all
	// five ran.
	eventually(t, "the deleted agents' sandboxes running", func() (bool, string) {
		items, _, err := c.st.List(context.Background(), api.KindSandbox, api.Selector{})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, it := range items {
			if sb := it.(*api.Sandbox); sb.Status.Phase == api.SandboxRunning && sb.Status.CurrentAgent != "" {
				running++
			}
		}
		return running == deleted, fmt.Sprintf("%d running", running)
	})
	for i := range deleted {
		if _, _, err := c.st.Delete(context.Background(), api.KindAgent, fmt.Sprintf("job-%d", i), store.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agent("late", `{action: type, text: "z"}`)
	c.waitAgent(t, "late", api.AgentCompleted)
	open()
	for i := range deleted {
		c.waitGone(t, api.KindAgent, fmt.Sprintf("job-%d", i))
	}
	eventually(t, "one reset per released sandbox", func() (bool, string) {
		got := c.be.Count(fake.OpReset)
		return got == deleted+1, fmt.Sprintf("%d resets, want %d", got, deleted+1)
	})
}

// TestPausedByItsAgentIsReset: a sandbox its agent paused (through the
// API) before it ended was used all the same: the next agent gets it
// reset, not as the last one left it.
func TestPausedByItsAgentIsReset(t *testing.T) {
	c, member := waitingAgent(t, "100")
	if err := c.nd.Pause(context.Background(), member); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.st.Delete(context.Background(), api.KindAgent, "job", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitGone(t, api.KindAgent, "job")
	c.waitReleased(t, member, api.SandboxPaused)
	if got, want := c.be.Count(fake.OpReset), 1; got != want {
		t.Errorf("%d resets, want %d: a sandbox its agent paused was released as unused", got, want)
	}
}

func TestAcquireFallbacks(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name     string
		fail     []string // ops that fail once on the sandbox, in order
		events   []string // the sandbox's warning events
		acquired string   // in the Acquired event; "" if it is not
		phase    string   // of the agent
	}{
		{"resume fails", []string{fake.OpResume}, []string{"ResumeFailed"}, "restored the clean snapshot and resumed", api.AgentCompleted},
		{"resume and reset fail", []string{fake.OpResume, fake.OpReset}, []string{"ResumeFailed", "RestoreFailed"}, "cloned a new VM", api.AgentCompleted},
		{"every way fails", []string{fake.OpResume, fake.OpReset, fake.OpCreate}, []string{"ResumeFailed", "RestoreFailed", "AcquireFailed"}, "", api.AgentFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			c.create(t, yamlObj(t, poolYAML("web", 1, "")))
			member := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
			for _, op := range tt.fail {
				c.be.FailNext(op, member, boom)
			}
			creates := c.be.Count(fake.OpCreate)
			c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxSelector: {pool: web}
  task:
    steps:
    - {action: type, text: "x"}
`))
			c.waitAgent(t, "job", tt.phase)
			warnings := c.events(t, api.KindSandbox, member, "ResumeFailed", "RestoreFailed", "AcquireFailed")
			if got, want := fmt.Sprint(warnings), fmt.Sprint(tt.events); got != want {
				t.Errorf("events %s, want %s", got, want)
			}
			evs, err := c.st.ListEvents(context.Background(), store.EventFilter{Kind: api.KindSandbox, Name: member})
			if err != nil {
				t.Fatal(err)
			}
			acquired := ""
			for _, ev := range evs {
				if ev.Reason == "Acquired" {
					acquired = ev.Message
				}
			}
			if tt.acquired == "" {
				if acquired != "" {
					t.Errorf("Acquired event %q, want none", acquired)
				}
				// The sandbox is broken: the pool replaces it.
				eventually(t, "the pool replaces the broken sandbox", func() (bool, string) {
					m := c.members(t, "web")
					return len(m) == 1 && m[0].Metadata.Name != member && m[0].Status.Phase == api.SandboxPaused, fmt.Sprint(c.events(t, api.KindSandboxPool, "web"))
				})
				return
			}
			if !strings.Contains(acquired, tt.acquired) {
				t.Errorf("Acquired event %q, want it to say %q", acquired, tt.acquired)
			}
			if got, want := c.be.Typed(member), "x"; got != want {
				t.Errorf("typed %q, want %q", got, want)
			}
			if slices.Contains(tt.fail, fake.OpReset) && c.be.Count(fake.OpCreate) != creates+1 {
				t.Errorf("%d creates, want %d: the VM was not cloned again", c.be.Count(fake.OpCreate), creates+1)
			}
			c.waitReleased(t, member, api.SandboxPaused)
		})
	}
}

func TestReleasePolicies(t *testing.T) {
	tests := []struct {
		name   string
		extra  string
		idle   string // phase of an idle sandbox before its first agent
		after  string // and after its agent is done
		resets int
		kept   bool // the agent's file is still there after the release
	}{
		{"reset", "  releasePolicy: reset\n", api.SandboxPaused, api.SandboxPaused, 1, false},
		{"reset to the saved tier", "  releasePolicy: reset\n  warmTier: saved\n", api.SandboxSaved, api.SandboxSaved, 1, false},
		{"save", "  releasePolicy: save\n", api.SandboxPaused, api.SandboxSaved, 0, true},
		{"save from the saved tier", "  releasePolicy: save\n  warmTier: saved\n", api.SandboxSaved, api.SandboxSaved, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			c.create(t, yamlObj(t, poolYAML("web", 1, tt.extra)))
			member := c.waitPool(t, "web", 1, tt.idle)[0]
			c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxSelector: {pool: web}
  task:
    steps:
    - {action: exec, command: [touch, /tmp/mark]}
`))
			c.waitAgent(t, "job", api.AgentCompleted)
			sb := c.waitReleased(t, member, tt.after)
			if sb.Status.ReleasedAt == nil {
				t.Error("no releasedAt")
			}
			if got := c.be.Count(fake.OpReset); got != tt.resets {
				t.Errorf("%d resets, want %d", got, tt.resets)
			}
			if _, ok := c.be.ReadFile(member, "/tmp/mark"); ok != tt.kept {
				t.Errorf("the agent's file kept %v, want %v", ok, tt.kept)
			}
			info, err := c.be.Inspect(context.Background(), member)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]string{api.SandboxPaused: backend.StatePaused, api.SandboxSaved: backend.StateSaved}[tt.after]; info.State != want {
				t.Errorf("VM state %s, want %s", info.State, want)
			}
		})
	}
}

func TestReleasePolicyDestroy(t *testing.T) {
	c := newCluster(t)
	c.create(t, yamlObj(t, poolYAML("web", 1, "  releasePolicy: destroy\n")))
	member := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxSelector: {pool: web}
  task:
    steps:
    - {action: type, text: "x"}
`))
	c.waitAgent(t, "job", api.AgentCompleted)
	c.waitGone(t, api.KindSandbox, member)
	if _, err := c.be.Inspect(context.Background(), member); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("VM of the destroyed sandbox: %v, want gone", err)
	}
	// The pool refills.
	fresh := c.waitPool(t, "web", 1, api.SandboxPaused)[0]
	if fresh == member {
		t.Fatalf("the destroyed sandbox %s is back", member)
	}
	if got := c.be.Count(fake.OpReset); got != 0 {
		t.Errorf("%d resets, want 0", got)
	}
}

// TestNodeRestartMidRun stops the node and the controllers while an
// agent's workflow waits, and starts new ones on the same store and
// backend: the attempt is interrupted, not failed, runs again from the
// start on a clean sandbox, and completes exactly once.
func TestNodeRestartMidRun(t *testing.T) {
	c, member := waitingAgent(t, "1.5")
	c.restart(t)
	a := c.waitAgent(t, "job", api.AgentCompleted)
	if got, want := [2]int{a.Status.Attempts, a.Status.Failures}, [2]int{2, 0}; got != want {
		t.Errorf("attempts/failures %v, want %v: an interrupted attempt is not a failure", got, want)
	}
	c.waitEvents(t, api.KindAgent, "job", "Completed", 1)
	evs := c.events(t, api.KindAgent, "job", "Interrupted", "Completed", "Failed")
	if got, want := fmt.Sprint(evs), "[Interrupted Completed]"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	// The first attempt typed "a" and stopped; the second ran it all.
	if got, want := c.be.Count(fake.OpInput), 3; got != want {
		t.Errorf("%d input calls, want %d", got, want)
	}
	if got, want := c.be.Typed(member), "aab"; got != want {
		t.Errorf("typed %q, want %q", got, want)
	}
	c.waitReleased(t, member, api.SandboxPaused)
	// Reset once when the interrupted attempt was put back, once after
	// the second.
	if got, want := c.be.Count(fake.OpReset), 2; got != want {
		t.Errorf("%d resets, want %d", got, want)
	}
	// Nothing runs it a third time.
	time.Sleep(time.Second)
	if got := c.agent(t, "job"); got.Status.Phase != api.AgentCompleted || got.Status.Attempts != 2 {
		t.Errorf("agent %s after %d attempts, want Completed after 2", got.Status.Phase, got.Status.Attempts)
	}
	if got := count(c.events(t, api.KindAgent, "job"), "Completed"); got != 1 {
		t.Errorf("%d Completed events, want 1", got)
	}
}

// TestAgentRunsUnderAnInjectedClock runs a workflow on a node whose clock
// is far behind the wall clock: it must complete.
func TestAgentRunsUnderAnInjectedClock(t *testing.T) {
	clk := clock.NewFake(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newClusterWith(t, clusterOptions{now: clk.Now})
	c.create(t, yamlObj(t, poolYAML("web", 1, "")))
	c.waitPool(t, "web", 1, api.SandboxPaused)
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxSelector: {pool: web}
  task:
    steps:
    - {action: type, text: "x"}
`))
	eventually(t, "the agent ends", func() (bool, string) {
		a := c.agent(t, "job")
		return agentstate.Finished(a), a.Status.Phase
	})
	if a := c.agent(t, "job"); a.Status.Phase != api.AgentCompleted {
		t.Errorf("agent %s (%s: %s), want Completed", a.Status.Phase, a.Status.Reason, a.Status.Message)
	}
}

// TestAssertWithDuration: an assert with a duration checks again until it
// passes (a file the guest writes a little later), and fails once the
// duration is over.
func TestAssertWithDuration(t *testing.T) {
	c := newClusterWith(t, clusterOptions{fake: fake.Options{Exec: guestShell}})
	c.create(t, yamlObj(t, sandboxYAML("box", "")))
	eventually(t, "sandbox box runs", func() (bool, string) {
		sb := c.sandbox(t, "box")
		return sb.Status.Phase == api.SandboxRunning, sb.Status.Phase
	})
	go func() {
		time.Sleep(600 * time.Millisecond)
		c.be.WriteFile("box", "/tmp/late.txt", []byte("arrived\n"))
	}()
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: patient}
spec:
  sandboxName: box
  task:
    steps:
    - {action: assert, fileContains: {path: /tmp/late.txt, text: arrived}, duration: 10}
    - {action: assert, fileContains: {path: /tmp/never.txt, text: x}, duration: 0.5}
  completion: {maxRetries: 0}
`))
	a := c.waitAgent(t, "patient", api.AgentFailed)
	steps := a.Status.Result.Steps
	if len(steps) != 2 || !steps[0].OK || steps[1].OK {
		t.Fatalf("steps %+v: want the late file found and the missing one failed", steps)
	}
	if d := steps[1].DurationSeconds; d < 0.5 {
		t.Fatalf("the failing assert gave up after %.2fs, before its 0.5 s", d)
	}
}

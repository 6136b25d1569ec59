package node

import (
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/secrets"
)

const sessionSecret = "s3ss10n-v4lue"

// envShell is guestShell with what writing a session needs: install of
// standard input, rm, and printenv.
func envShell(id string, fs fake.FS, req backend.ExecRequest) (backend.ExecResult, error) {
	switch path.Base(req.Path) {
	case "install":
		if n := len(req.Args); n > 0 && req.Args[n-2] == "/proc/self/fd/0" {
			fs.WriteFile(req.Args[n-1], req.Stdin)
			return backend.ExecResult{}, nil
		}
	case "rm":
		for _, p := range req.Args[1:] {
			fs.Remove(p)
		}
		return backend.ExecResult{}, nil
	case "printenv":
		for _, kv := range req.Env {
			if k, v, _ := strings.Cut(kv, "="); k == req.Args[0] {
				return backend.ExecResult{Stdout: []byte(v + "\n")}, nil
			}
		}
		return backend.ExecResult{ExitCode: 1}, nil
	}
	return guestShell(id, fs, req)
}

// fakeEnv resolves spec.env as the API servers would, with one Secret
// value: API_KEY's.
func fakeEnv(_ context.Context, sb *api.Sandbox, a *api.Agent) (secrets.Env, error) {
	var env secrets.Env
	add := func(vars []api.EnvVar) error {
		for _, e := range vars {
			if e.ValueFrom != nil {
				if e.ValueFrom.SecretKeyRef.Name != "keys" {
					return api.Invalid("spec.env", "Secret %s does not exist", e.ValueFrom.SecretKeyRef.Name)
				}
				env.Vars, env.Secret = append(env.Vars, e.Name+"="+sessionSecret), append(env.Secret, sessionSecret)
				continue
			}
			env.Vars = append(env.Vars, e.Name+"="+e.Value)
		}
		return nil
	}
	if err := add(sb.Spec.Env); err != nil {
		return env, err
	}
	if a != nil {
		if err := add(a.Spec.Env); err != nil {
			return env, err
		}
	}
	return env, nil
}

// TestSessionEnv: an agent's variables reach its workflow's programs in
// the guest and its command on the host, and the session's file; what came
// from a Secret is masked in its steps' output, its result and its log;
// the release takes the file out, so the next agent's programs get none.
func TestSessionEnv(t *testing.T) {
	c := newClusterWith(t, clusterOptions{fake: fake.Options{Exec: envShell}, env: fakeEnv, hostCommands: &HostCommands{}})
	c.runningBox(t)
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: reader}
spec:
  sandboxName: box
  type: workflow
  env:
  - {name: MODE, value: plain}
  - name: API_KEY
    valueFrom: {secretKeyRef: {name: keys, key: API_KEY}}
  task:
    steps:
    - {action: exec, command: [printenv, API_KEY]}
    - {action: exec, command: [printenv, MODE]}
    - {action: exec, command: [cat, /run/hvkube/env]}
`))
	a := c.waitAgent(t, "reader", api.AgentCompleted)
	steps := a.Status.Result.Steps
	if got := strings.TrimSpace(steps[0].Output); got != "***" {
		t.Errorf("printenv API_KEY shows %q, want ***", got)
	}
	if got := strings.TrimSpace(steps[1].Output); got != "plain" {
		t.Errorf("printenv MODE shows %q", got)
	}
	if !strings.Contains(steps[2].Output, "export API_KEY='***'") || !strings.Contains(steps[2].Output, "export MODE='plain'") {
		t.Errorf("the session file, as the step shows it: %q", steps[2].Output)
	}
	log, _ := c.attemptLog("reader", 1)
	if strings.Contains(string(log), sessionSecret) || !strings.Contains(string(log), "session variables resolved") {
		t.Errorf("the attempt's log:\n%s", log)
	}
	if segs, _ := filepath.Glob(filepath.Join(c.dir, "agents", "*.journal")); len(segs) == 0 {
		t.Error("no journal of the logs")
	} else {
		for _, seg := range segs {
			if b, _ := os.ReadFile(seg); strings.Contains(string(b), sessionSecret) {
				t.Errorf("the journal %s holds the Secret's value", filepath.Base(seg))
			}
		}
	}
	c.waitReleased(t, "box", api.SandboxRunning)
	if _, ok := c.be.ReadFile("box", sessionEnvFile); ok {
		t.Error("the release left the session file")
	}
	if c.nd.holdsSession("box") {
		t.Error("the node still gives the released session's variables")
	}

	// A custom agent on the host gets them in its environment; what it
	// prints of the secret is masked in its result.
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: host}
spec:
  sandboxName: box
  type: custom
  env:
  - name: API_KEY
    valueFrom: {secretKeyRef: {name: keys, key: API_KEY}}
  task:
    command: [sh, -c, 'printf "{\"key\": \"%s\"}" "$API_KEY"']
`))
	a = c.waitAgent(t, "host", api.AgentCompleted)
	if got := string(a.Status.Result.Output); got != `{"key":"***"}` {
		t.Errorf("the host command's output: %s", got)
	}
	c.waitReleased(t, "box", api.SandboxRunning)

	// The next agent: no variable, no file.
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: after}
spec:
  sandboxName: box
  type: workflow
  task:
    steps:
    - {action: exec, command: [printenv, API_KEY]}
`))
	a = c.waitAgent(t, "after", api.AgentFailed)
	if !strings.Contains(a.Status.Result.Steps[0].Error, "exited with 1") {
		t.Errorf("printenv for the next agent: %+v", a.Status.Result.Steps[0])
	}
	// A Secret that is not there fails the attempt, naming the field.
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: missing}
spec:
  sandboxName: box
  type: workflow
  env:
  - name: API_KEY
    valueFrom: {secretKeyRef: {name: nope, key: API_KEY}}
  task:
    steps:
    - {action: exec, command: ["true"]}
`))
	a = c.waitAgent(t, "missing", api.AgentFailed)
	if !strings.Contains(a.Status.Message, "Secret nope does not exist") {
		t.Errorf("message %q, want the missing Secret named", a.Status.Message)
	}
}

// TestSnapshotRefusesASession: a template of a sandbox that holds session
// variables would keep them: the capture is refused.
func TestSnapshotRefusesASession(t *testing.T) {
	c := newClusterWith(t, clusterOptions{fake: fake.Options{Exec: envShell}, env: fakeEnv})
	c.runningBox(t)
	c.nd.sessions.set("box", session{vars: []string{"API_KEY=" + sessionSecret}, agent: "reader"})
	_, err := c.nd.Capture(context.Background(), "box", "copy")
	if !errors.Is(err, api.ErrConflict) {
		t.Fatalf("capture of a sandbox with a session: %v, want a conflict", err)
	}
	if !strings.Contains(err.Error(), "agent reader") {
		t.Errorf("the refusal: %v", err)
	}
}

// TestScrubAfterRestart: a node that restarted does not remember writing
// a session file; the release of an agent that names variables deletes it
// all the same.
func TestScrubAfterRestart(t *testing.T) {
	c := newClusterWith(t, clusterOptions{fake: fake.Options{Exec: envShell}, env: fakeEnv})
	c.runningBox(t)
	c.be.WriteFile("box", sessionEnvFile, []byte("export API_KEY='"+sessionSecret+"'\n"))
	if c.nd.holdsSession("box") {
		t.Fatal("the node holds a session it never wrote")
	}
	if err := c.nd.scrubSessionOf(context.Background(), "box", false); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.be.ReadFile("box", sessionEnvFile); !ok {
		t.Fatal("scrubbed a file with nothing to say it should")
	}
	if err := c.nd.scrubSessionOf(context.Background(), "box", true); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.be.ReadFile("box", sessionEnvFile); ok {
		t.Error("the forced scrub left the file")
	}
}

// TestScrubLeavesOtherGuestsAlone: only a Linux guest has the session
// file: the release of a Windows sandbox runs nothing in it for that.
func TestScrubLeavesOtherGuestsAlone(t *testing.T) {
	c := newClusterWith(t, clusterOptions{fake: fake.Options{Exec: envShell}, env: fakeEnv})
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Template
metadata: {name: win}
spec:
  qemu: {image: linux-desktop}
  guest: {os: windows}
`))
	c.runningBoxOf(t, "win")
	before := len(c.be.Execs("box"))
	if err := c.nd.scrubSessionOf(context.Background(), "box", true); err != nil {
		t.Fatalf("scrub of a Windows sandbox: %v", err)
	}
	if n := len(c.be.Execs("box")); n != before {
		t.Errorf("the scrub ran %d programs in a Windows guest", n-before)
	}
}

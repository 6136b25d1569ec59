package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/testlog"
)

// mustRun runs the CLI and fails the test unless it exits 0.
func mustRun(t *testing.T, url string, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, url, args...)
	if code != 0 {
		t.Fatalf("hvkube %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

func getAgent(t *testing.T, url, name string) *api.Agent {
	t.Helper()
	var a api.Agent
	if err := json.Unmarshal([]byte(mustRun(t, url, "get", "agent", name, "-o", "json")), &a); err != nil {
		t.Fatal(err)
	}
	return &a
}

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPoolCommands(t *testing.T) {
	url := startServer(t)
	steps := []struct {
		golden string
		args   []string
	}{
		{"pool-create", []string{"pool", "create", "--name", "browser-pool", "--template", "linux-desktop", "--count", "5"}},
		{"pool-create-labels", []string{"pool", "create", "--name", "batch", "--template", "linux-desktop", "--count", "3", "--min-ready", "1", "--warm-tier", "saved", "--label", "team=search", "--label", "tier=cpu"}},
		{"pool-get-pools", []string{"get", "pools", "-o", "wide"}},
		{"pool-scale", []string{"pool", "scale", "batch", "--count", "4"}},
		{"pool-list", []string{"pool", "list"}},
		{"pool-delete", []string{"pool", "delete", "batch"}},
	}
	for _, s := range steps {
		golden(t, s.golden, mustRun(t, url, s.args...))
	}

	var p api.SandboxPool
	if err := json.Unmarshal([]byte(mustRun(t, url, "get", "pool", "browser-pool", "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	if got, want := p.Spec.Template.Metadata.Labels, map[string]string{"pool": "browser-pool"}; !reflect.DeepEqual(got, want) {
		t.Errorf("template labels = %v, want %v", got, want)
	}
	if p.Spec.Replicas != 5 || p.Spec.MinReady != 0 || p.Spec.Template.Spec.TemplateRef != "linux-desktop" {
		t.Errorf("spec = replicas %d, minReady %d, templateRef %q; want 5, 0, linux-desktop", p.Spec.Replicas, p.Spec.MinReady, p.Spec.Template.Spec.TemplateRef)
	}
}

func TestPoolCreateLabels(t *testing.T) {
	url := startServer(t)
	mustRun(t, url, "pool", "create", "--name", "batch", "--template", "linux-desktop", "--count", "3", "--min-ready", "1", "--warm-tier", "saved", "--label", "team=search")
	var p api.SandboxPool
	if err := json.Unmarshal([]byte(mustRun(t, url, "get", "pool", "batch", "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	if got, want := p.Spec.Template.Metadata.Labels, map[string]string{"pool": "batch", "team": "search"}; !reflect.DeepEqual(got, want) {
		t.Errorf("template labels = %v, want %v", got, want)
	}
	if p.Spec.Replicas != 3 || p.Spec.MinReady != 1 || p.Spec.WarmTier != "saved" {
		t.Errorf("spec = replicas %d, minReady %d, warmTier %q; want 3, 1, saved", p.Spec.Replicas, p.Spec.MinReady, p.Spec.WarmTier)
	}
}

func TestAgentSubmit(t *testing.T) {
	url := startServer(t)
	wantSteps := []api.Action{
		{Action: "left_click", Coordinate: []int{500, 300}},
		{Action: "type", Text: "New York"},
		{Action: "key", Text: "Return"},
		{Action: "wait", Duration: 1.5},
		{Action: "exec", Command: []string{"xdg-open", "https://example.com"}},
	}
	yamlFile := writeFile(t, "book-flight.yaml", `# the steps of a booking
steps:
  - {action: left_click, coordinate: [500, 300]}
  - action: type
    text: New York
  - {action: key, text: Return}
  - {action: wait, duration: 1.5}
  - {action: exec, command: [xdg-open, "https://example.com"]}
`)
	listFile := writeFile(t, "list.json", `[{"action": "key", "text": "ctrl+l"}]`)
	generated := "(none)"

	t.Run("workflow file", func(t *testing.T) {
		out := mustRun(t, url, "agent", "submit", "--pool", "browser-pool", "--workflow", yamlFile,
			"--input", `{"dest": "NYC"}`, "--name", "book-flight", "--max-retries", "2", "--timeout", "10m")
		if out != "agent/book-flight created\n" {
			t.Fatalf("stdout %q", out)
		}
		a := getAgent(t, url, "book-flight")
		if a.Spec.Type != "workflow" {
			t.Errorf("type = %q, want workflow", a.Spec.Type)
		}
		if !reflect.DeepEqual(a.Spec.Task.Steps, wantSteps) {
			t.Errorf("steps = %+v, want %+v", a.Spec.Task.Steps, wantSteps)
		}
		sel := a.Spec.SandboxSelector
		if sel == nil || sel.Pool != "browser-pool" || !reflect.DeepEqual(sel.MatchLabels, map[string]string{"pool": "browser-pool"}) || a.Spec.SandboxName != "" {
			t.Errorf("selector = %+v, sandboxName %q; want pool browser-pool", sel, a.Spec.SandboxName)
		}
		var input bytes.Buffer
		if err := json.Compact(&input, a.Spec.Task.Input); err != nil || input.String() != `{"dest":"NYC"}` {
			t.Errorf("input = %s (%v), want {\"dest\":\"NYC\"}", a.Spec.Task.Input, err)
		}
		if a.Spec.Completion.MaxRetries != 2 || a.Spec.Task.TimeoutSeconds != 600 || a.Spec.Completion.TimeoutMinutes != 10 {
			t.Errorf("maxRetries %d, timeoutSeconds %d, timeoutMinutes %d; want 2, 600, 10",
				a.Spec.Completion.MaxRetries, a.Spec.Task.TimeoutSeconds, a.Spec.Completion.TimeoutMinutes)
		}
	})

	t.Run("steps list file", func(t *testing.T) {
		mustRun(t, url, "agent", "submit", "--sandbox", "desk-1", "--workflow", listFile, "--name", "from-list")
		a := getAgent(t, url, "from-list")
		if want := []api.Action{{Action: "key", Text: "ctrl+l"}}; !reflect.DeepEqual(a.Spec.Task.Steps, want) {
			t.Errorf("steps = %+v, want %+v", a.Spec.Task.Steps, want)
		}
		if a.Spec.SandboxName != "desk-1" || a.Spec.SandboxSelector != nil {
			t.Errorf("sandboxName %q, selector %+v; want desk-1 and none", a.Spec.SandboxName, a.Spec.SandboxSelector)
		}
	})

	t.Run("inline steps and a generated name", func(t *testing.T) {
		out := mustRun(t, url, "agent", "submit", "--pool", "browser-pool",
			"--steps", `[{"action":"left_click","coordinate":[500,300]},{"action":"type","text":"New York"}]`)
		name, ok := strings.CutSuffix(strings.TrimPrefix(out, "agent/"), " created\n")
		if !ok || len(name) != len("task-123456") || !strings.HasPrefix(name, "task-") || api.ValidateName("name", name) != nil {
			t.Fatalf("stdout %q, want agent/task-XXXXXX created", out)
		}
		a := getAgent(t, url, name)
		if a.Spec.Type != "workflow" || !reflect.DeepEqual(a.Spec.Task.Steps, wantSteps[:2]) || a.Spec.SandboxSelector == nil || a.Spec.SandboxSelector.Pool != "browser-pool" {
			t.Errorf("spec = %+v", a.Spec)
		}
		generated = name
	})

	t.Run("list and result", func(t *testing.T) {
		golden(t, "agent-list", strings.ReplaceAll(mustRun(t, url, "agent", "list"), generated, "task-XXXXXX"))
		golden(t, "agent-result", mustRun(t, url, "agent", "result", "book-flight"))
	})
}

func TestAgentSubmitErrors(t *testing.T) {
	url := startServer(t)
	steps := `[{"action":"key","text":"Return"}]`
	unknownField := writeFile(t, "typo.yaml", "steps:\n  - {action: left_click, coordinate: [1, 2]}\n  - {action: type, txt: hello}\n")
	topLevel := writeFile(t, "extra.yaml", "steps: [{action: key, text: Return}]\nname: x\n")
	dup := writeFile(t, "dup.yaml", "- {action: key, text: a, text: b}\n")
	badAction := writeFile(t, "bad.json", `{"steps": [{"action": "clik", "coordinate": [1, 2]}]}`)
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--pool", "p", "--steps", steps, "--input", `{"dest":`}, "--input: invalid JSON"},
		{[]string{"--pool", "p", "--steps", steps, "--input", `{"a": 1, "a": 2}`}, "--input: a: duplicate key"},
		{[]string{"--pool", "p", "--workflow", unknownField}, "steps[1].txt: unknown field"},
		{[]string{"--pool", "p", "--workflow", topLevel}, "name: unknown field"},
		{[]string{"--pool", "p", "--workflow", dup}, `key "text" already set`},
		{[]string{"--pool", "p", "--steps", `[{"action":"key","text":5}]`}, "--steps: steps[0].text: expected a string"},
		{[]string{"--pool", "p", "--steps", `[]`}, "--steps: steps: no steps"},
		{[]string{"--pool", "p", "--workflow", "book-flight"}, "--workflow book-flight: no such file (give a YAML or JSON file of steps)"},
		{[]string{"--pool", "p", "--workflow", badAction}, `spec.task.steps[0].action: unknown action "clik"`},
		{[]string{"--pool", "p", "--sandbox", "s", "--steps", steps}, "--pool or --sandbox, not both"},
		{[]string{"--steps", steps}, "needs --pool POOL or --sandbox NAME"},
		{[]string{"--pool", "p"}, "needs --workflow FILE or --steps JSON"},
		{[]string{"--pool", "p", "--steps", steps, "--timeout", "-1m"}, "--timeout: -1m0s is negative"},
		{[]string{"--pool", "p", "--steps", steps, "--max-retries", "1000"}, "spec.completion.maxRetries"},
		{[]string{"--pool", "p", "--steps", steps, "--name", "Not_A_Name"}, "metadata.name"},
	}
	for _, tt := range tests {
		args := append([]string{"agent", "submit"}, tt.args...)
		out, errOut, code := run(t, url, args...)
		if code != 1 {
			t.Errorf("hvkube %v: exit %d, want 1", args, code)
		}
		if !strings.HasPrefix(errOut, "error: ") || !strings.Contains(errOut, tt.wantErr) {
			t.Errorf("hvkube %v: stderr %q, want it to contain %q", args, errOut, tt.wantErr)
		}
		if out != "" {
			t.Errorf("hvkube %v: stdout %q, want nothing", args, out)
		}
	}
	if out, _, _ := run(t, url, "get", "agents", "-o", "name"); out != "" {
		t.Errorf("failed submissions created agents: %q", out)
	}
}

func TestPoolErrors(t *testing.T) {
	url := startServer(t)
	mustRun(t, url, "pool", "create", "--name", "taken", "--template", "linux-desktop")
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"pool", "create", "--template", "linux-desktop"}, "needs --name NAME"},
		{[]string{"pool", "create", "--name", "p"}, "needs --template TEMPLATE"},
		{[]string{"pool", "create", "--name", "p", "--template", "t", "--count", "-1"}, "--count: -1 is negative"},
		{[]string{"pool", "create", "--name", "p", "--template", "t", "--count", "1", "--min-ready", "2"}, "spec.minReady"},
		{[]string{"pool", "create", "--name", "p", "--template", "t", "--warm-tier", "frozen"}, "spec.warmTier"},
		{[]string{"pool", "create", "--name", "p", "--template", "t", "--label", "novalue"}, `--label "novalue": want KEY=VALUE`},
		{[]string{"pool", "create", "--name", "p", "--template", "t", "--label", "pool=other"}, "the pool label is the pool's name"},
		{[]string{"pool", "create", "--name", "taken", "--template", "t"}, "taken"},
		{[]string{"pool", "scale", "nope", "--count", "2"}, `sandboxpool "nope" not found`},
		{[]string{"pool", "scale", "taken"}, "needs --count N"},
		{[]string{"pool", "delete", "nope"}, `sandboxpool "nope" not found`},
	}
	for _, tt := range tests {
		out, errOut, code := run(t, url, tt.args...)
		if code != 1 {
			t.Errorf("hvkube %v: exit %d, want 1", tt.args, code)
		}
		if !strings.HasPrefix(errOut, "error: ") || !strings.Contains(errOut, tt.wantErr) {
			t.Errorf("hvkube %v: stderr %q, want it to contain %q", tt.args, errOut, tt.wantErr)
		}
		if out != "" {
			t.Errorf("hvkube %v: stdout %q, want nothing", tt.args, out)
		}
	}
}

func TestVMCommands(t *testing.T) {
	url := startServer(t)
	out, errOut, code := run(t, url, "vm", "list")
	if code != 0 || out != "" {
		t.Fatalf("vm list on an empty server: exit %d, stdout %q", code, out)
	}
	golden(t, "vm-list-empty-stderr", errOut)

	mustRun(t, url, "apply", "-f", "../../examples/sandbox.yaml")
	golden(t, "vm-list", mustRun(t, url, "vm", "list"))
	if got, want := mustRun(t, url, "vm", "list", "--pool", "other", "-o", "name"), ""; got != want {
		t.Errorf("vm list --pool other = %q, want nothing", got)
	}

	// Without a VM backend the server answers run-state changes with 501, and
	// a sandbox never gets a display.
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"vm", "pause", "browser-agent-1"}, "backend"},
		{[]string{"vm", "resume", "browser-agent-1"}, "backend"},
		{[]string{"vm", "pause", "nope"}, `sandbox "nope" not found`},
		{[]string{"vm", "screenshot", "nope", "-o", filepath.Join(t.TempDir(), "s.png")}, `sandbox "nope" not found`},
		{[]string{"vm", "screenshot", "browser-agent-1", "-o", "a.png", "--save", "b.png"}, "give -o or --save, not both"},
		{[]string{"vm", "console", "browser-agent-1"}, "sandbox/browser-agent-1 has no display yet: it is Pending"},
		{[]string{"vm", "console", "nope"}, `sandbox "nope" not found`},
	}
	for _, tt := range tests {
		out, errOut, code := run(t, url, tt.args...)
		if code != 1 {
			t.Errorf("hvkube %v: exit %d, want 1", tt.args, code)
		}
		if !strings.HasPrefix(errOut, "error: ") || !strings.Contains(errOut, tt.wantErr) {
			t.Errorf("hvkube %v: stderr %q, want it to contain %q", tt.args, errOut, tt.wantErr)
		}
		if out != "" {
			t.Errorf("hvkube %v: stdout %q, want nothing", tt.args, out)
		}
	}
	golden(t, "vm-info", mustRun(t, url, "vm", "info", "browser-agent-1"))
}

// TestNounHelp: every noun-first command documents itself with examples.
func TestNounHelp(t *testing.T) {
	root := NewRoot(Options{})
	for _, noun := range []string{"pool", "agent", "vm"} {
		cmd, _, err := root.Find([]string{noun})
		if err != nil || cmd.Name() != noun {
			t.Fatalf("no %s command: %v", noun, err)
		}
		for _, sub := range append(cmd.Commands(), cmd) {
			if sub.Short == "" || sub.Example == "" {
				t.Errorf("hvkube %s %s: Short %q, Example %q; want both", noun, sub.Name(), sub.Short, sub.Example)
			}
		}
	}
}

// TestAgentSubmitWait follows agents to their end. No agent controller runs
// in this test, so the test writes the status an agent controller would write,
// one phase at a time, each after the CLI has printed the one before.
func TestAgentSubmitWait(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Options{Store: st, Version: "test"}).Handler())
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	setStatus := func(t *testing.T, name string, fn func(s *api.AgentStatus)) {
		t.Helper()
		o, err := st.Get(context.Background(), api.KindAgent, name)
		if err != nil {
			t.Fatal(err)
		}
		a := o.(*api.Agent)
		fn(&a.Status)
		if _, err := st.UpdateStatus(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(t *testing.T, out *testlog.Buffer, line string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), line) {
			if time.Now().After(deadline) {
				t.Fatalf("the CLI did not print %q; it printed %q", line, out.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	tests := []struct {
		name     string
		final    api.AgentStatus
		wantCode int
	}{
		{"done", api.AgentStatus{Phase: api.AgentCompleted, Sandbox: "desk-1", Attempts: 1,
			Result: &api.AgentResult{Success: true, Output: json.RawMessage(`{"confirmation":"ABC123"}`), DurationSeconds: 12}}, 0},
		{"broken", api.AgentStatus{Phase: api.AgentFailed, Sandbox: "desk-1", Attempts: 1, Reason: "StepFailed",
			Message: "steps[0]: the sandbox stopped answering"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut testlog.Buffer
			code := make(chan int, 1)
			// Should the test fail half-way, stop the CLI's watch, or
			// closing the server would wait for it forever.
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go func() {
				code <- Main(ctx, Options{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut},
					[]string{"--server", srv.URL, "agent", "submit", "--sandbox", "desk-1", "--name", tt.name, "--wait",
						"--steps", `[{"action":"key","text":"Return"}]`})
			}()
			waitFor(t, &out, "agent/"+tt.name+" Pending\n")
			setStatus(t, tt.name, func(s *api.AgentStatus) { *s = api.AgentStatus{Phase: api.AgentScheduled, Sandbox: "desk-1"} })
			waitFor(t, &out, "Scheduled on sandbox/desk-1\n")
			setStatus(t, tt.name, func(s *api.AgentStatus) { s.Phase = api.AgentRunning })
			waitFor(t, &out, "Running on sandbox/desk-1\n")
			setStatus(t, tt.name, func(s *api.AgentStatus) { *s = tt.final })
			select {
			case got := <-code:
				if got != tt.wantCode {
					t.Errorf("exit %d, want %d; stderr %q", got, tt.wantCode, errOut.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("agent submit --wait did not return; it printed %q", out.String())
			}
			golden(t, "agent-submit-wait-"+tt.name, out.String()+"--- stderr\n"+errOut.String())
		})
	}
}

// TestSecretCreate: secret create takes values from the command line, a
// file and an env file; list shows the keys, and no read shows a value.
func TestSecretCreate(t *testing.T) {
	url := startServer(t)
	file := writeFile(t, "password", "pa55-from-file\n")
	envFile := writeFile(t, "login.env", "# a comment\n\nSITE_USER=ann-from-env\n")
	mustRun(t, url, "secret", "create", "login", "--from-literal", "TOKEN=tok-literal-1", "--from-file", "PASSWORD="+file, "--from-env-file", envFile)
	out := mustRun(t, url, "secret", "list")
	if !strings.Contains(out, "login") || !strings.Contains(out, "PASSWORD,SITE_USER,TOKEN") {
		t.Errorf("secret list:\n%s", out)
	}
	for _, args := range [][]string{{"get", "secret", "login", "-o", "yaml"}, {"get", "secrets", "-o", "json"}, {"describe", "secret", "login"}} {
		out := mustRun(t, url, args...)
		for _, v := range []string{"tok-literal-1", "pa55-from-file", "ann-from-env", "sealed"} {
			if strings.Contains(out, v) {
				t.Errorf("hvkube %s shows %q:\n%s", strings.Join(args, " "), v, out)
			}
		}
	}
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"secret", "create", "x"}, "needs values"},
		{[]string{"secret", "create", "x", "--from-literal", "novalue"}, "want KEY=VALUE"},
		{[]string{"secret", "create", "x", "--from-literal", "bad-key=v"}, "--from-literal"},
		{[]string{"secret", "create", "x", "--from-literal", "A=1", "--from-literal", "A=2"}, "given twice"},
		{[]string{"secret", "create", "x", "--from-file", "A=/no/such/file"}, "--from-file A"},
		{[]string{"secret", "create", "login", "--from-literal", "A=1"}, "login"},
	} {
		_, errOut, code := run(t, url, tt.args...)
		if code != 1 || !strings.Contains(errOut, tt.wantErr) {
			t.Errorf("hvkube %v: exit %d, %q; want an error with %q", tt.args, code, errOut, tt.wantErr)
		}
	}
}

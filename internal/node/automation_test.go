package node

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/drivers/fake"
)

// TestAutomationAgentInTheGuest: a playwright or selenium agent's command
// in the guest gets the guest's own endpoints, as its image declares
// them (status.automation, from its template's snapshot), and completes
// by its exit code; on a sandbox whose image declares
// no endpoint for its client the agent fails at once, for good, with
// NoAutomationEndpoint, whatever retries it has. (The fake backend stands
// for the guest here; cmd/hvkube's TestAutomationAgentsOnQEMU runs the
// examples on a real one, on the host.)
func TestAutomationAgentInTheGuest(t *testing.T) {
	both := api.Automation{CDP: 9222, WebDriver: 9515}
	tests := []struct {
		name, typ string
		au        api.Automation
		ok        bool
		env       []string
	}{
		{"playwright", "playwright", both, true, []string{"HVKUBE_CDP_URL=http://127.0.0.1:9222", "HVKUBE_WEBDRIVER_URL=http://127.0.0.1:9515", "HVKUBE_DEBUGGER_ADDRESS=localhost:9222", "HVKUBE_AGENT=job"}},
		{"selenium", "selenium", both, true, []string{"HVKUBE_WEBDRIVER_URL=http://127.0.0.1:9515", "HVKUBE_DEBUGGER_ADDRESS=localhost:9222", `HVKUBE_TASK_INPUT={"url":"http://10.0.2.2:8000/"}`}},
		{"playwright on a guest with CDP only", "playwright", api.Automation{CDP: 9222}, true, []string{"HVKUBE_CDP_URL=http://127.0.0.1:9222"}},
		{"selenium on a guest with CDP only", "selenium", api.Automation{CDP: 9222}, false, nil},
		{"playwright on a guest that offers nothing", "playwright", api.Automation{}, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClusterWith(t, clusterOptions{fake: fake.Options{Exec: guestShell, Automation: tt.au}})
			c.runningBox(t)
			if got := c.sandbox(t, "box").Status.Automation; (got == nil) != (tt.au == api.Automation{}) || (got != nil && *got != tt.au) {
				t.Errorf("status.automation %+v, want %+v", got, tt.au)
			}
			c.create(t, yamlObj(t, fmt.Sprintf(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxName: box
  type: %s
  task:
    in: guest
    command: ["true"]
    input: {url: "http://10.0.2.2:8000/"}
  completion: {maxRetries: 3}
`, tt.typ)))
			if !tt.ok {
				a := c.waitAgent(t, "job", api.AgentFailed)
				if a.Status.Reason != ReasonNoAutomationEndpoint || a.Status.Attempts != 1 {
					t.Errorf("failed with %s after %d attempts, want %s after 1", a.Status.Reason, a.Status.Attempts, ReasonNoAutomationEndpoint)
				}
				for _, want := range []string{"sandbox box", "template desk", "browser-desktop"} {
					if !strings.Contains(a.Status.Message, want) {
						t.Errorf("message %q does not name %q", a.Status.Message, want)
					}
				}
				for _, ex := range c.be.Execs("box") {
					if ex.Path == "true" {
						t.Error("the command ran")
					}
				}
				return
			}
			a := c.waitAgent(t, "job", api.AgentCompleted)
			if a.Status.Result == nil || a.Status.Result.ExitCode == nil || *a.Status.Result.ExitCode != 0 {
				t.Fatalf("result %+v", a.Status.Result)
			}
			var ran bool
			for _, ex := range c.be.Execs("box") {
				if ex.Path != "true" {
					continue
				}
				ran = true
				for _, want := range tt.env {
					if !slices.Contains(ex.Env, want) {
						t.Errorf("the command's environment %v lacks %s", ex.Env, want)
					}
				}
				if tt.typ == "playwright" && tt.au != both && slices.ContainsFunc(ex.Env, func(kv string) bool { return strings.HasPrefix(kv, "HVKUBE_WEBDRIVER_URL=") }) {
					t.Errorf("a WebDriver URL without a WebDriver port: %v", ex.Env)
				}
			}
			if !ran {
				t.Fatal("the command did not run in the guest")
			}
		})
	}
}

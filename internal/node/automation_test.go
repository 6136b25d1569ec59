package node

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend/fake"
)

func TestParseAutomation(t *testing.T) {
	tests := []struct {
		name string
		conf string
		want automation
	}{
		{"browser-desktop", "HVKUBE_GUEST_USER=agent\nHVKUBE_BROWSER_START_TITLE='hvkube browser desktop'\nHVKUBE_CDP_PORT=9222\nHVKUBE_WEBDRIVER_PORT=9515\n", automation{CDP: 9222, WebDriver: 9515}},
		{"quoted and exported", "export HVKUBE_CDP_PORT=\"9333\"\n  HVKUBE_WEBDRIVER_PORT='4444'\n", automation{CDP: 9333, WebDriver: 4444}},
		{"linux-desktop", "HVKUBE_GUEST_USER=agent\nHVKUBE_READY_WAIT=0\n", automation{}},
		{"CDP only", "HVKUBE_CDP_PORT=9222\n", automation{CDP: 9222}},
		{"not ports", "HVKUBE_CDP_PORT=$(reboot)\nHVKUBE_WEBDRIVER_PORT=70000\n", automation{}},
		{"empty", "", automation{}},
	}
	for _, tt := range tests {
		if got := parseAutomation([]byte(tt.conf)); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// TestAutomationAgentInTheGuest: a playwright or selenium agent's command
// in the guest gets the guest's own endpoints, as its image declares
// them, and completes by its exit code; on a sandbox whose image declares
// no endpoint for its client the agent fails at once, for good, with
// NoAutomationEndpoint, whatever retries it has. (The fake backend stands
// for the guest here; cmd/hvkube's TestAutomationAgentsOnQEMU runs the
// examples on a real one, on the host.)
func TestAutomationAgentInTheGuest(t *testing.T) {
	both := "HVKUBE_GUEST_USER=agent\nHVKUBE_CDP_PORT=9222\nHVKUBE_WEBDRIVER_PORT=9515\n"
	tests := []struct {
		name, typ, conf string
		ok              bool
		env             []string
	}{
		{"playwright", "playwright", both, true, []string{"HVKUBE_CDP_URL=http://127.0.0.1:9222", "HVKUBE_WEBDRIVER_URL=http://127.0.0.1:9515", "HVKUBE_DEBUGGER_ADDRESS=localhost:9222", "HVKUBE_AGENT=job"}},
		{"selenium", "selenium", both, true, []string{"HVKUBE_WEBDRIVER_URL=http://127.0.0.1:9515", "HVKUBE_DEBUGGER_ADDRESS=localhost:9222", `HVKUBE_TASK_INPUT={"url":"http://10.0.2.2:8000/"}`}},
		{"playwright on a guest with CDP only", "playwright", "HVKUBE_CDP_PORT=9222\n", true, []string{"HVKUBE_CDP_URL=http://127.0.0.1:9222"}},
		{"selenium on a guest with CDP only", "selenium", "HVKUBE_CDP_PORT=9222\n", false, nil},
		{"playwright on a guest without image.conf", "playwright", "", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClusterWith(t, clusterOptions{fake: fake.Options{Exec: guestShell}})
			c.runningBox(t)
			if tt.conf != "" {
				c.be.WriteFile("box", imageConf, []byte(tt.conf))
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
				if tt.typ == "playwright" && tt.conf != both && slices.ContainsFunc(ex.Env, func(kv string) bool { return strings.HasPrefix(kv, "HVKUBE_WEBDRIVER_URL=") }) {
					t.Errorf("a WebDriver URL without a WebDriver port: %v", ex.Env)
				}
			}
			if !ran {
				t.Fatal("the command did not run in the guest")
			}
		})
	}
}

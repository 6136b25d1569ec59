package node

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

// TestHostCommandsDisabled: a node without HostCommands refuses a custom
// agent's host command for good (no retry, whatever maxRetries says), with
// a reason and a message that name the way out; a guest command on the
// same node runs.
func TestHostCommandsDisabled(t *testing.T) {
	tests := []struct {
		name, in, command string
		phase, reason     string
	}{
		{"host", "host", `[echo, hi]`, api.AgentFailed, ReasonHostCommandsDisabled},
		{"host by default", "", `[echo, hi]`, api.AgentFailed, ReasonHostCommandsDisabled},
		{"guest", "guest", `[echo, hi]`, api.AgentCompleted, "Completed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			c.runningBox(t)
			in := ""
			if tt.in != "" {
				in = "in: " + tt.in + ", "
			}
			c.create(t, yamlObj(t, fmt.Sprintf(`apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxName: box
  type: custom
  task: {%scommand: %s}
  completion: {maxRetries: 3}
`, in, tt.command)))
			a := c.waitAgent(t, "job", tt.phase)
			if a.Status.Reason != tt.reason {
				t.Errorf("reason %q, want %q (message %q)", a.Status.Reason, tt.reason, a.Status.Message)
			}
			if a.Status.Attempts != 1 {
				t.Errorf("%d attempts, want 1", a.Status.Attempts)
			}
			if tt.phase != api.AgentFailed {
				return
			}
			for _, want := range []string{"--allow-host-commands", "spec.task.in: guest"} {
				if !strings.Contains(a.Status.Message, want) {
					t.Errorf("message %q does not name %s", a.Status.Message, want)
				}
			}
			if c := api.FindCondition(a.Status.Conditions, "Failed"); c == nil || c.Reason != ReasonHostCommandsDisabled {
				t.Errorf("conditions %+v, want Failed with reason %s", a.Status.Conditions, ReasonHostCommandsDisabled)
			}
			eventually(t, "the sandbox is released", func() (bool, string) {
				sb := c.sandbox(t, "box")
				return sb.Status.CurrentAgent == "", sb.Status.CurrentAgent
			})
		})
	}
}

// TestLookupHostUser: an account by name or uid; root and unknown
// accounts are refused.
func TestLookupHostUser(t *testing.T) {
	tests := []struct {
		name    string
		wantErr string
	}{
		{"nobody", ""},
		{"65534", ""},
		{"root", "is root"},
		{"0", "is root"},
		{"hvkube-no-such-user", "hvkube-no-such-user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := LookupHostUser(tt.name)
			if tt.wantErr == "" {
				if err != nil {
					if strings.Contains(err.Error(), "unknown") {
						t.Skipf("no account %s on this host: %v", tt.name, err)
					}
					t.Fatal(err)
				}
				if u.UID == 0 || u.Name == "" {
					t.Errorf("got %+v", u)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err %v, want one naming %q", err, tt.wantErr)
			}
		})
	}
}

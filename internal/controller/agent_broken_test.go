package controller

import (
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

// TestAgentOnABrokenSandbox: the pool keeps a broken sandbox while its
// agent holds it, so the controller ends the attempt of an mcp-agent on
// one (no run of its node will), and leaves an attempt its node runs to
// the node (which fails it, or puts it back if a restart cut it short).
func TestAgentOnABrokenSandbox(t *testing.T) {
	tests := []struct {
		typ, phase string
		lost       bool
	}{
		{"mcp-agent", api.SandboxError, true},
		{"mcp-agent", api.SandboxTerminated, true},
		{"mcp-agent", api.SandboxRunning, false},
		{"workflow", api.SandboxError, false},
		{"custom", api.SandboxTerminated, false},
	}
	for _, tt := range tests {
		t.Run(tt.typ+" "+tt.phase, func(t *testing.T) {
			e := newAgentEnv(t)
			e.sandboxFor("sb-1", "job")
			e.editSandbox("sb-1", func(s *api.SandboxStatus) {
				s.Phase, s.Reason, s.Message = tt.phase, "VMGone", "the VM's process is gone"
			})
			e.running("job", "sb-1", 1, e.clk.Now(), func(a *api.Agent) {
				a.Spec.Type = tt.typ
				switch tt.typ {
				case "mcp-agent":
					a.Spec.Task.Steps = nil
				case "custom":
					a.Spec.Task.Steps, a.Spec.Task.Command = nil, []string{"true"}
				}
			})
			e.reconcile("job")
			a := e.agent("job")
			if got := a.Status.Reason == "SandboxLost"; got != tt.lost {
				t.Fatalf("lost %v, want %v (phase %s, reason %s: %s)", got, tt.lost, a.Status.Phase, a.Status.Reason, a.Status.Message)
			}
			if tt.lost && a.Status.Phase != api.AgentFailed {
				t.Errorf("phase %s, want %s (no retries)", a.Status.Phase, api.AgentFailed)
			}
			if !tt.lost && a.Status.Phase != api.AgentRunning {
				t.Errorf("phase %s, want %s", a.Status.Phase, api.AgentRunning)
			}
		})
	}
}

package controller

import (
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

// TestHeldSandboxTakesNoAgent: the scheduler passes over a sandbox whose
// input a person holds.
func TestHeldSandboxTakesNoAgent(t *testing.T) {
	sb := &api.Sandbox{Metadata: api.ObjectMeta{Name: "a"}, Status: api.SandboxStatus{Phase: api.SandboxRunning}}
	if !ViewOf(sb).Healthy {
		t.Fatal("a free running sandbox is not schedulable")
	}
	sb.Status.Control = &api.SandboxControl{ID: "x", Holder: "ana"}
	if ViewOf(sb).Healthy {
		t.Fatal("a held sandbox is schedulable")
	}
}

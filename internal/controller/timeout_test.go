package controller

import (
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
)

// TestTimeoutSaturates: an attempt's timeout is the agent's, the default
// when unset, and never more than api.MaxAgentTimeout: 200000000 minutes
// overflowed time.Duration into a negative timeout, and 150000000 made a
// deadline (and a token) centuries away.
func TestTimeoutSaturates(t *testing.T) {
	tests := []struct {
		minutes int
		want    time.Duration
	}{
		{0, api.DefaultAgentTimeout * time.Minute},
		{-5, api.DefaultAgentTimeout * time.Minute},
		{15, 15 * time.Minute},
		{api.MaxAgentTimeoutMinutes, api.MaxAgentTimeout},
		{api.MaxAgentTimeoutMinutes + 1, api.MaxAgentTimeout},
		{150_000_000, api.MaxAgentTimeout},
		{200_000_000, api.MaxAgentTimeout},
		{int(^uint(0) >> 1), api.MaxAgentTimeout},
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		a := &api.Agent{Spec: api.AgentSpec{Completion: api.Completion{TimeoutMinutes: tt.minutes}}}
		got := agentstate.Timeout(a)
		if got != tt.want {
			t.Errorf("timeoutMinutes %d: Timeout %s, want %s", tt.minutes, got, tt.want)
		}
		if deadline := start.Add(got + nodeGrace); !deadline.After(start) || deadline.Year() > 2026 {
			t.Errorf("timeoutMinutes %d: deadline %s", tt.minutes, deadline)
		}
	}
}

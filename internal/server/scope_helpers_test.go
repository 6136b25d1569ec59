package server

import (
	"context"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// bindAgent creates (or reuses) mcp-agent name in st and records attempt
// attempt of it running on sandbox, which it holds, as the node does. It
// returns the agent.
func bindAgent(t *testing.T, st *store.Store, name, sandbox string, attempt int) *api.Agent {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Get(ctx, api.KindAgent, name); err != nil {
		a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
		a.Metadata.Name = name
		a.Spec.SandboxName, a.Spec.Type = sandbox, "mcp-agent"
		api.Default(a)
		if _, err := st.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	out, err := reconcile.UpdateStatus(ctx, st, api.KindAgent, name, func(a *api.Agent) bool {
		a.Status.Phase, a.Status.Sandbox, a.Status.Attempts, a.Status.StartedAt = api.AgentRunning, sandbox, attempt, &now
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reconcile.UpdateStatus(ctx, st, api.KindSandbox, sandbox, func(sb *api.Sandbox) bool {
		sb.Status.CurrentAgent = name
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// attemptToken mints the scoped token of agent name's current attempt, as
// the node hands it to the agent's program.
func attemptToken(t *testing.T, st *store.Store, key authtoken.Key, name string) string {
	t.Helper()
	o, err := st.Get(context.Background(), api.KindAgent, name)
	if err != nil {
		t.Fatal(err)
	}
	a := o.(*api.Agent)
	return key.Mint(authtoken.ForAttempt(a, a.Status.Attempts), time.Now(), time.Hour)
}

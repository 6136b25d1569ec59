package mcptools

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// LeaseLabel marks the mcp-agents acquire_sandbox creates, so that
// release_sandbox deletes those and no other agent.
const LeaseLabel = "hvkube.io/lease"

// leaseTTL is how long a released or finished lease agent is kept.
const leaseTTL = 600

// Acquire takes a sandbox of pool for an MCP client: it creates an
// mcp-agent (completion mcp-done) that selects the pool and waits up to
// wait until the agent runs on a sandbox. The agent holds the sandbox for
// minutes (0: the agents' default) unless released or completed first.
// When none is free in time the agent is deleted again.
func Acquire(ctx context.Context, objs Objects, pool string, wait time.Duration, minutes int) (Lease, error) {
	if err := api.ValidateName("pool", pool); err != nil {
		return Lease{}, err
	}
	if minutes < 0 || minutes > 24*60 {
		return Lease{}, api.Invalid("minutes", "%d is out of range 0..%d", minutes, 24*60)
	}
	if _, err := objs.Get(ctx, api.KindSandboxPool, pool); err != nil {
		return Lease{}, fmt.Errorf("pool %s: %w", pool, err)
	}
	ttl := leaseTTL
	a := &api.Agent{
		TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent},
		Metadata: api.ObjectMeta{Name: "mcp-" + rand.Text()[:10], Labels: map[string]string{LeaseLabel: "mcp"}},
		Spec: api.AgentSpec{
			SandboxSelector:         &api.SandboxSelector{Pool: pool},
			Type:                    "mcp-agent",
			Completion:              api.Completion{Type: "mcp-done", TimeoutMinutes: minutes},
			TTLSecondsAfterFinished: &ttl,
		},
	}
	// rand.Text is base32 upper case; names are lower-case DNS labels.
	a.Metadata.Name = lower(a.Metadata.Name)
	if _, err := objs.Create(ctx, a); err != nil {
		return Lease{}, err
	}
	name := a.Metadata.Name
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		o, err := objs.Get(wctx, api.KindAgent, name)
		if err == nil {
			cur := o.(*api.Agent)
			switch cur.Status.Phase {
			case api.AgentRunning:
				return Lease{Sandbox: cur.Status.Sandbox, Agent: name}, nil
			case api.AgentFailed, api.AgentCancelled, api.AgentCompleted:
				return Lease{}, fmt.Errorf("agent %s ended (%s) before it ran: %s", name, cur.Status.Phase, cur.Status.Message)
			}
		} else if errors.Is(err, api.ErrNotFound) {
			return Lease{}, fmt.Errorf("agent %s was deleted while it waited for a sandbox: %w", name, api.ErrConflict)
		}
		select {
		case <-wctx.Done():
			// The lease is the caller's only while it waits: give it up.
			objs.Delete(context.WithoutCancel(ctx), api.KindAgent, name)
			if ctx.Err() != nil {
				return Lease{}, ctx.Err()
			}
			return Lease{}, fmt.Errorf("no sandbox of pool %s was free within %s (see `hvkube get pool %s`): %w", pool, wait, pool, api.ErrUnavailable)
		case <-tick.C:
		}
	}
}

// Release gives back a sandbox acquired with Acquire: it deletes the lease
// agent that holds it, which releases the sandbox by its pool's policy.
// It returns that agent's name.
func Release(ctx context.Context, objs Objects, sandbox string) (string, error) {
	o, err := objs.Get(ctx, api.KindSandbox, sandbox)
	if err != nil {
		return "", err
	}
	agent := o.(*api.Sandbox).Status.CurrentAgent
	if agent == "" {
		return "", fmt.Errorf("sandbox %s is not held by any agent: %w", sandbox, api.ErrConflict)
	}
	ao, err := objs.Get(ctx, api.KindAgent, agent)
	if err != nil {
		return "", err
	}
	if ao.GetMeta().Labels[LeaseLabel] == "" {
		return "", fmt.Errorf("sandbox %s is held by agent %s, which acquire_sandbox did not create: end it with complete_task: %w", sandbox, agent, api.ErrConflict)
	}
	if err := objs.Delete(ctx, api.KindAgent, agent); err != nil {
		return "", err
	}
	return agent, nil
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

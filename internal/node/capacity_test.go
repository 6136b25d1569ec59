package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/drivers/fake"
)

// TestPoolFarBeyondTheHost asks 10,000 sandboxes of a FAKE host with
// memory for 17: the pool creates what runs plus a small margin, says it
// cannot be satisfied (with the numbers) within seconds, adds nothing
// more, and is satisfiable again once scaled down to what fits.
func TestPoolFarBeyondTheHost(t *testing.T) {
	// 80% of 11,000 MB is 8,800 MB: 17 clones of 512 MB fit, 18 do not.
	const fit, replicas, margin = 17, 10000, 4
	c := newClusterWith(t, clusterOptions{fake: fake.Options{MemoryMB: 11000}})
	c.create(t, yamlObj(t, poolYAML("web", replicas, "")))
	start := time.Now()
	var cond *api.Condition
	eventually(t, "the pool is unsatisfiable", func() (bool, string) {
		o, err := c.st.Get(context.Background(), api.KindSandboxPool, "web")
		if err != nil {
			return false, err.Error()
		}
		cond = api.FindCondition(o.(*api.SandboxPool).Status.Conditions, "Satisfiable")
		return cond != nil && cond.Status == api.ConditionFalse, fmt.Sprintf("%+v, %d sandboxes", cond, len(c.members(t, "web")))
	})
	t.Logf("Satisfiable=False after %s: %s", time.Since(start).Round(time.Millisecond), cond.Message)
	if cond.Reason != "InsufficientMemory" || !strings.Contains(cond.Message, fmt.Sprintf("of %d sandboxes started", replicas)) {
		t.Errorf("Satisfiable condition %+v, want InsufficientMemory and how many of %d started", cond, replicas)
	}
	c.waitEvents(t, api.KindSandboxPool, "web", "InsufficientMemory", 1)
	// Over a few resyncs and the node's retries, the pool adds nothing.
	time.Sleep(2 * time.Second)
	members := c.members(t, "web")
	if got := len(members); got <= fit || got > fit+margin {
		t.Errorf("%d sandboxes, want more than the %d that fit and at most %d", got, fit, fit+margin)
	}
	phases := map[string]int{}
	for _, sb := range members {
		phases[sb.Status.Phase+"/"+sb.Status.Reason]++
	}
	if got, want := phases[api.SandboxPaused+"/Started"], fit; got != want {
		t.Errorf("%d sandboxes started, want %d (%v)", got, want, phases)
	}
	if got, want := phases[api.SandboxPending+"/InsufficientMemory"], len(members)-fit; got != want {
		t.Errorf("%d sandboxes waiting for memory, want %d (%v)", got, want, phases)
	}

	// Scaled down to what fits: satisfiable again, with the sandboxes
	// that run and none waiting.
	o, err := c.st.Get(context.Background(), api.KindSandboxPool, "web")
	if err != nil {
		t.Fatal(err)
	}
	p := o.(*api.SandboxPool)
	p.Spec.Replicas = fit
	if _, _, err := c.st.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool is satisfiable again", func() (bool, string) {
		o, err := c.st.Get(context.Background(), api.KindSandboxPool, "web")
		if err != nil {
			return false, err.Error()
		}
		cond = api.FindCondition(o.(*api.SandboxPool).Status.Conditions, "Satisfiable")
		return cond != nil && cond.Status == api.ConditionTrue && len(c.members(t, "web")) == fit, fmt.Sprintf("%+v, %d sandboxes", cond, len(c.members(t, "web")))
	})
	c.waitPool(t, "web", fit, api.SandboxPaused)
}

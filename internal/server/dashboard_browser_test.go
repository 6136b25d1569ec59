//go:build linux

package server

import (
	"context"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/web/webtest"
)

// TestDashboardInBrowser loads the dashboard in headless Chromium against
// a real server, with and without a token: the pool (with its counts) and
// the sandbox are listed and follow changes live; with a token the page
// works once it is entered (or handed over in the link's fragment), and
// shows nothing without it; a pending human request is answered from the
// page. The live view and the run-state buttons need a VM: see
// cmd/hvkube's TestDashboardOnQEMU.
func TestDashboardInBrowser(t *testing.T) {
	browser := webtest.Require(t)
	for _, token := range []string{"", "s3cret"} {
		name := "no token"
		if token != "" {
			name = "token"
		}
		t.Run(name, func(t *testing.T) {
			srv := serveReal(t, Options{Token: token})
			seedDashboard(t, srv)
			cfg := webtest.Config{
				URL: "http://" + srv.addr, Token: token, Chromium: browser,
				Pool: "web", PoolText: "1/2", Sandbox: "web-a1b2c",
				Agent: "asks", Question: "Which account should I use?", Answer: "the blue one",
			}
			webtest.MustRun(t, "overview", cfg, 2*time.Minute)
			if token != "" {
				webtest.MustRun(t, "notoken", cfg, 2*time.Minute)
				webtest.MustRun(t, "fragment", cfg, 2*time.Minute)
			}

			t.Run("answer a human request", func(t *testing.T) {
				webtest.MustRun(t, "hitl", cfg, 2*time.Minute)
				o, err := srv.st.Get(context.Background(), api.KindAgent, "asks")
				if err != nil {
					t.Fatal(err)
				}
				hr := o.(*api.Agent).Status.HumanRequest
				if hr.Pending() || hr.Answer != cfg.Answer || hr.AnsweredBy != "Test Person" {
					t.Fatalf("after answering on the page the request is %+v", hr)
				}
			})
		})
	}
}

// seedDashboard stores a pool with counts, one of its sandboxes, and an
// agent waiting for a person's answer.
func seedDashboard(t *testing.T, srv *served) {
	t.Helper()
	ctx := context.Background()
	st := srv.st
	pool := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}, Metadata: api.ObjectMeta{Name: "web"}, Spec: api.SandboxPoolSpec{Replicas: 2}}
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}, Metadata: api.ObjectMeta{
		Name: "web-a1b2c", Labels: map[string]string{"pool": "web"}, OwnerReferences: []api.OwnerReference{{Kind: api.KindSandboxPool, Name: "web"}},
	}}
	agent := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}, Metadata: api.ObjectMeta{Name: "asks"}, Spec: api.AgentSpec{SandboxName: "web-a1b2c", Type: "mcp-agent"}}
	for _, o := range []api.Object{pool, sb, agent} {
		if _, err := st.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reconcile.UpdateStatus(ctx, st, api.KindSandboxPool, "web", func(p *api.SandboxPool) bool {
		p.Status = api.SandboxPoolStatus{Replicas: 2, Desired: 2, Ready: 1, Warm: 1}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := reconcile.UpdateStatus(ctx, st, api.KindSandbox, "web-a1b2c", func(s *api.Sandbox) bool {
		s.Status.Phase = api.SandboxPaused
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := reconcile.UpdateStatus(ctx, st, api.KindAgent, "asks", func(a *api.Agent) bool {
		a.Status.Phase = api.AgentRunning
		a.Status.Sandbox = "web-a1b2c"
		a.Status.HumanRequest = &api.HumanRequest{ID: "q1", Question: "Which account should I use?", AskedAt: time.Now().UTC()}
		a.Status.Conditions = []api.Condition{{Type: api.ConditionWaitingForHuman, Status: "True", Reason: "HumanRequested", LastTransitionTime: time.Now().UTC()}}
		return true
	}); err != nil {
		t.Fatal(err)
	}
}

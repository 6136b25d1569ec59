package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/store/storefault"
	"github.com/hvkube/hvkube/internal/testlog"
)

// The scheduler binds in two writes on a store without multi-object
// transactions (storefault.Store hides the SQLite store's
// UpdateStatusGroups): the claim on the sandbox, then the agent's status.
// When the second write fails the claim is taken back, conditioned on the
// claim's resourceVersion. These tests fail the chosen write and check
// what is left in the store, in the round's caches and in the log.

// claimEnv is an env whose scheduler writes through a fault-injecting
// wrapper of the real store, and logs to logs.
type claimEnv struct {
	*env
	fs   *storefault.Store
	s    *Scheduler
	logs *testlog.Buffer
}

func newClaimEnv(t *testing.T) *claimEnv {
	e := newEnv(t)
	fs := storefault.New(e.st)
	if _, ok := any(fs).(groupUpdater); ok {
		t.Fatal("the fault store writes groups in one transaction: these tests need the two-write path")
	}
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return &claimEnv{env: e, fs: fs, s: NewScheduler(e.m, fs, log, e.clk.Now), logs: logs}
}

// round runs one scheduling round on the caches as they are (no sync).
func (e *claimEnv) round() (reconcile.Result, error) {
	e.t.Helper()
	return e.s.Reconcile(e.ctx, schedulerKey)
}

// checkUnbound checks that the agent is still pending, bound nowhere, and
// has no Scheduled event.
func (e *claimEnv) checkUnbound(name string) {
	e.t.Helper()
	a := e.agent(name)
	if a.Status.Phase != "" && a.Status.Phase != api.AgentPending {
		e.t.Errorf("agent %s is %s, want still pending", name, a.Status.Phase)
	}
	if a.Status.Sandbox != "" || a.Status.ScheduledAt != nil {
		e.t.Errorf("agent %s bound to %q at %v, want bound nowhere", name, a.Status.Sandbox, a.Status.ScheduledAt)
	}
	if n := len(e.events(api.KindAgent, name, "Scheduled")); n != 0 {
		e.t.Errorf("%d Scheduled events of agent %s, want none", n, name)
	}
}

func TestSchedulerCompensatesAFailedBinding(t *testing.T) {
	disk := errors.New("disk I/O error")
	tests := []struct {
		name string
		// agents are created; the first is the one the round binds.
		agents []*api.Agent
		// fault is what happens to the agent's status write.
		fault func(e *claimEnv) storefault.Fault
		// wantErr is what the round returns (nil: it counts a conflict
		// and asks to run again soon).
		wantErr error
		// claimLeft is the agent the sandbox's claim still names.
		claimLeft string
		// warn is a part of the warning logged, or "" for none.
		warn string
		// message is the sandbox's status.message afterwards: another
		// writer's, which the take-back must not overwrite.
		message string
		// nextBinds: the next round, on the same caches, binds the agent
		// to the sandbox.
		nextBinds bool
	}{
		{
			name:   "agent write conflicts",
			agents: []*api.Agent{newAgent(t, "job", nil)},
			fault: func(*claimEnv) storefault.Fault {
				return storefault.Fault{Err: fmt.Errorf("agent job changed: %w", api.ErrConflict)}
			},
			nextBinds: true,
		},
		{
			name:   "agent deleted meanwhile",
			agents: []*api.Agent{newAgent(t, "job", func(a *api.Agent) { a.Metadata.Finalizers = nil })},
			fault: func(e *claimEnv) storefault.Fault {
				return storefault.Fault{Before: func(storefault.Call) {
					if _, _, err := e.st.Delete(e.ctx, api.KindAgent, "job", store.DeleteOptions{}); err != nil {
						e.t.Error(err)
					}
				}}
			},
		},
		{
			name:   "agent write fails",
			agents: []*api.Agent{newAgent(t, "job", nil)},
			fault: func(*claimEnv) storefault.Fault {
				return storefault.Fault{Err: fmt.Errorf("update status: %w", disk)}
			},
			wantErr:   disk,
			nextBinds: true,
		},
		{
			// The claim stays; the node releases it once it is stale
			// (node.checkClaim), and no round binds there meanwhile.
			name:   "take-back fails too",
			agents: []*api.Agent{newAgent(t, "job", nil)},
			fault: func(e *claimEnv) storefault.Fault {
				return storefault.Fault{Err: disk, Before: func(storefault.Call) {
					e.fs.Inject(storefault.Fault{Op: storefault.UpdateStatus, Kind: api.KindSandbox, Times: 1,
						Err: fmt.Errorf("store: %w", api.ErrUnavailable)})
				}}
			},
			wantErr:   disk,
			claimLeft: "job",
			message:   "in use by agent job", // the claim's
			warn:      "take back a claim",
		},
		{
			// The node wrote the sandbox between the claim and the
			// agent: the take-back, conditioned on the claim's version,
			// must not overwrite that write. The claim stays until the
			// node finds it stale.
			name:   "sandbox written before the take-back",
			agents: []*api.Agent{newAgent(t, "job", nil)},
			fault: func(e *claimEnv) storefault.Fault {
				return storefault.Fault{Err: fmt.Errorf("agent job changed: %w", api.ErrConflict), Before: func(storefault.Call) {
					e.editSandbox("web-1", func(s *api.SandboxStatus) { s.Message = "heartbeat" })
				}}
			},
			claimLeft: "job",
			message:   "heartbeat",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newClaimEnv(t)
			e.createSandbox(testSandbox{name: "web-1", labels: map[string]string{"pool": "web"}, phase: api.SandboxPaused})
			for _, a := range tt.agents {
				e.create(a)
			}
			e.sync()
			f := tt.fault(e)
			f.Op, f.Kind, f.Name, f.Times = storefault.UpdateStatus, api.KindAgent, "job", 1
			e.fs.Inject(f)

			res, err := e.round()
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("round: %v, want no error", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("round: %v, want %v", err, tt.wantErr)
			case tt.wantErr == nil && (res.RequeueAfter <= 0 || res.RequeueAfter >= time.Second):
				t.Errorf("requeue after %s, want a quick retry after losing a binding", res.RequeueAfter)
			}

			sb := e.sandbox("web-1")
			if got := sb.Status.CurrentAgent; got != tt.claimLeft {
				t.Errorf("sandbox claimed by %q, want %q", got, tt.claimLeft)
			}
			if tt.claimLeft == "" && sb.Status.ClaimedAt != nil {
				t.Errorf("claimedAt %v left after the take-back", sb.Status.ClaimedAt)
			}
			if sb.Status.Message != tt.message {
				t.Errorf("sandbox message %q, want %q", sb.Status.Message, tt.message)
			}
			if e.exists(api.KindAgent, "job") {
				e.checkUnbound("job")
			}
			logs := e.logs.String()
			if tt.warn == "" && logs != "" {
				t.Errorf("logged %q, want nothing", logs)
			}
			if tt.warn != "" && (!strings.Contains(logs, tt.warn) || !strings.Contains(logs, "sandbox=web-1") || !strings.Contains(logs, "agent=job")) {
				t.Errorf("logged %q, want a warning with %q naming the sandbox and the agent", logs, tt.warn)
			}

			// Until the watch brings what the round wrote, the next
			// round leaves that sandbox alone; once it has, the next
			// round either binds over the taken-back claim or sees the
			// claim left and binds nothing.
			if _, err := e.round(); err != nil {
				t.Fatalf("next round: %v", err)
			}
			if got := e.sandbox("web-1").Status.CurrentAgent; got != tt.claimLeft {
				t.Errorf("a round before the watch brought the take-back changed the claim to %q", got)
			}
			e.sync()
			if _, err := e.round(); err != nil {
				t.Fatalf("next round: %v", err)
			}
			if !e.exists(api.KindAgent, "job") {
				return
			}
			if tt.nextBinds {
				if got := e.binding("job"); got != "web-1" {
					t.Errorf("the next round bound job to %q, want web-1", got)
				}
				if n := len(e.events(api.KindAgent, "job", "Scheduled")); n != 1 {
					t.Errorf("%d Scheduled events, want 1", n)
				}
			} else {
				e.checkUnbound("job")
				if got := e.sandbox("web-1").Status.CurrentAgent; got != tt.claimLeft {
					t.Errorf("after the next round the sandbox is claimed by %q, want %q", got, tt.claimLeft)
				}
			}
		})
	}
}

// TestSchedulerCompensationKeepsOtherBindings fails one binding of a round
// that places two agents: the other lands, and the failed one's sandbox is
// free again.
func TestSchedulerCompensationKeepsOtherBindings(t *testing.T) {
	e := newClaimEnv(t)
	web := map[string]string{"pool": "web"}
	e.createSandbox(testSandbox{name: "web-1", labels: web, phase: api.SandboxRunning})
	e.createSandbox(testSandbox{name: "web-2", labels: web, phase: api.SandboxPaused})
	e.create(newAgent(t, "first", nil))
	e.clk.Advance(time.Second)
	e.create(newAgent(t, "second", nil))
	e.sync()
	e.fs.Inject(storefault.Fault{Op: storefault.UpdateStatus, Kind: api.KindAgent, Name: "first", Times: 1,
		Err: fmt.Errorf("agent first changed: %w", api.ErrConflict)})
	res, err := e.round()
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter >= time.Second {
		t.Errorf("requeue after %s, want a quick retry", res.RequeueAfter)
	}
	// first would have taken the running sandbox; second still gets its
	// own pick, and the running one is free again.
	if got := e.binding("second"); got != "web-2" {
		t.Errorf("second bound to %q, want web-2", got)
	}
	e.checkUnbound("first")
	if got := e.sandbox("web-1").Status.CurrentAgent; got != "" {
		t.Errorf("web-1 claimed by %q after the take-back", got)
	}
	e.sync() // the watch brings the round's writes
	if _, err := e.round(); err != nil {
		t.Fatal(err)
	}
	if got := e.binding("first"); got != "web-1" {
		t.Errorf("the next round bound first to %q, want web-1", got)
	}
}

package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/drivers/fake"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// The sandbox operations of ops.go on the fake backend, called directly on
// a node with no Manager: the phases each accepts, what it records in the
// store (phase, reason, PID, times, events) and what it does to the VM.

// opsRig is a direct node with the sandbox box of its own.
type opsRig struct {
	*directNode
}

// newOpsRig makes the sandbox box and brings it to phase: by the node's own
// operations where there are some, by what happens to its VM otherwise,
// and by writing the status where nothing on the node leads there (Pending
// and Creating, with no VM yet). The backend's call log starts empty.
func newOpsRig(t *testing.T, phase string) *opsRig {
	t.Helper()
	r := &opsRig{newDirectNode(t, clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)))}
	r.create(yamlObj(t, sandboxYAML("box", "  templateRef: desk\n")))
	switch phase {
	case api.SandboxPending, api.SandboxCreating:
		r.setStatus(func(s *api.SandboxStatus) { s.Phase = phase })
	default:
		r.reconcile("box")
		if got := r.sandbox("box").Status.Phase; got != api.SandboxRunning {
			t.Fatalf("box is %s after its first reconcile, want Running", got)
		}
	}
	ctx := r.ctx
	var err error
	switch phase {
	case api.SandboxPaused:
		err = r.nd.Pause(ctx, "box")
	case api.SandboxSaved:
		err = r.nd.Save(ctx, "box")
	case api.SandboxError:
		r.be.Kill("box")
		r.reconcile("box")
	case api.SandboxTerminated:
		err = r.be.Stop(ctx, "box")
		r.reconcile("box")
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := r.phase(); got != phase {
		t.Fatalf("box is %s, want %s", got, phase)
	}
	r.be.ClearCalls()
	r.clk.Advance(time.Minute)
	return r
}

func (r *opsRig) phase() string {
	r.t.Helper()
	return r.sandbox("box").Status.Phase
}

func (r *opsRig) setStatus(edit func(*api.SandboxStatus)) {
	r.t.Helper()
	if _, err := reconcile.UpdateStatus(r.ctx, r.st, api.KindSandbox, "box", func(sb *api.Sandbox) bool {
		edit(&sb.Status)
		return true
	}); err != nil {
		r.t.Fatal(err)
	}
}

// vm returns box's VM as the backend has it.
func (r *opsRig) vm() backend.Info {
	r.t.Helper()
	info, err := r.be.Inspect(r.ctx, "box")
	if err != nil {
		r.t.Fatal(err)
	}
	return info
}

// events returns the reasons of box's events.
func (r *opsRig) events() []string {
	r.t.Helper()
	return storeEvents(r.t, r.st, api.KindSandbox, "box")
}

// lifecycleOps are the backend calls that change a VM's run state.
var lifecycleOps = []string{fake.OpPause, fake.OpResume, fake.OpSave, fake.OpRestore, fake.OpReset, fake.OpStop}

// lifecycleCalls is how many run-state calls the backend had since the
// rig's start.
func (r *opsRig) lifecycleCalls() int {
	n := 0
	for _, op := range lifecycleOps {
		n += r.be.Count(op)
	}
	return n
}

// run calls the operation op of the node.
func (r *opsRig) run(op string) error {
	switch op {
	case "pause":
		return r.nd.Pause(r.ctx, "box")
	case "resume":
		return r.nd.Resume(r.ctx, "box")
	case "save":
		return r.nd.Save(r.ctx, "box")
	case "reset":
		return r.nd.Reset(r.ctx, "box")
	}
	r.t.Fatalf("no operation %s", op)
	return nil
}

// TestTransitions runs pause, resume and save from each phase: the ones a
// phase allows change the VM and record the new phase with an event;
// asking for the phase the sandbox is in does nothing; the others are
// refused with ErrConflict and a hint, changing nothing.
func TestTransitions(t *testing.T) {
	tests := []struct {
		from, op string
		// to is the phase afterwards; "" when the operation is refused.
		to string
		// vm is the VM's state afterwards ("" when there is none).
		vm string
		// reason is the event recorded; "" for none.
		reason string
		// hint is a part of the refusal's message.
		hint string
	}{
		{api.SandboxRunning, "pause", api.SandboxPaused, backend.StatePaused, "Paused", ""},
		{api.SandboxRunning, "save", api.SandboxSaved, backend.StateSaved, "Saved", ""},
		{api.SandboxRunning, "resume", api.SandboxRunning, backend.StateRunning, "", ""},
		{api.SandboxPaused, "resume", api.SandboxRunning, backend.StateRunning, "Resumed", ""},
		{api.SandboxPaused, "save", api.SandboxSaved, backend.StateSaved, "Saved", ""},
		{api.SandboxPaused, "pause", api.SandboxPaused, backend.StatePaused, "", ""},
		{api.SandboxSaved, "resume", api.SandboxRunning, backend.StateRunning, "Resumed", ""},
		{api.SandboxSaved, "save", api.SandboxSaved, backend.StateSaved, "", ""},
		{api.SandboxSaved, "pause", "", backend.StateSaved, "", "it is Saved: resume it first"},
		{api.SandboxPending, "pause", "", "", "", "it is Pending: wait until it runs"},
		{api.SandboxPending, "resume", "", "", "", "it is Pending: wait until it runs"},
		{api.SandboxPending, "save", "", "", "", "it is Pending: wait until it runs"},
		{api.SandboxCreating, "pause", "", "", "", "it is Creating: wait until it runs"},
		{api.SandboxError, "pause", "", fake.StateGone, "", "it is Error"},
		{api.SandboxError, "resume", "", fake.StateGone, "", "it is Error"},
		{api.SandboxTerminated, "resume", "", backend.StateStopped, "", "it is Terminated"},
		{api.SandboxTerminated, "save", "", backend.StateStopped, "", "it is Terminated"},
	}
	for _, tt := range tests {
		t.Run(tt.from+" "+tt.op, func(t *testing.T) {
			r := newOpsRig(t, tt.from)
			before := r.sandbox("box")
			evs := len(r.events())
			err := r.run(tt.op)
			after := r.sandbox("box")

			if tt.to == "" {
				if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), tt.hint) || !strings.Contains(err.Error(), "cannot "+tt.op+" sandbox box") {
					t.Fatalf("%s of a %s sandbox: %v, want ErrConflict saying %q", tt.op, tt.from, err, tt.hint)
				}
				if after.Metadata.ResourceVersion != before.Metadata.ResourceVersion {
					t.Errorf("a refused %s wrote the sandbox: %+v", tt.op, after.Status)
				}
				if n := r.lifecycleCalls(); n != 0 {
					t.Errorf("a refused %s made %d run-state calls to the backend: %v", tt.op, n, r.be.Calls())
				}
			} else if err != nil {
				t.Fatalf("%s of a %s sandbox: %v", tt.op, tt.from, err)
			}
			if tt.vm != "" {
				if got := r.vm().State; got != tt.vm {
					t.Errorf("VM is %s, want %s", got, tt.vm)
				}
			} else if _, err := r.be.Inspect(r.ctx, "box"); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("a VM exists for a %s sandbox: %v", tt.from, err)
			}

			got := r.events()[evs:]
			switch {
			case tt.reason == "" && len(got) > 0:
				t.Errorf("events %v, want none", got)
			case tt.reason != "" && (len(got) != 1 || got[0] != tt.reason):
				t.Errorf("events %v, want [%s]", got, tt.reason)
			}
			if tt.to == "" || tt.reason == "" {
				if tt.to != "" && after.Metadata.ResourceVersion != before.Metadata.ResourceVersion {
					t.Errorf("a %s of a %s sandbox wrote it, want nothing done", tt.op, tt.from)
				}
				return
			}

			// A transition: the new phase, its reason, the VM's process,
			// and when it last ran.
			s := after.Status
			if s.Phase != tt.to || s.Reason != tt.reason || s.Message != "" {
				t.Errorf("status %s/%s %q, want %s/%s with no message", s.Phase, s.Reason, s.Message, tt.to, tt.reason)
			}
			if want := r.vm().PID; s.PID != want {
				t.Errorf("status PID %d, want the VM's %d", s.PID, want)
			}
			if c := api.FindCondition(s.Conditions, "Ready"); c == nil || c.Status != api.ConditionTrue || c.Reason != tt.to {
				t.Errorf("Ready condition %+v, want True, reason %s", c, tt.to)
			}
			if s.ObservedGeneration != after.Metadata.Generation {
				t.Errorf("observedGeneration %d, want %d", s.ObservedGeneration, after.Metadata.Generation)
			}
			resumed := s.LastResumedAt != nil && s.LastResumedAt.Equal(r.clk.Now())
			if (tt.to == api.SandboxRunning) != resumed {
				t.Errorf("lastResumedAt %v (now %v) after %s", s.LastResumedAt, r.clk.Now(), tt.op)
			}
		})
	}
}

// TestReset: from every phase with a VM, a reset takes the sandbox back to
// its template's clean state (guest files and clipboard gone, a new
// process); a running (or broken) one runs again afterwards, a warm one
// stays warm, paused. A sandbox with no VM yet is refused.
func TestReset(t *testing.T) {
	tests := []struct {
		from, to string
	}{
		{api.SandboxRunning, api.SandboxRunning},
		{api.SandboxPaused, api.SandboxPaused},
		{api.SandboxSaved, api.SandboxPaused},
		{api.SandboxError, api.SandboxRunning},
		{api.SandboxTerminated, api.SandboxRunning},
		{api.SandboxPending, ""},
		{api.SandboxCreating, ""},
	}
	for _, tt := range tests {
		t.Run(tt.from, func(t *testing.T) {
			r := newOpsRig(t, tt.from)
			if tt.to == "" {
				err := r.nd.Reset(r.ctx, "box")
				if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "wait until it runs") {
					t.Fatalf("reset of a %s sandbox: %v, want ErrConflict", tt.from, err)
				}
				if n := r.be.Count(fake.OpReset); n != 0 {
					t.Errorf("a refused reset called the backend %d times", n)
				}
				return
			}
			// What the user left in the guest.
			r.be.WriteFile("box", "/home/user/notes.txt", []byte("secret"))
			if tt.from == api.SandboxRunning {
				if err := r.nd.ClipboardSet(r.ctx, "box", "copied"); err != nil {
					t.Fatal(err)
				}
			}
			oldPID := r.sandbox("box").Status.PID

			if err := r.nd.Reset(r.ctx, "box"); err != nil {
				t.Fatalf("reset of a %s sandbox: %v", tt.from, err)
			}
			s := r.sandbox("box").Status
			vm := r.vm()
			if s.Phase != tt.to || s.Reason != "Reset" || !strings.HasPrefix(s.Message, "reset to the clean snapshot in ") {
				t.Errorf("status %s/%s %q, want %s/Reset", s.Phase, s.Reason, s.Message, tt.to)
			}
			if wantVM := map[string]string{api.SandboxRunning: backend.StateRunning, api.SandboxPaused: backend.StatePaused}[tt.to]; vm.State != wantVM {
				t.Errorf("VM is %s, want %s", vm.State, wantVM)
			}
			if vm.PID == 0 || vm.PID == oldPID || s.PID != vm.PID {
				t.Errorf("status PID %d, VM PID %d, before %d: want the new process's", s.PID, vm.PID, oldPID)
			}
			if _, ok := r.be.ReadFile("box", "/home/user/notes.txt"); ok {
				t.Error("a guest file outlived the reset")
			}
			if tt.to == api.SandboxRunning {
				if got, err := r.nd.ClipboardGet(r.ctx, "box"); err != nil || got != "" {
					t.Errorf("clipboard %q (%v) after the reset, want empty", got, err)
				}
				if s.LastResumedAt == nil || !s.LastResumedAt.Equal(r.clk.Now()) {
					t.Errorf("lastResumedAt %v, want now (%v)", s.LastResumedAt, r.clk.Now())
				}
			}
			if got := r.be.Count(fake.OpReset); got != 1 {
				t.Errorf("%d backend resets, want 1", got)
			}
			evs := r.events()
			if n := count(evs, "Reset"); n != 1 {
				t.Errorf("events %v, want one Reset", evs)
			}

			// The node's next look agrees with what the reset recorded.
			r.reconcile("box")
			if got := r.phase(); got != tt.to {
				t.Errorf("after the next reconcile box is %s, want %s", got, tt.to)
			}
		})
	}
}

// TestOperationFailures: a backend that fails an operation leaves the
// recorded phase as it was, with no event; a reset whose resume fails
// leaves the truth to the next observation. A sandbox being deleted or
// missing is refused before the backend is asked.
func TestOperationFailures(t *testing.T) {
	hang := errors.New("qmp: no answer within 30s")
	for _, tt := range []struct {
		op, failOp string
	}{
		{"pause", fake.OpPause},
		{"save", fake.OpSave},
		{"reset", fake.OpReset},
	} {
		t.Run(tt.op+" fails", func(t *testing.T) {
			r := newOpsRig(t, api.SandboxRunning)
			before := r.sandbox("box")
			evs := len(r.events())
			r.be.FailNext(tt.failOp, "box", hang)
			if err := r.run(tt.op); !errors.Is(err, hang) {
				t.Fatalf("%s: %v, want the backend's error", tt.op, err)
			}
			if after := r.sandbox("box"); after.Metadata.ResourceVersion != before.Metadata.ResourceVersion {
				t.Errorf("a failed %s wrote the sandbox: %s/%s", tt.op, after.Status.Phase, after.Status.Reason)
			}
			if got := r.events()[evs:]; len(got) != 0 {
				t.Errorf("events %v after a failed %s, want none", got, tt.op)
			}
			if got := r.vm().State; got != backend.StateRunning {
				t.Errorf("VM is %s after a failed %s, want still running", got, tt.op)
			}
		})
	}

	t.Run("reset whose resume fails", func(t *testing.T) {
		r := newOpsRig(t, api.SandboxRunning)
		r.be.FailNext(fake.OpResume, "box", hang)
		if err := r.nd.Reset(r.ctx, "box"); !errors.Is(err, hang) {
			t.Fatalf("reset: %v, want the resume's error", err)
		}
		// The VM was reset (paused, clean) but not resumed; the node's
		// next look records that.
		if got := r.vm().State; got != backend.StatePaused {
			t.Fatalf("VM is %s, want paused by the reset", got)
		}
		r.reconcile("box")
		if got := r.phase(); got != api.SandboxPaused {
			t.Errorf("after the next reconcile box is %s, want Paused, as its VM is", got)
		}
		if err := r.nd.Resume(r.ctx, "box"); err != nil {
			t.Fatalf("resume after the failed reset: %v", err)
		}
		if got := r.phase(); got != api.SandboxRunning {
			t.Errorf("box is %s after resume, want Running", got)
		}
	})

	t.Run("being deleted", func(t *testing.T) {
		r := newOpsRig(t, api.SandboxRunning)
		if _, _, err := r.st.Delete(r.ctx, api.KindSandbox, "box", store.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if r.sandbox("box") == nil {
			t.Fatal("box is gone at once; want its VM finalizer to hold it")
		}
		for _, op := range []string{"pause", "resume", "save", "reset"} {
			if err := r.run(op); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "being deleted") {
				t.Errorf("%s of a sandbox being deleted: %v, want ErrConflict", op, err)
			}
		}
		if err := r.nd.SendInput(r.ctx, "box", []backend.InputEvent{{Kind: backend.EventMove, X: 1, Y: 1}}); !errors.Is(err, api.ErrConflict) {
			t.Errorf("input to a sandbox being deleted: %v, want ErrConflict", err)
		}
		if n := r.lifecycleCalls() + r.be.Count(fake.OpInput); n != 0 {
			t.Errorf("the backend was asked %d times: %v", n, r.be.Calls())
		}
	})

	t.Run("missing", func(t *testing.T) {
		r := newOpsRig(t, api.SandboxRunning)
		for op, call := range map[string]func(context.Context, string) error{
			"pause": r.nd.Pause, "resume": r.nd.Resume, "save": r.nd.Save, "reset": r.nd.Reset,
		} {
			if err := call(r.ctx, "nowhere"); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("%s of a missing sandbox: %v, want ErrNotFound", op, err)
			}
		}
	})
}

// TestInputAndControl: input reaches only a running sandbox, and while a
// person holds it (status.control) only input on their behalf
// (display.WithControl with the take-over's ID). Reading the pointer is
// not input.
func TestInputAndControl(t *testing.T) {
	held := &api.SandboxControl{ID: "take-1", Holder: "alice@ops", Since: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	tests := []struct {
		name  string
		phase string
		hold  *api.SandboxControl
		as    string // the take-over ID ctx carries
		// refused is a part of the refusal's message; "" when the input
		// is sent.
		refused string
	}{
		{"running", api.SandboxRunning, nil, "", ""},
		{"running, an ID not asked for", api.SandboxRunning, nil, "take-9", ""},
		{"held", api.SandboxRunning, held, "", "alice@ops holds control of sandbox box since 2026-03-01T12:00:00Z"},
		{"held, another take-over", api.SandboxRunning, held, "take-0", "alice@ops holds control"},
		{"held, the holder", api.SandboxRunning, held, "take-1", ""},
		{"held by no one named", api.SandboxRunning, &api.SandboxControl{ID: "take-2", Since: held.Since}, "", "a person holds control"},
		{"paused", api.SandboxPaused, nil, "", "it is Paused: resume it first"},
		{"paused, the holder", api.SandboxPaused, held, "take-1", "it is Paused: resume it first"},
		{"saved", api.SandboxSaved, nil, "", "it is Saved: resume it first"},
		{"pending", api.SandboxPending, nil, "", "it is Pending: wait until it runs"},
	}
	move := []backend.InputEvent{
		{Kind: backend.EventMove, X: 40, Y: 30},
		{Kind: backend.EventButton, Button: backend.ButtonLeft, Down: true},
		{Kind: backend.EventButton, Button: backend.ButtonLeft},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newOpsRig(t, tt.phase)
			if tt.hold != nil {
				r.setStatus(func(s *api.SandboxStatus) { s.Control = tt.hold })
			}
			ctx := display.WithControl(r.ctx, tt.as)
			errSend := r.nd.SendInput(ctx, "box", move)
			errType := r.nd.TypeText(ctx, "box", "héllo")
			for what, err := range map[string]error{"SendInput": errSend, "TypeText": errType} {
				if tt.refused == "" {
					if err != nil {
						t.Errorf("%s: %v", what, err)
					}
					continue
				}
				if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), tt.refused) {
					t.Errorf("%s: %v, want ErrConflict saying %q", what, err, tt.refused)
				}
			}
			evs, typed := r.be.Events("box"), r.be.Typed("box")
			if tt.refused != "" {
				if len(evs) != 0 || typed != "" || r.be.Count(fake.OpInput) != 0 {
					t.Errorf("refused input reached the VM: events %v, typed %q, %d input calls", evs, typed, r.be.Count(fake.OpInput))
				}
				if tt.hold != nil && tt.phase == api.SandboxRunning {
					// The person's hold stays, untouched by the refusal.
					if c := r.sandbox("box").Status.Control; c == nil || c.ID != tt.hold.ID {
						t.Errorf("control after a refused input: %+v", c)
					}
				}
				return
			}
			if len(evs) != len(move) || evs[0] != move[0] || typed != "héllo" {
				t.Errorf("VM got events %v and typed %q, want %v and %q", evs, typed, move, "héllo")
			}
			x, y, err := r.nd.CursorPosition(ctx, "box")
			if err != nil || x != 40 || y != 30 {
				t.Errorf("pointer at %d,%d (%v), want 40,30", x, y, err)
			}
		})
	}
}

// TestCursorPositionWhileHeld: a person's hold refuses input, not a look
// at where the pointer is; a paused sandbox has no pointer to read.
func TestCursorPositionWhileHeld(t *testing.T) {
	r := newOpsRig(t, api.SandboxRunning)
	if err := r.nd.SendInput(r.ctx, "box", []backend.InputEvent{{Kind: backend.EventMove, X: 7, Y: 9}}); err != nil {
		t.Fatal(err)
	}
	r.setStatus(func(s *api.SandboxStatus) {
		s.Control = &api.SandboxControl{ID: "take-1", Holder: "bob", Since: time.Now()}
	})
	if x, y, err := r.nd.CursorPosition(r.ctx, "box"); err != nil || x != 7 || y != 9 {
		t.Errorf("pointer while held: %d,%d (%v), want 7,9", x, y, err)
	}
	if err := r.nd.Pause(r.ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.nd.CursorPosition(r.ctx, "box"); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("pointer of a paused sandbox: %v, want ErrConflict", err)
	}
}

// TestGuestAndScreenPhases: the guest calls need a running sandbox; a
// screenshot also takes a paused one; none takes a saved one.
func TestGuestAndScreenPhases(t *testing.T) {
	ctx := context.Background()
	calls := []struct {
		name string
		ok   []string // the phases it works in
		call func(n *Node) error
	}{
		{"exec", []string{api.SandboxRunning}, func(n *Node) error {
			_, err := n.Exec(ctx, "box", backend.ExecRequest{Path: "true"})
			return err
		}},
		{"clipboard get", []string{api.SandboxRunning}, func(n *Node) error { _, err := n.ClipboardGet(ctx, "box"); return err }},
		{"clipboard set", []string{api.SandboxRunning}, func(n *Node) error { return n.ClipboardSet(ctx, "box", "x") }},
		{"screenshot", []string{api.SandboxRunning, api.SandboxPaused}, func(n *Node) error {
			_, _, err := n.Screenshot(ctx, "box", backend.ScreenshotOptions{})
			return err
		}},
	}
	for _, phase := range []string{api.SandboxRunning, api.SandboxPaused, api.SandboxSaved} {
		t.Run(phase, func(t *testing.T) {
			r := newOpsRig(t, phase)
			for _, c := range calls {
				err := c.call(r.nd)
				works := false
				for _, p := range c.ok {
					works = works || p == phase
				}
				switch {
				case works && err != nil:
					t.Errorf("%s of a %s sandbox: %v", c.name, phase, err)
				case !works && !errors.Is(err, api.ErrConflict):
					t.Errorf("%s of a %s sandbox: %v, want ErrConflict", c.name, phase, err)
				}
			}
		})
	}
}

// TestResumeAfterAHalfDoneReset: a reset of a running sandbox whose resume
// fails leaves the VM paused (clean) while the record still says Running;
// a resume asked for before the node next looks must still run the VM.
func TestResumeAfterAHalfDoneReset(t *testing.T) {
	r := newOpsRig(t, api.SandboxRunning)
	r.be.FailNext(fake.OpResume, "box", errors.New("qmp: no answer within 30s"))
	if err := r.nd.Reset(r.ctx, "box"); err == nil {
		t.Fatal("reset succeeded although its resume failed")
	}
	if err := r.nd.Resume(r.ctx, "box"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := r.vm().State; got != backend.StateRunning {
		t.Errorf("VM is %s after a resume that succeeded, want running", got)
	}
	if err := r.nd.SendInput(r.ctx, "box", []backend.InputEvent{{Kind: backend.EventMove, X: 1, Y: 1}}); err != nil {
		t.Errorf("input after the resume: %v", err)
	}
}

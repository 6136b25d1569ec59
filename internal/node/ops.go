package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// The imperative sandbox operations of the API. Run-state changes take the
// sandbox's lock (the controller takes it too) and record the new phase;
// screen, input and guest calls go straight to the backend.

// sandboxFor reads sandbox name from the store, for an operation that
// changes its run state; it fails if the sandbox is being deleted.
func (n *Node) sandboxFor(ctx context.Context, name string) (*api.Sandbox, error) {
	o, err := n.st.Get(ctx, api.KindSandbox, name)
	if err != nil {
		return nil, err
	}
	return notDeleting(o.(*api.Sandbox))
}

func notDeleting(sb *api.Sandbox) (*api.Sandbox, error) {
	if sb.Metadata.DeletionTimestamp != nil {
		return nil, fmt.Errorf("sandbox %s is being deleted: %w", sb.Metadata.Name, api.ErrConflict)
	}
	return sb, nil
}

// sandboxWhere reads sandbox name for a screen, input or guest call, which
// check allows (nil: any): as the node's latest view shows it (its own
// writes included), and only if that view does not allow the call, again
// from the store. It saves a screenshot or a click the API server's round
// trip. The sandbox it returns may be the watch cache's own: callers only
// look at it.
func (n *Node) sandboxWhere(ctx context.Context, name string, check func(*api.Sandbox) error) (*api.Sandbox, error) {
	return n.lookAt(ctx, name, check, true)
}

// lookAt is sandboxWhere; use says whether the call counts as the
// sandbox's use, which wakes one paused for being idle (idle.go): the
// screen recording of an attempt looks without using.
func (n *Node) lookAt(ctx context.Context, name string, check func(*api.Sandbox) error, use bool) (*api.Sandbox, error) {
	allowed := func(o api.Object, err error) (*api.Sandbox, error) {
		if err != nil {
			return nil, err
		}
		sb, err := notDeleting(n.asReleased(o.(*api.Sandbox)))
		if err == nil && check != nil {
			err = check(sb)
		}
		return sb, err
	}
	sb, err := allowed(n.peek(ctx, api.KindSandbox, name))
	if err != nil {
		sb, err = allowed(n.st.Get(ctx, api.KindSandbox, name))
	}
	if !use {
		return sb, err
	}
	// One paused or saved for being idle is resumed for the call, which
	// then looks at it again.
	if woke, werr := n.wake(ctx, sb); werr != nil {
		return nil, werr
	} else if woke {
		sb, err = allowed(n.st.Get(ctx, api.KindSandbox, name))
	}
	if err == nil {
		n.busy(name)() // used now
	}
	return sb, err
}

// asReleased is sb as the data plane sees it: Paused while its release is
// under way or deferred (deferredReleases.paused), whatever its status
// still says. sb is not changed (it may be the cache's own).
func (n *Node) asReleased(sb *api.Sandbox) *api.Sandbox {
	if !n.deferred.paused(sb.Metadata.Name) {
		return sb
	}
	c := *sb
	c.Status.Phase, c.Status.Reason = api.SandboxPaused, "Released"
	return &c
}

// inPhase is a sandboxWhere check: the sandbox is in one of phases.
func inPhase(verb string, phases ...string) func(*api.Sandbox) error {
	return func(sb *api.Sandbox) error { return needPhase(sb, verb, phases...) }
}

// needPhase fails with ErrConflict unless the sandbox is in one of phases.
func needPhase(sb *api.Sandbox, verb string, phases ...string) error {
	for _, p := range phases {
		if sb.Status.Phase == p {
			return nil
		}
	}
	phase := orDefault(sb.Status.Phase, api.SandboxPending)
	hint := ""
	switch phase {
	case api.SandboxPaused, api.SandboxSaved:
		hint = ": resume it first"
	case api.SandboxPending, api.SandboxCreating:
		hint = ": wait until it runs"
	}
	return fmt.Errorf("cannot %s sandbox %s: it is %s%s: %w", verb, sb.Metadata.Name, phase, hint, api.ErrConflict)
}

// Pause stops a running sandbox's vCPUs.
func (n *Node) Pause(ctx context.Context, name string) error {
	return n.transition(ctx, name, "pause", []string{api.SandboxRunning, api.SandboxPaused}, api.SandboxPaused, n.be.Pause)
}

// Resume runs a paused or saved sandbox.
func (n *Node) Resume(ctx context.Context, name string) error {
	return n.transition(ctx, name, "resume", []string{api.SandboxPaused, api.SandboxSaved, api.SandboxRunning}, api.SandboxRunning, n.be.Resume)
}

// Save writes a sandbox to disk and ends its process.
func (n *Node) Save(ctx context.Context, name string) error {
	return n.transition(ctx, name, "save", []string{api.SandboxRunning, api.SandboxPaused, api.SandboxSaved}, api.SandboxSaved, n.be.Save)
}

// Reset returns a sandbox to its clean state; a running sandbox runs again
// afterwards.
func (n *Node) Reset(ctx context.Context, name string) error {
	unlock := n.locks.lock(name)
	defer unlock()
	if err := n.releaseBefore(ctx, name, "reset"); err != nil {
		return err
	}
	sb, err := n.sandboxFor(ctx, name)
	if err != nil {
		return err
	}
	if err := needPhase(sb, "reset", api.SandboxRunning, api.SandboxPaused, api.SandboxSaved, api.SandboxError, api.SandboxTerminated); err != nil {
		return err
	}
	start := n.now()
	if err := n.be.Reset(ctx, name); err != nil {
		return err
	}
	phase := api.SandboxPaused
	if sb.Status.Phase == api.SandboxRunning || sb.Status.Phase == api.SandboxError || sb.Status.Phase == api.SandboxTerminated {
		if err := n.be.Resume(ctx, name); err != nil {
			// The VM is clean and paused: say so, so that a resume asked
			// for next runs it rather than trusting a Running record.
			msg := fmt.Sprintf("reset to the clean snapshot, but the resume after it failed: %v", err)
			n.event(ctx, sb, api.EventWarning, "ResetIncomplete", msg)
			if uerr := n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
				s.Phase, s.Reason, s.Message = api.SandboxPaused, "ResetIncomplete", msg
			}); uerr != nil {
				n.log.Warn("record a reset whose resume failed", "sandbox", name, "err", uerr)
			}
			return err
		}
		phase = api.SandboxRunning
	}
	info, _ := n.be.Inspect(ctx, name)
	msg := fmt.Sprintf("reset to the clean snapshot in %s", n.now().Sub(start).Round(time.Millisecond))
	n.event(ctx, sb, api.EventNormal, "Reset", msg)
	return n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		now := n.now().UTC()
		s.Phase, s.Reason, s.Message, s.PID = phase, "Reset", msg, info.PID
		if phase == api.SandboxRunning {
			s.LastResumedAt = &now
		}
	})
}

func (n *Node) transition(ctx context.Context, name, verb string, from []string, to string, op func(context.Context, string) error) error {
	unlock := n.locks.lock(name)
	defer unlock()
	if err := n.releaseBefore(ctx, name, verb); err != nil {
		return err
	}
	sb, err := n.sandboxFor(ctx, name)
	if err != nil {
		return err
	}
	if err := needPhase(sb, verb, from...); err != nil {
		return err
	}
	if sb.Status.Phase == to {
		return nil
	}
	start := n.now()
	if err := op(ctx, name); err != nil {
		return err
	}
	took := n.now().Sub(start)
	// Only a move to or from disk changes the process.
	pid := n.pidAfter(ctx, sb, sb.Status.Phase != api.SandboxSaved && to != api.SandboxSaved)
	// The status goes first: it is what the caller waits for, and the
	// event's write would otherwise hold the store's one writer ahead of it.
	err = n.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		s.Phase, s.Reason, s.Message, s.PID = to, phaseReason(to), "", pid
		if to == api.SandboxRunning {
			now := n.now().UTC()
			s.LastResumedAt = &now
		}
	})
	n.event(ctx, sb, api.EventNormal, phaseReason(to), fmt.Sprintf("%s in %s", verb, took.Round(time.Microsecond)))
	return err
}

// pidAfter is the sandbox's QEMU process id after an operation: the one
// recorded when the operation kept the process (a question to the
// backend, which asks QEMU, is saved on the fast path), else the
// backend's.
func (n *Node) pidAfter(ctx context.Context, sb *api.Sandbox, sameProcess bool) int {
	if sameProcess && sb.Status.PID != 0 {
		return sb.Status.PID
	}
	info, _ := n.be.Inspect(ctx, sb.Metadata.Name)
	return info.PID
}

func phaseReason(phase string) string {
	switch phase {
	case api.SandboxPaused:
		return "Paused"
	case api.SandboxRunning:
		return "Resumed"
	case api.SandboxSaved:
		return "Saved"
	}
	return phase
}

var errNoAbility = errors.New("the backend cannot do this")

// Screenshot returns the sandbox's screen (running or paused).
func (n *Node) Screenshot(ctx context.Context, name string, opts backend.ScreenshotOptions) ([]byte, string, error) {
	return n.screenshot(ctx, name, opts, true)
}

// screenshot is Screenshot; use says whether it counts as the sandbox's
// use (see lookAt).
func (n *Node) screenshot(ctx context.Context, name string, opts backend.ScreenshotOptions, use bool) ([]byte, string, error) {
	scr, ok := n.be.(backend.Screen)
	if !ok {
		return nil, "", fmt.Errorf("screenshots: %w: %w", errNoAbility, api.ErrUnsupported)
	}
	if use {
		defer n.busy(name)()
	}
	if _, err := n.lookAt(ctx, name, inPhase("take a screenshot of", api.SandboxRunning, api.SandboxPaused), use); err != nil {
		return nil, "", err
	}
	return scr.Screenshot(ctx, name, opts)
}

// ScreenSize implements display.Desktop: the sandbox's resolution.
func (n *Node) ScreenSize(ctx context.Context, name string) (int, int, error) {
	sb, err := n.sandboxWhere(ctx, name, nil)
	if err != nil {
		return 0, 0, err
	}
	return api.ParseResolution(orDefault(sb.Status.Resolution, orDefault(sb.Spec.Display.Resolution, api.DefaultResolution)))
}

// inputTo returns the sandbox if input may be sent to it now: it runs, and
// no person holds it, or ctx carries the holder's take-over ID.
//
// The node is the authority on who holds a sandbox's input: a person's
// take-over is written by the node that owns the sandbox (TakeControl),
// which sees its own write at once (read), before the take-over is
// answered; the check reads nothing from the store, and whichever API
// server the agent's input comes through, it is refused from then on.
func (n *Node) inputTo(ctx context.Context, name string) error {
	o, err := n.peek(ctx, api.KindSandbox, name)
	if err != nil {
		return err
	}
	sb, err := notDeleting(n.asReleased(o.(*api.Sandbox)))
	if err != nil {
		return err
	}
	if woke, err := n.wake(ctx, sb); err != nil {
		return err
	} else if woke {
		if o, err = n.peek(ctx, api.KindSandbox, name); err != nil {
			return err
		}
		sb = o.(*api.Sandbox)
	}
	if c := sb.Status.Control; c != nil && display.ControlFrom(ctx) != c.ID {
		return fmt.Errorf("%s holds control of sandbox %s since %s: input is refused until they hand it back: %w",
			orDefault(c.Holder, "a person"), name, c.Since.UTC().Format(time.RFC3339), api.ErrConflict)
	}
	return needPhase(sb, "send input to", api.SandboxRunning)
}

// SendInput implements display.Desktop.
func (n *Node) SendInput(ctx context.Context, name string, evs []backend.InputEvent) error {
	in, ok := n.be.(backend.Input)
	if !ok {
		return fmt.Errorf("input: %w: %w", errNoAbility, api.ErrUnsupported)
	}
	defer n.busy(name)()
	if err := n.inputTo(ctx, name); err != nil {
		return err
	}
	return in.SendInput(ctx, name, evs)
}

// TypeText implements display.Desktop.
func (n *Node) TypeText(ctx context.Context, name, text string) error {
	t, ok := n.be.(backend.TextInput)
	if !ok {
		return fmt.Errorf("typing text beyond ASCII: %w: %w", errNoAbility, api.ErrUnsupported)
	}
	defer n.busy(name)()
	if err := n.inputTo(ctx, name); err != nil {
		return err
	}
	return t.TypeText(ctx, name, text)
}

// CursorPosition implements display.Desktop.
func (n *Node) CursorPosition(ctx context.Context, name string) (int, int, error) {
	c, ok := n.be.(backend.Cursor)
	if !ok {
		return 0, 0, fmt.Errorf("cursor position: %w: %w", errNoAbility, api.ErrUnsupported)
	}
	defer n.busy(name)()
	if _, err := n.sandboxWhere(ctx, name, inPhase("read the pointer of", api.SandboxRunning)); err != nil {
		return 0, 0, err
	}
	return c.CursorPosition(ctx, name)
}

// Actions is the action layer over this node's sandboxes.
func (n *Node) Actions() *display.Actions { return n.actions }

func (n *Node) guest(ctx context.Context, name, verb string) (backend.Guest, error) {
	g, ok := n.be.(backend.Guest)
	if !ok {
		return nil, fmt.Errorf("guest access: %w: %w", errNoAbility, api.ErrUnsupported)
	}
	if _, err := n.sandboxWhere(ctx, name, inPhase(verb, api.SandboxRunning)); err != nil {
		return nil, err
	}
	return g, nil
}

// Exec runs a program in a running sandbox.
func (n *Node) Exec(ctx context.Context, name string, req backend.ExecRequest) (backend.ExecResult, error) {
	defer n.busy(name)()
	g, err := n.guest(ctx, name, "exec in")
	if err != nil {
		return backend.ExecResult{}, err
	}
	req, err = n.withSession(ctx, name, req)
	if err != nil {
		return backend.ExecResult{}, err
	}
	return g.Exec(ctx, name, req)
}

// ClipboardGet reads a running sandbox's clipboard.
func (n *Node) ClipboardGet(ctx context.Context, name string) (string, error) {
	defer n.busy(name)()
	g, err := n.guest(ctx, name, "read the clipboard of")
	if err != nil {
		return "", err
	}
	return g.ClipboardGet(ctx, name)
}

// ClipboardSet sets a running sandbox's clipboard.
func (n *Node) ClipboardSet(ctx context.Context, name, text string) error {
	defer n.busy(name)()
	g, err := n.guest(ctx, name, "set the clipboard of")
	if err != nil {
		return err
	}
	return g.ClipboardSet(ctx, name, text)
}

// Logs returns the sandbox's console log.
func (n *Node) Logs(ctx context.Context, name string) (io.ReadCloser, error) {
	if _, err := n.sandboxFor(ctx, name); err != nil {
		return nil, err
	}
	l, ok := n.be.(backend.Logs)
	if !ok {
		return nil, fmt.Errorf("logs: %w: %w", errNoAbility, api.ErrUnsupported)
	}
	return l.Logs(ctx, name)
}

// DialDisplay connects to the VNC server of a sandbox that has a process
// (running or paused); the caller closes the connection.
func (n *Node) DialDisplay(ctx context.Context, name string) (io.ReadWriteCloser, error) {
	d, ok := n.be.(backend.Display)
	if !ok {
		return nil, fmt.Errorf("the live display: %w: %w", errNoAbility, api.ErrUnsupported)
	}
	done := n.busy(name)
	if _, err := n.sandboxWhere(ctx, name, inPhase("show the display of", api.SandboxRunning, api.SandboxPaused)); err != nil {
		done()
		return nil, err
	}
	c, err := d.DialDisplay(ctx, name)
	if err != nil {
		done()
		return nil, err
	}
	// A live display keeps its sandbox busy while it is open.
	return &heldStream{ReadWriteCloser: c, done: done}, nil
}

// TakeControl gives c the input of sandbox name (display.TakeControl) and
// returns the take-over it replaced: written by this node, the owner of
// the sandbox, so that its input check refuses everyone else's input from
// the moment this returns (inputTo).
func (n *Node) TakeControl(ctx context.Context, name string, c api.SandboxControl, force bool) (taken *api.SandboxControl, sb *api.Sandbox, err error) {
	sb, err = n.editControl(ctx, name, func(cur *api.Sandbox) (bool, error) {
		var err error
		taken, err = display.TakeControl(cur, c, force)
		return err == nil, err
	})
	return taken, sb, err
}

// ReleaseControl ends take-over id of sandbox name (any, with force) and
// returns it, nil when none was held.
func (n *Node) ReleaseControl(ctx context.Context, name, id string, force bool) (released *api.SandboxControl, sb *api.Sandbox, err error) {
	sb, err = n.editControl(ctx, name, func(cur *api.Sandbox) (bool, error) {
		var err error
		released, err = display.ReleaseControl(cur, id, force)
		return released != nil, err
	})
	return released, sb, err
}

// editControl writes what edit makes of sandbox name's status, from the
// node's latest view of it and again on a fresh read if another writer
// came first; edit's error refuses the change.
func (n *Node) editControl(ctx context.Context, name string, edit func(*api.Sandbox) (bool, error)) (*api.Sandbox, error) {
	o, err := n.read(ctx, api.KindSandbox, name)
	if err != nil {
		return nil, err
	}
	return reconcile.EditStatusFrom(ctx, n.st, api.KindSandbox, o.(*api.Sandbox), edit)
}

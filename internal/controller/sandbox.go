package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// reconcileSandbox brings a sandbox's VM in line with its object: clones it
// when the template is ready, follows what the VM really does, and removes
// the VM when the object is deleted (or never existed).
func (m *Manager) reconcileSandbox(ctx context.Context, name string) (Result, error) {
	o, err := m.st.Get(ctx, api.KindSandbox, name)
	if err == nil && o.GetMeta().DeletionTimestamp == nil {
		switch o.(*api.Sandbox).Status.Phase {
		case api.SandboxRunning, api.SandboxPaused, api.SandboxSaved:
			// Observing does the slow part (the health check) without the
			// sandbox's lock, so that API calls do not wait for it.
			return m.observeSandbox(ctx, name)
		}
	}
	unlock := m.locks.lock(name)
	defer unlock()
	o, err = m.st.Get(ctx, api.KindSandbox, name)
	if errors.Is(err, api.ErrNotFound) {
		return Result{}, m.be.Delete(ctx, name)
	}
	if err != nil {
		return Result{}, err
	}
	sb := o.(*api.Sandbox)
	if sb.Metadata.DeletionTimestamp != nil {
		if sb.Status.Phase != api.SandboxTerminating {
			m.setPhase(ctx, sb, api.SandboxTerminating, "Deleting", "stopping the VM and removing its files")
		}
		if err := m.be.Delete(ctx, name); err != nil {
			return Result{}, err
		}
		m.event(ctx, sb, api.EventNormal, "Deleted", "VM stopped and removed")
		return Result{}, m.removeFinalizer(ctx, sb, FinalizerVM)
	}
	switch sb.Status.Phase {
	case "", api.SandboxPending, api.SandboxCreating:
		return m.createSandbox(ctx, sb)
	case api.SandboxError, api.SandboxTerminated:
		return Result{}, nil
	default: // its phase changed since the first look
		return Result{RequeueAfter: time.Millisecond}, nil
	}
}

func (m *Manager) createSandbox(ctx context.Context, sb *api.Sandbox) (Result, error) {
	o, err := m.ensureFinalizer(ctx, sb, FinalizerVM)
	if err != nil {
		return Result{}, err
	}
	sb = o.(*api.Sandbox)
	tplName := sb.Spec.TemplateRef
	if tplName == "" {
		tplName = m.opt.DefaultTemplate
	}
	if tplName == "" {
		return Result{}, m.pending(ctx, sb, "NoTemplate", "spec.templateRef is empty and the server has no default template")
	}
	to, err := m.st.Get(ctx, api.KindTemplate, tplName)
	if errors.Is(err, api.ErrNotFound) {
		return Result{RequeueAfter: 30 * time.Second}, m.pending(ctx, sb, "TemplateNotFound", fmt.Sprintf("template %s does not exist: apply it (examples/template.yaml)", tplName))
	}
	if err != nil {
		return Result{}, err
	}
	tpl := to.(*api.Template)
	if tpl.Status.Phase != api.TemplateReady || tpl.Status.Snapshot == nil {
		msg := fmt.Sprintf("waiting for template %s (%s)", tplName, orDefault(tpl.Status.Phase, api.TemplatePending))
		if tpl.Status.Message != "" {
			msg += ": " + tpl.Status.Message
		}
		return Result{}, m.pending(ctx, sb, "TemplateNotReady", msg)
	}
	if len(sb.Spec.Volumes) > 0 {
		msg := fmt.Sprintf("spec.volumes: the %s backend cannot map host folders into sandboxes yet", m.be.Name())
		m.event(ctx, sb, api.EventWarning, "Unsupported", msg)
		return Result{}, m.setPhase(ctx, sb, api.SandboxError, "Unsupported", msg)
	}
	if sb.Spec.Resources.GPU {
		return Result{RequeueAfter: time.Minute}, m.pending(ctx, sb, "NoGPU", "the sandbox asks for a GPU and this host has none for sandboxes")
	}
	if mem := sb.Spec.Resources.MemoryMB; mem != 0 && mem != tpl.Spec.Resources.MemoryMB {
		return Result{RequeueAfter: time.Minute}, m.pending(ctx, sb, "MemoryMismatch",
			fmt.Sprintf("spec.resources.memoryMB is %d but template %s has %d: a clone has its template's memory", mem, tplName, tpl.Spec.Resources.MemoryMB))
	}
	if sb.Status.Phase != api.SandboxCreating {
		m.setPhase(ctx, sb, api.SandboxCreating, "Cloning", fmt.Sprintf("cloning from template %s", tplName))
	}
	start := time.Now()
	info, err := m.be.Create(ctx, backend.SandboxSpec{
		ID: sb.Metadata.Name, UID: sb.Metadata.UID, TemplateID: tpl.Status.Snapshot.ID,
		Resolution: sb.Spec.Display.Resolution, Hostname: sb.Metadata.Name,
	})
	switch {
	case errors.Is(err, api.ErrUnavailable):
		m.event(ctx, sb, api.EventWarning, "InsufficientMemory", err.Error())
		return Result{RequeueAfter: 30 * time.Second}, m.pending(ctx, sb, "InsufficientMemory", err.Error())
	case errors.Is(err, api.ErrUnsupported), errors.Is(err, api.ErrInvalid):
		m.event(ctx, sb, api.EventWarning, "Unsupported", err.Error())
		return Result{}, m.setPhase(ctx, sb, api.SandboxError, "Unsupported", err.Error())
	case err != nil:
		m.event(ctx, sb, api.EventWarning, "CreateFailed", err.Error())
		return Result{}, err
	}
	cloned := time.Since(start)
	now := time.Now().UTC()
	msg := fmt.Sprintf("cloned from %s in %s", tpl.Status.Snapshot.ID, cloned.Round(time.Millisecond))
	phase := api.SandboxPaused
	if api.OwnerOf(sb, api.KindSandboxPool) == "" {
		// A sandbox of its own is wanted running; a pool keeps its spares
		// paused until an agent takes one.
		rs := time.Now()
		if err := m.be.Resume(ctx, sb.Metadata.Name); err != nil {
			m.event(ctx, sb, api.EventWarning, "ResumeFailed", err.Error())
			return Result{}, err
		}
		phase = api.SandboxRunning
		msg += fmt.Sprintf(", resumed in %s", time.Since(rs).Round(time.Millisecond))
		if err := m.startup(ctx, sb); err != nil {
			m.event(ctx, sb, api.EventWarning, "StartupFailed", err.Error())
			return Result{}, m.setPhase(ctx, sb, api.SandboxError, "StartupFailed", err.Error())
		}
	}
	if info, err = m.be.Inspect(ctx, sb.Metadata.Name); err != nil {
		return Result{}, err
	}
	m.event(ctx, sb, api.EventNormal, "Started", msg)
	err = m.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		s.Phase, s.Reason, s.Message = phase, "Started", msg
		s.Template = tplName
		s.BackendID = info.ID
		s.Display = info.Display
		s.Resolution = info.Resolution
		s.PID = info.PID
		s.StartedAt = &now
		if phase == api.SandboxRunning {
			s.ReadyAt, s.LastResumedAt, s.LastHeartbeat = &now, &now, &now
		}
	})
	return Result{RequeueAfter: interval(sb)}, err
}

// observeSandbox follows what the VM really does: its run state, whether it
// still exists, and (while it runs) its health. The health check runs
// without the sandbox's lock; the result is written under it, after looking
// at the run state again, so that a pause made meanwhile is not undone.
func (m *Manager) observeSandbox(ctx context.Context, name string) (Result, error) {
	var health error
	checked := false
	if info, err := m.be.Inspect(ctx, name); err == nil && info.State == backend.StateRunning {
		for try := 0; try < 2; try++ {
			// A second try: a check caught by a pause and resume fails
			// without the guest being unwell.
			hctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			health = m.healthCheck(hctx, name)
			cancel()
			if health == nil {
				break
			}
		}
		checked = true
	}
	unlock := m.locks.lock(name)
	defer unlock()
	o, err := m.st.Get(ctx, api.KindSandbox, name)
	if errors.Is(err, api.ErrNotFound) {
		return Result{}, nil
	}
	if err != nil {
		return Result{}, err
	}
	sb := o.(*api.Sandbox)
	if sb.Metadata.DeletionTimestamp != nil {
		return Result{RequeueAfter: time.Millisecond}, nil
	}
	info, err := m.be.Inspect(ctx, name)
	if errors.Is(err, api.ErrNotFound) {
		m.event(ctx, sb, api.EventWarning, "VMNotFound", "the sandbox's VM no longer exists")
		return Result{}, m.setPhase(ctx, sb, api.SandboxError, "VMNotFound", "the sandbox's VM no longer exists")
	}
	if err != nil {
		return Result{}, err
	}
	phase := sb.Status.Phase
	switch info.State {
	case backend.StateRunning:
		phase = api.SandboxRunning
	case backend.StatePaused:
		phase = api.SandboxPaused
	case backend.StateSaved:
		phase = api.SandboxSaved
	case backend.StateStopped:
		phase = api.SandboxTerminated
	default:
		msg := "the VM's process is gone (it crashed or was killed)"
		m.event(ctx, sb, api.EventWarning, "VMGone", msg)
		return Result{}, m.setPhase(ctx, sb, api.SandboxError, "VMGone", msg)
	}
	reason, msg := sb.Status.Reason, sb.Status.Message
	var beat *time.Time
	if phase == api.SandboxRunning && checked {
		if health != nil {
			if reason != "Unhealthy" {
				m.event(ctx, sb, api.EventWarning, "Unhealthy", health.Error())
			}
			reason, msg = "Unhealthy", health.Error()
		} else {
			now := time.Now().UTC()
			beat = &now
			if reason == "Unhealthy" {
				m.event(ctx, sb, api.EventNormal, "Healthy", "the guest answers again")
				reason, msg = "Healthy", "the guest answers"
			}
		}
	}
	err = m.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		s.Phase, s.Reason, s.Message = phase, reason, msg
		s.PID = info.PID
		if beat != nil {
			s.LastHeartbeat = beat
		}
	})
	return Result{RequeueAfter: interval(sb)}, err
}

// startup starts the sandbox's spec.startup commands in the guest, in
// order, without waiting for them: they are programs that keep running.
func (m *Manager) startup(ctx context.Context, sb *api.Sandbox) error {
	if len(sb.Spec.Startup) == 0 {
		return nil
	}
	g, ok := m.be.(backend.Guest)
	if !ok {
		return fmt.Errorf("spec.startup: the %s backend cannot run programs in the guest", m.be.Name())
	}
	for i, c := range sb.Spec.Startup {
		if _, err := g.Exec(ctx, sb.Metadata.Name, backend.ExecRequest{Path: c.Command, Args: c.Args, Detach: true}); err != nil {
			return fmt.Errorf("spec.startup[%d] (%s): %w", i, c.Command, err)
		}
		m.event(ctx, sb, api.EventNormal, "Startup", fmt.Sprintf("started %s %s", c.Command, strings.Join(c.Args, " ")))
	}
	return nil
}

// healthCheck runs the sandbox's spec.healthCheck: the guest agent answers
// (guest), a process of that name runs in the guest (process), or something
// listens on a TCP port in the guest (tcp).
func (m *Manager) healthCheck(ctx context.Context, name string) error {
	if err := m.be.Alive(ctx, name); err != nil {
		return err
	}
	o, err := m.st.Get(ctx, api.KindSandbox, name)
	if err != nil {
		return nil
	}
	hc := o.(*api.Sandbox).Spec.HealthCheck
	g, ok := m.be.(backend.Guest)
	if !ok || hc.Type == "" || hc.Type == "guest" {
		return nil
	}
	var req backend.ExecRequest
	switch hc.Type {
	case "process":
		req = backend.ExecRequest{Path: "pgrep", Args: []string{"-x", "--", hc.ProcessName}}
	case "tcp":
		// bash opens /dev/tcp/HOST/PORT itself; the port is a validated
		// number, not user text.
		req = backend.ExecRequest{Path: "bash", Args: []string{"-c", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d", hc.Port)}}
	default:
		return nil
	}
	res, err := g.Exec(ctx, name, req)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		if hc.Type == "process" {
			return fmt.Errorf("no process %q runs in the guest", hc.ProcessName)
		}
		return fmt.Errorf("nothing listens on port %d in the guest", hc.Port)
	}
	return nil
}

func interval(sb *api.Sandbox) time.Duration {
	if s := sb.Spec.HealthCheck.IntervalSeconds; s > 0 {
		return time.Duration(s) * time.Second
	}
	return api.DefaultHealthInterval * time.Second
}

func (m *Manager) pending(ctx context.Context, sb *api.Sandbox, reason, msg string) error {
	if sb.Status.Phase == api.SandboxPending && sb.Status.Reason == reason && sb.Status.Message == msg {
		return nil
	}
	m.event(ctx, sb, api.EventNormal, reason, msg)
	return m.setPhase(ctx, sb, api.SandboxPending, reason, msg)
}

func (m *Manager) setPhase(ctx context.Context, sb *api.Sandbox, phase, reason, msg string) error {
	return m.updateStatus(ctx, sb, func(s *api.SandboxStatus) {
		s.Phase, s.Reason, s.Message = phase, reason, msg
		if phase == api.SandboxTerminated || phase == api.SandboxError {
			s.PID = 0
		}
	})
}

// updateStatus re-reads the sandbox and applies change to its status.
func (m *Manager) updateStatus(ctx context.Context, sb *api.Sandbox, change func(*api.SandboxStatus)) error {
	o, err := m.st.Get(ctx, api.KindSandbox, sb.Metadata.Name)
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	cur := o.(*api.Sandbox)
	change(&cur.Status)
	cur.Status.ObservedGeneration = cur.Metadata.Generation
	cur.Metadata.ResourceVersion = ""
	_, err = m.st.UpdateStatus(ctx, cur)
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	return err
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

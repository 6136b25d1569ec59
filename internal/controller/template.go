package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// reconcileTemplate builds the snapshot of a template's current generation
// (Pending -> Building -> Ready or Failed) and removes it when the template
// is deleted.
func (m *Manager) reconcileTemplate(ctx context.Context, name string) (Result, error) {
	o, err := m.st.Get(ctx, api.KindTemplate, name)
	if errors.Is(err, api.ErrNotFound) {
		return Result{}, nil
	}
	if err != nil {
		return Result{}, err
	}
	t := o.(*api.Template)
	if t.Metadata.DeletionTimestamp != nil {
		if t.Status.Snapshot != nil && t.Status.Snapshot.ID != "" {
			if err := m.be.DeleteTemplate(ctx, t.Status.Snapshot.ID); err != nil {
				return Result{}, err
			}
		}
		return Result{}, m.removeFinalizer(ctx, t, FinalizerSnapshot)
	}
	if o, err = m.ensureFinalizer(ctx, t, FinalizerSnapshot); err != nil {
		return Result{}, err
	}
	t = o.(*api.Template)

	id := snapshotID(t)
	if t.Status.Phase == api.TemplateReady && t.Status.Snapshot != nil && t.Status.Snapshot.ID == id {
		if _, err := m.be.InspectTemplate(ctx, id); err == nil {
			return Result{}, nil
		}
		m.event(ctx, t, api.EventWarning, "SnapshotMissing", fmt.Sprintf("snapshot %s is gone; building it again", id))
	}
	if t.Spec.QEMU == nil && m.be.Name() == "qemu" {
		return Result{}, m.templateStatus(ctx, t, api.TemplateFailed, "NoImage", "this host runs the qemu backend and the template has no spec.qemu image", nil)
	}
	spec := backend.TemplateSpec{ID: id, HyperV: t.Spec.HyperV, CPU: t.Spec.Resources.CPU, MemoryMB: t.Spec.Resources.MemoryMB, Resolution: t.Spec.Display.Resolution}
	if t.Spec.QEMU != nil {
		spec.Image = *t.Spec.QEMU
	}
	if err := m.templateStatus(ctx, t, api.TemplateBuilding, "Building", "cold-booting the image to take its snapshot", nil); err != nil {
		return Result{}, err
	}
	m.event(ctx, t, api.EventNormal, "Building", fmt.Sprintf("building snapshot %s", id))
	start := time.Now()
	info, err := m.be.BuildTemplate(ctx, spec, func(step string) {
		m.event(ctx, t, api.EventNormal, "Building", step)
	})
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		reason := "BuildFailed"
		if errors.Is(err, api.ErrNotFound) {
			reason = "ImageNotFound"
		} else if errors.Is(err, api.ErrUnavailable) {
			reason = "InsufficientMemory"
		}
		m.event(ctx, t, api.EventWarning, reason, err.Error())
		return Result{RequeueAfter: time.Minute}, m.templateStatus(ctx, t, api.TemplateFailed, reason, err.Error(), nil)
	}
	snap := &api.TemplateSnapshot{ID: info.ID, CreatedAt: info.CreatedAt, BootSeconds: info.BootTime.Seconds(),
		MemoryBytes: info.MemoryBytes, DiskBytes: info.DiskBytes, Resolution: info.Resolution}
	m.event(ctx, t, api.EventNormal, "Ready", fmt.Sprintf("snapshot %s ready in %.1fs (desktop booted in %.1fs)", id, time.Since(start).Seconds(), info.BootTime.Seconds()))
	return Result{}, m.templateStatus(ctx, t, api.TemplateReady, "SnapshotReady", "sandboxes clone from the snapshot", snap)
}

func (m *Manager) templateStatus(ctx context.Context, t *api.Template, phase, reason, msg string, snap *api.TemplateSnapshot) error {
	c := api.DeepCopy(t)
	c.Metadata.ResourceVersion = ""
	c.Status.Phase, c.Status.Reason, c.Status.Message = phase, reason, msg
	c.Status.ObservedGeneration = t.Metadata.Generation
	if snap != nil {
		c.Status.Snapshot = snap
	}
	_, err := m.st.UpdateStatus(ctx, c)
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	return err
}

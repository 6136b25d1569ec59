package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/controller"
)

// reconcileTemplate builds the snapshot of a template's current generation
// (Pending -> Building -> Ready or Failed) and removes it when the template
// is deleted.
func (n *Node) reconcileTemplate(ctx context.Context, name string) (controller.Result, error) {
	o, err := n.st.Get(ctx, api.KindTemplate, name)
	if errors.Is(err, api.ErrNotFound) {
		return controller.Result{}, nil
	}
	if err != nil {
		return controller.Result{}, err
	}
	t := o.(*api.Template)
	if t.Metadata.DeletionTimestamp != nil {
		if t.Status.Snapshot != nil && t.Status.Snapshot.ID != "" {
			if err := n.be.DeleteTemplate(ctx, t.Status.Snapshot.ID); err != nil {
				return controller.Result{}, err
			}
		}
		return controller.Result{}, controller.RemoveFinalizer(ctx, n.st, t, api.FinalizerSnapshot)
	}
	if o, err = controller.EnsureFinalizer(ctx, n.st, t, api.FinalizerSnapshot); err != nil {
		return controller.Result{}, err
	}
	t = o.(*api.Template)

	id := snapshotID(t)
	if t.Status.Phase == api.TemplateReady && t.Status.Snapshot != nil && t.Status.Snapshot.ID == id {
		if _, err := n.be.InspectTemplate(ctx, id); err == nil {
			return controller.Result{}, nil
		}
		n.event(ctx, t, api.EventWarning, "SnapshotMissing", fmt.Sprintf("snapshot %s is gone; building it again", id))
	}
	if t.Spec.QEMU == nil && n.be.Name() == "qemu" {
		return controller.Result{}, n.templateStatus(ctx, t, api.TemplateFailed, "NoImage", "this host runs the qemu backend and the template has no spec.qemu image", nil)
	}
	spec := backend.TemplateSpec{ID: id, HyperV: t.Spec.HyperV, CPU: t.Spec.Resources.CPU, MemoryMB: t.Spec.Resources.MemoryMB, Resolution: t.Spec.Display.Resolution}
	if t.Spec.QEMU != nil {
		spec.Image = *t.Spec.QEMU
	}
	if err := n.templateStatus(ctx, t, api.TemplateBuilding, "Building", "cold-booting the image to take its snapshot", nil); err != nil {
		return controller.Result{}, err
	}
	n.event(ctx, t, api.EventNormal, "Building", fmt.Sprintf("building snapshot %s", id))
	start := time.Now()
	info, err := n.be.BuildTemplate(ctx, spec, func(step string) {
		n.event(ctx, t, api.EventNormal, "Building", step)
	})
	if err != nil {
		if ctx.Err() != nil {
			return controller.Result{}, ctx.Err()
		}
		reason := "BuildFailed"
		if errors.Is(err, api.ErrNotFound) {
			reason = "ImageNotFound"
		} else if errors.Is(err, api.ErrUnavailable) {
			reason = "InsufficientMemory"
		}
		n.event(ctx, t, api.EventWarning, reason, err.Error())
		return controller.Result{RequeueAfter: time.Minute}, n.templateStatus(ctx, t, api.TemplateFailed, reason, err.Error(), nil)
	}
	snap := &api.TemplateSnapshot{ID: info.ID, CreatedAt: info.CreatedAt, BootSeconds: info.BootTime.Seconds(),
		MemoryBytes: info.MemoryBytes, DiskBytes: info.DiskBytes, Resolution: info.Resolution}
	n.event(ctx, t, api.EventNormal, "Ready", fmt.Sprintf("snapshot %s ready in %.1fs (desktop booted in %.1fs)", id, time.Since(start).Seconds(), info.BootTime.Seconds()))
	return controller.Result{}, n.templateStatus(ctx, t, api.TemplateReady, "SnapshotReady", "sandboxes clone from the snapshot", snap)
}

func (n *Node) templateStatus(ctx context.Context, t *api.Template, phase, reason, msg string, snap *api.TemplateSnapshot) error {
	c := api.DeepCopy(t)
	c.Metadata.ResourceVersion = ""
	c.Status.Phase, c.Status.Reason, c.Status.Message = phase, reason, msg
	c.Status.ObservedGeneration = t.Metadata.Generation
	if snap != nil {
		c.Status.Snapshot = snap
	}
	_, err := n.st.UpdateStatus(ctx, c)
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	return err
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// ForkGrace is how long a fork's template stays with no sandbox of it:
// the fork route creates its sandboxes right after it, and a template
// that just lost its last fork may be wanted for another.
const ForkGrace = 2 * time.Minute

// ForkTemplates deletes the template of a fork (a Template labelled
// api.LabelForkOf, made by POST …/fork) once no sandbox is made of it,
// ForkGrace after its creation and after the last one went: its
// snapshot is a copy of a desktop's memory and disk, kept only for them.
// A template of hvkube snapshot (no such label) is the user's and stays.
type ForkTemplates struct {
	st        store.Interface
	log       *slog.Logger
	now       func() time.Time
	sandboxes *reconcile.Cache
	templates *reconcile.Cache
	mu        sync.Mutex // guards gone
	// gone is when each fork template was first seen with no sandbox.
	gone map[string]time.Time
}

// NewForkTemplates registers the fork templates' collector with m.
func NewForkTemplates(m *reconcile.Manager, st store.Interface, log *slog.Logger, now func() time.Time) *ForkTemplates {
	if now == nil {
		now = time.Now
	}
	f := &ForkTemplates{st: st, log: log, now: now, sandboxes: m.Cache(api.KindSandbox), templates: m.Cache(api.KindTemplate), gone: map[string]time.Time{}}
	m.Register(reconcile.Controller{Name: "fork-templates", For: api.KindTemplate, Reconciler: f,
		Watches: []reconcile.Watch{{Kind: api.KindSandbox, Map: func(o api.Object) []string {
			sb := o.(*api.Sandbox)
			return []string{sb.Spec.TemplateRef}
		}}}})
	return f
}

// Reconcile implements reconcile.Reconciler.
func (f *ForkTemplates) Reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.templates.Get(name)
	if !ok {
		delete(f.gone, name)
		return reconcile.Result{}, nil
	}
	t := o.(*api.Template)
	if t.Metadata.Labels[api.LabelForkOf] == "" || t.Metadata.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	used := false
	f.sandboxes.Range(func(so api.Object) bool {
		sb := so.(*api.Sandbox)
		used = sb.Spec.TemplateRef == name || sb.Status.Template == name
		return !used
	})
	now := f.now()
	if used {
		delete(f.gone, name)
		return reconcile.Result{}, nil
	}
	since, seen := f.gone[name]
	if !seen {
		since = now
		f.gone[name] = since
	}
	if c := t.Metadata.CreationTimestamp; c.After(since) {
		since = c
	}
	if wait := since.Add(ForkGrace).Sub(now); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	_, _, err := f.st.Delete(ctx, api.KindTemplate, name, store.DeleteOptions{ResourceVersion: t.Metadata.ResourceVersion})
	switch {
	case errors.Is(err, api.ErrNotFound):
		return reconcile.Result{}, nil
	case errors.Is(err, api.ErrConflict):
		return reconcile.Result{RequeueAfter: time.Second}, nil
	case err != nil:
		return reconcile.Result{}, err
	}
	delete(f.gone, name)
	f.log.Info("deleted a fork's template: none of its sandboxes is left", "template", name, "fork of", t.Metadata.Labels[api.LabelForkOf])
	if err := f.st.RecordEvent(ctx, t, api.EventNormal, "ForksGone", fmt.Sprintf("deleted: no sandbox of fork template %s is left", name)); err != nil {
		f.log.Warn("record event", "template", name, "err", err)
	}
	return reconcile.Result{}, nil
}

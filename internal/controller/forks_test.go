package controller

import (
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// TestForkTemplatesGoWithTheirForks: a fork's template stays while a
// sandbox of it is left, and goes ForkGrace after the last one went; a
// template of its own (hvkube snapshot), or one just made, stays.
func TestForkTemplatesGoWithTheirForks(t *testing.T) {
	e := newEnv(t)
	f := NewForkTemplates(e.m, e.st, e.log, e.clk.Now)
	tpl := func(name string, fork bool) {
		o := &api.Template{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindTemplate}}
		o.Metadata.Name = name
		o.Spec.QEMU = &api.QEMUImage{Image: "linux-desktop"}
		if fork {
			o.Metadata.Labels = map[string]string{api.LabelForkOf: "desk"}
		}
		e.create(o)
	}
	tpl("desk-fork-1", true)
	tpl("mine", false)
	for _, n := range []string{"desk-fork-1-1", "desk-fork-1-2"} {
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name, sb.Spec.TemplateRef = n, "desk-fork-1"
		e.create(sb)
	}
	run := func(name string) time.Duration {
		t.Helper()
		e.sync()
		res, err := f.Reconcile(e.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return res.RequeueAfter
	}
	if run("desk-fork-1"); !e.exists(api.KindTemplate, "desk-fork-1") {
		t.Fatal("deleted while its forks run")
	}
	for _, n := range []string{"desk-fork-1-1", "desk-fork-1-2"} {
		if _, _, err := e.st.Delete(e.ctx, api.KindSandbox, n, store.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if wait := run("desk-fork-1"); wait != ForkGrace || !e.exists(api.KindTemplate, "desk-fork-1") {
		t.Fatalf("the last fork just went: requeue after %s, template kept %v; want %s and kept", wait, e.exists(api.KindTemplate, "desk-fork-1"), ForkGrace)
	}
	e.clk.Advance(ForkGrace)
	run("desk-fork-1")
	if e.exists(api.KindTemplate, "desk-fork-1") {
		t.Error("the fork's template stayed after its forks went")
	}
	if len(e.events(api.KindTemplate, "desk-fork-1", "ForksGone")) != 1 {
		t.Error("no ForksGone event")
	}
	e.clk.Advance(time.Hour)
	if run("mine"); !e.exists(api.KindTemplate, "mine") {
		t.Error("a template of hvkube snapshot was deleted")
	}
	// A fork template just made, before its sandboxes: kept for the grace.
	tpl("desk-fork-2", true)
	if wait := run("desk-fork-2"); wait <= 0 || !e.exists(api.KindTemplate, "desk-fork-2") {
		t.Errorf("a new fork template: requeue %s, kept %v", wait, e.exists(api.KindTemplate, "desk-fork-2"))
	}
}

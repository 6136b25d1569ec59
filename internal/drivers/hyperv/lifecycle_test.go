package hyperv

import (
	"bytes"
	"context"
	"errors"
	"github.com/hvkube/hvkube/internal/powershell/pstest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/powershell"
)

var ctx = context.Background()

func TestNewChecksHost(t *testing.T) {
	r := newRig(t)
	host := newFakeHost()
	_, err := New(ctx, Config{Dir: r.dir, CredentialFile: r.cred, Runner: host, Switch: "External"})
	if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), `"External"`) {
		t.Fatalf("missing switch: %v", err)
	}
	host.fail["probe-host"] = hvError("probe-host", "ObjectNotFound", "The term 'Get-VMHost' is not recognized")
	if _, err := New(ctx, Config{Dir: r.dir, CredentialFile: r.cred, Runner: host}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("no Hyper-V: %v", err)
	}
	if _, err := New(ctx, Config{Dir: r.dir, Runner: host}); err == nil {
		t.Fatal("no credential file: no error")
	}
	if _, err := New(ctx, Config{Dir: r.dir, CredentialFile: filepath.Join(r.dir, "missing.json"), Runner: host}); err == nil {
		t.Fatal("a missing credential file: no error")
	}
}

func TestBuildTemplate(t *testing.T) {
	r := newRig(t)
	var steps []string
	info, err := r.b.BuildTemplate(ctx, backend.TemplateSpec{ID: "win11", HyperV: &api.HyperVImage{VHDXPath: r.src}, GuestOS: "windows", CPU: 4, MemoryMB: 8192, GPU: true, Resolution: "1920x1080"},
		func(s string) { steps = append(steps, s) })
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != "win11" || info.Resolution != "1920x1080" || info.DiskBytes != 16384 || info.CreatedAt.IsZero() {
		t.Fatalf("info %+v", info)
	}
	if len(steps) == 0 || !strings.HasPrefix(steps[0], "copying ") {
		t.Fatalf("progress %q, want copying first", steps)
	}
	disk := filepath.Join(r.dir, "templates", "win11", "disk.vhdx")
	data, err := os.ReadFile(disk)
	if err != nil || !bytes.Equal(data, []byte(strings.Repeat("vhdx", 4096))) {
		t.Fatalf("the template's disk is not a copy of its source: %v", err)
	}
	if fi, _ := os.Stat(disk); fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("the template's disk is writable: %v", fi.Mode())
	}
	meta, err := r.b.loadTemplate("win11")
	if err != nil || meta.CPUs != 4 || meta.MemoryMB != 8192 || !meta.GPU || meta.GuestOS != "windows" || meta.Source != r.src || meta.Generation != 2 {
		t.Fatalf("template.json %+v %v", meta, err)
	}
	// Idempotent: a built template is not checked or copied again.
	r.host.reset()
	again, err := r.b.BuildTemplate(ctx, backend.TemplateSpec{ID: "win11", HyperV: &api.HyperVImage{VHDXPath: r.src}}, nil)
	if err != nil || again != info || len(r.host.names()) != 0 {
		t.Fatalf("build again: %+v %v, scripts %v", again, err, r.host.names())
	}
	if got, err := r.b.InspectTemplate(ctx, "win11"); err != nil || got != info {
		t.Fatalf("inspect: %+v %v", got, err)
	}
	if err := r.b.DeleteTemplate(ctx, "win11"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "templates", "win11")); !os.IsNotExist(err) {
		t.Fatalf("the template's folder is still there: %v", err)
	}
	if err := r.b.DeleteTemplate(ctx, "win11"); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	if _, err := r.b.InspectTemplate(ctx, "win11"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("inspect a deleted template: %v", err)
	}
}

func TestBuildTemplateRefuses(t *testing.T) {
	r := newRig(t)
	outside := filepath.Join(t.TempDir(), "other.vhdx")
	os.WriteFile(outside, []byte("x"), 0o600)
	diff := filepath.Join(filepath.Dir(r.src), "child.avhdx")
	os.WriteFile(diff, []byte("x"), 0o600)
	r.host.vhds[diff] = vhdInfo{Path: diff, VhdFormat: "VHDX", VhdType: "Differencing", ParentPath: r.src}
	vhd := filepath.Join(filepath.Dir(r.src), "old.vhd")
	os.WriteFile(vhd, []byte("x"), 0o600)
	r.host.vhds[vhd] = vhdInfo{Path: vhd, VhdFormat: "VHD", VhdType: "Dynamic"}
	used := filepath.Join(filepath.Dir(r.src), "used.vhdx")
	os.WriteFile(used, []byte("x"), 0o600)
	r.host.vhds[used] = vhdInfo{Path: used, VhdFormat: "VHDX", VhdType: "Dynamic", Attached: true}
	cases := []struct {
		name string
		spec backend.TemplateSpec
		want error
	}{
		{"linux", backend.TemplateSpec{GuestOS: "linux", HyperV: &api.HyperVImage{VHDXPath: r.src}}, api.ErrUnsupported},
		{"no vhdx", backend.TemplateSpec{GuestOS: "windows"}, api.ErrInvalid},
		{"generation 1", backend.TemplateSpec{HyperV: &api.HyperVImage{VHDXPath: r.src, Generation: 1}}, api.ErrUnsupported},
		{"outside the roots", backend.TemplateSpec{HyperV: &api.HyperVImage{VHDXPath: outside}}, api.ErrInvalid},
		{"missing", backend.TemplateSpec{HyperV: &api.HyperVImage{VHDXPath: filepath.Join(filepath.Dir(r.src), "nope.vhdx")}}, api.ErrInvalid},
		{"differencing", backend.TemplateSpec{HyperV: &api.HyperVImage{VHDXPath: diff}}, api.ErrInvalid},
		{"vhd", backend.TemplateSpec{HyperV: &api.HyperVImage{VHDXPath: vhd}}, api.ErrInvalid},
		{"attached", backend.TemplateSpec{HyperV: &api.HyperVImage{VHDXPath: used}}, api.ErrConflict},
		{"bad resolution", backend.TemplateSpec{HyperV: &api.HyperVImage{VHDXPath: r.src}, Resolution: "big"}, api.ErrInvalid},
	}
	for _, c := range cases {
		c.spec.ID = "tpl-" + strings.ReplaceAll(c.name, " ", "-")
		if _, err := r.b.BuildTemplate(ctx, c.spec, nil); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if _, err := os.Stat(r.b.tplDir(c.spec.ID)); !os.IsNotExist(err) {
			t.Errorf("%s: a template folder was left: %v", c.name, err)
		}
	}
}

func TestCreateRunsTheStepsInOrder(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{CPU: 2, MemoryMB: 4096, Resolution: "1280x800"})
	r.os.readyFail = 1
	r.host.reset()
	info, err := r.b.Create(ctx, backend.SandboxSpec{ID: "web-1", UID: "u-1", TemplateID: "win11", Hostname: "web-one"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"get-vms",  // is it there already?
		"capacity", // room for it?
		"new-differencing-vhd", "new-vm", "set-enhanced-session", "start-vm",
		"vm-status",  // polled until the guest answers (names folds the polls into one)
		"guest-exec", // the guest OS gives it its identity
		"checkpoint-vm", "suspend-vm", "set-notes", "get-vms",
	}
	if got := r.host.names(); !reflect.DeepEqual(got, want) {
		t.Fatalf("scripts\n got %v\nwant %v", got, want)
	}
	if got := r.os.seen(); !reflect.DeepEqual(got, []string{"ready", "ready", "identity web-one"}) {
		t.Fatalf("guest OS calls %v", got)
	}
	if info.State != backend.StatePaused || info.PID == 0 || info.ID != "web-1" || info.UID != "u-1" || info.TemplateID != "win11" ||
		info.Display != "vmconnect:localhost/hvkube-web-1" || info.Resolution != "1280x800" || info.MemoryMB != 4096 || info.CreatedAt.IsZero() {
		t.Fatalf("info %+v", info)
	}
	// The VM's settings.
	newVM := r.call(t, "new-vm").Args
	if newVM["MemoryBytes"] != int64(4096)<<20 || newVM["MinimumMemoryBytes"] != int64(512)<<20 || newVM["ProcessorCount"] != 2 ||
		newVM["Width"] != 1280 || newVM["Height"] != 800 || newVM["Switch"] != "Default Switch" ||
		newVM["VHDPath"] != filepath.Join(r.dir, "sandboxes", "web-1", "disk.vhdx") || newVM["Path"] != filepath.Join(r.dir, "sandboxes", "web-1") {
		t.Fatalf("new-vm %v", newVM)
	}
	if p := r.call(t, "new-differencing-vhd").Args["ParentPath"]; p != filepath.Join(r.dir, "templates", "win11", "disk.vhdx") {
		t.Fatalf("the disk's parent is %v", p)
	}
	if c := r.call(t, "checkpoint-vm").Args["Checkpoint"]; c != "clean" {
		t.Fatalf("checkpoint %v", c)
	}
	n, ok := parseNotes(r.host.vm("hvkube-web-1").notes)
	if !ok || !n.Ready || n.UID != "u-1" || n.Template != "win11" || n.Hostname != "web-one" || n.Resolution != "1280x800" || n.OS != "windows" {
		t.Fatalf("notes %+v", n)
	}

	// Idempotent.
	r.host.reset()
	again, err := r.b.Create(ctx, backend.SandboxSpec{ID: "web-1", TemplateID: "win11"})
	if err != nil || again != info || !reflect.DeepEqual(r.host.names(), []string{"get-vms"}) {
		t.Fatalf("create again: %+v %v, scripts %v", again, err, r.host.names())
	}
}

// call is the first recorded call of a script.
func (r *rig) call(t *testing.T, name string) pstest.Call {
	t.Helper()
	r.host.mu.Lock()
	defer r.host.mu.Unlock()
	for _, c := range r.host.calls {
		if c.Script.Name == name {
			return c
		}
	}
	t.Fatalf("%s was not run", name)
	return pstest.Call{}
}

func TestCreateSandboxSettings(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{CPU: 2, MemoryMB: 4096, Resolution: "1280x800"})
	info, err := r.b.Create(ctx, backend.SandboxSpec{ID: "big", TemplateID: "win11", CPU: 8, MemoryMB: 6001, Resolution: "1920x1080"})
	if err != nil {
		t.Fatal(err)
	}
	a := r.call(t, "new-vm").Args
	if a["MemoryBytes"] != int64(6002)<<20 || a["ProcessorCount"] != 8 || a["Width"] != 1920 || a["Height"] != 1080 {
		t.Fatalf("new-vm %v", a)
	}
	if info.Resolution != "1920x1080" || info.MemoryMB != 6002 {
		t.Fatalf("info %+v", info)
	}
	for _, c := range []backend.SandboxSpec{
		{ID: "x", TemplateID: "nope"},
		{ID: "Bad_ID", TemplateID: "win11"},
		{ID: "tpl-x", TemplateID: "win11"},
		{ID: "y", TemplateID: "win11", Resolution: "wide"},
	} {
		if _, err := r.b.Create(ctx, c); err == nil {
			t.Errorf("create %+v: no error", c)
		}
	}
	if _, err := r.b.Create(ctx, backend.SandboxSpec{ID: "x", TemplateID: "nope"}); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("create from a missing template: %v", err)
	}
}

func TestCreateCleansUpOnFailure(t *testing.T) {
	for _, step := range []string{"new-differencing-vhd", "new-vm", "start-vm", "guest-exec", "checkpoint-vm", "suspend-vm", "set-notes"} {
		t.Run(step, func(t *testing.T) {
			r := newRig(t)
			r.template(t, backend.TemplateSpec{})
			r.host.fail[step] = hvError(step, "InvalidOperation", "it went wrong")
			r.host.reset()
			if _, err := r.b.Create(ctx, backend.SandboxSpec{ID: "web-1", TemplateID: "win11"}); err == nil || !strings.Contains(err.Error(), "it went wrong") {
				t.Fatalf("create: %v", err)
			}
			names := r.host.names()
			if names[len(names)-1] != "remove-vm" {
				t.Fatalf("scripts %v: the VM was not removed", names)
			}
			if len(r.host.vms) != 0 {
				t.Fatalf("VMs left: %d", len(r.host.vms))
			}
			if _, err := os.Stat(r.b.sbDir("web-1")); !os.IsNotExist(err) {
				t.Fatalf("the sandbox's folder is left: %v", err)
			}
			if c, _ := r.b.Capacity(ctx); c.UsedMemoryMB != 0 {
				t.Fatalf("memory still reserved: %+v", c)
			}
		})
	}
}

func TestCreateBootIsBounded(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{})
	r.host.bootPolls = 1 << 30 // the guest never answers
	r.b.cfg.BootTimeout = 50 * time.Millisecond
	_, err := r.b.Create(ctx, backend.SandboxSpec{ID: "slow", TemplateID: "win11"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no IPv4 address") {
		t.Fatalf("create: %v", err)
	}
	if len(r.host.vms) != 0 {
		t.Fatal("the VM was left")
	}
	// A VM that turns off while booting fails at once.
	r.host.bootPolls = 2
	r.os.readyFail = 1 << 30
	r.b.cfg.BootTimeout = time.Minute
	r.host.onStatus = func(v *fakeVM) {
		if v.bootLeft == 0 {
			v.state = "Off"
		}
	}
	if _, err := r.b.Create(ctx, backend.SandboxSpec{ID: "off", TemplateID: "win11"}); !errors.Is(err, errVMStopped) {
		t.Fatalf("create of a VM that turns off: %v", err)
	}
}

func TestCreateRefusesPastTheMemoryLimit(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{MemoryMB: 4096})
	r.host.totalKB = 8 << 20 // 8 GB: the limit is 6553 MB
	r.create(t, "one")
	r.host.reset()
	_, err := r.b.Create(ctx, backend.SandboxSpec{ID: "two", TemplateID: "win11"})
	if !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("create past the limit: %v", err)
	}
	if got := r.host.names(); !reflect.DeepEqual(got, []string{"get-vms", "capacity"}) {
		t.Fatalf("scripts %v", got)
	}
	c, err := r.b.Capacity(ctx)
	if err != nil || c.TotalMemoryMB != 8192 || c.LimitMemoryMB != 6553 || c.UsedMemoryMB != 4096 || c.AvailableMemoryMB != 48<<10 {
		t.Fatalf("capacity %+v %v", c, err)
	}
	// A saved sandbox commits nothing.
	if err := r.b.Save(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	if c, _ := r.b.Capacity(ctx); c.UsedMemoryMB != 0 {
		t.Fatalf("capacity with the sandbox saved: %+v", c)
	}
	r.create(t, "two")
}

func TestCreateGPU(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{GPU: true})
	r.host.gpus = nil
	_, err := r.b.Create(ctx, backend.SandboxSpec{ID: "g", TemplateID: "win11"})
	if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "Get-VMHostPartitionableGpu") {
		t.Fatalf("no GPU: %v", err)
	}
	r.host.gpuSupported = false
	if _, err := r.b.Create(ctx, backend.SandboxSpec{ID: "g", TemplateID: "win11"}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("no GPU partitioning: %v", err)
	}
	r.host.gpuSupported, r.host.gpus = true, []string{`\\?\PCI#VEN_10DE&DEV_2484`}
	r.host.reset()
	r.create(t, "g")
	names := strings.Join(r.host.names(), " ")
	if !strings.Contains(names, "new-vm set-enhanced-session add-gpu start-vm") || strings.Contains(names, "checkpoint-vm") {
		t.Fatalf("scripts %s", names)
	}
	if err := r.b.Save(ctx, "g"); !errors.Is(err, api.ErrUnsupported) {
		t.Fatalf("save a GPU sandbox: %v", err)
	}
	// Reset boots it again on a fresh disk.
	if err := r.b.Resume(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	r.host.reset()
	if err := r.b.Reset(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	want := []string{"get-vms", "stop-vm", "new-differencing-vhd", "start-vm", "vm-status", "guest-exec", "suspend-vm"}
	if got := r.host.names(); !reflect.DeepEqual(got, want) {
		t.Fatalf("reset scripts\n got %v\nwant %v", got, want)
	}
	if got, _ := r.b.Inspect(ctx, "g"); got.State != backend.StatePaused {
		t.Fatalf("after reset: %s", got.State)
	}
}

func TestLifecycle(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{})
	created := r.create(t, "life")
	state := func() backend.Info {
		t.Helper()
		info, err := r.b.Inspect(ctx, "life")
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	step := func(name string, fn func(context.Context, string) error, wantScripts []string, wantState string) {
		t.Helper()
		r.host.reset()
		if err := fn(ctx, "life"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := r.host.names(); !reflect.DeepEqual(got, wantScripts) {
			t.Fatalf("%s: scripts\n got %v\nwant %v", name, got, wantScripts)
		}
		if got := state(); got.State != wantState {
			t.Fatalf("%s: state %s, want %s", name, got.State, wantState)
		}
	}
	step("resume a paused sandbox", r.b.Resume, []string{"get-vms", "resume-vm", "vm-status"}, backend.StateRunning)
	if got := state(); got.PID != created.PID {
		t.Fatalf("the worker process changed: %d, was %d", got.PID, created.PID)
	}
	step("resume a running one", r.b.Resume, []string{"get-vms"}, backend.StateRunning)
	step("pause", r.b.Pause, []string{"get-vms", "suspend-vm"}, backend.StatePaused)
	step("pause again", r.b.Pause, []string{"get-vms"}, backend.StatePaused)
	step("save", r.b.Save, []string{"get-vms", "save-vm"}, backend.StateSaved)
	if got := state(); got.PID != 0 {
		t.Fatalf("a saved sandbox has a process: %+v", got)
	}
	step("save again", r.b.Save, []string{"get-vms"}, backend.StateSaved)
	step("resume a saved sandbox", r.b.Resume, []string{"get-vms", "start-vm", "vm-status"}, backend.StateRunning)
	step("save", r.b.Save, []string{"get-vms", "save-vm"}, backend.StateSaved)
	step("restore", r.b.Restore, []string{"get-vms", "start-paused"}, backend.StatePaused)
	step("restore again", r.b.Restore, []string{"get-vms"}, backend.StatePaused)
	step("reset", r.b.Reset, []string{"get-vms", "restore-checkpoint", "start-paused"}, backend.StatePaused)
	step("stop", r.b.Stop, []string{"get-vms", "stop-vm"}, backend.StateStopped)
	step("stop again", r.b.Stop, []string{"get-vms"}, backend.StateStopped)
	for name, fn := range map[string]func(context.Context, string) error{"pause": r.b.Pause, "resume": r.b.Resume, "save": r.b.Save, "restore": r.b.Restore, "alive": r.b.Alive, "ready": r.b.Ready} {
		if err := fn(ctx, "life"); !errors.Is(err, api.ErrConflict) {
			t.Errorf("%s a stopped sandbox: %v", name, err)
		}
	}
	step("reset a stopped sandbox", r.b.Reset, []string{"get-vms", "restore-checkpoint", "start-paused"}, backend.StatePaused)
	step("save", r.b.Save, []string{"get-vms", "save-vm"}, backend.StateSaved)
	step("stop a saved sandbox", r.b.Stop, []string{"get-vms", "remove-saved-state"}, backend.StateStopped)

	// The clock is set after each resume, in the background.
	r.b.Close()
	clocks := 0
	for _, c := range r.os.seen() {
		if c == "clock" {
			clocks++
		}
	}
	if clocks != 2 {
		t.Fatalf("the clock was set %d times, want 2 (%v)", clocks, r.os.seen())
	}
}

func TestResumeWaitsForTheHeartbeat(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{})
	r.create(t, "hb")
	r.host.vm("hvkube-hb").bootLeft = 3
	r.host.reset()
	if err := r.b.Resume(ctx, "hb"); err != nil {
		t.Fatal(err)
	}
	polls := 0
	for _, c := range r.host.calls {
		if c.Script.Name == "vm-status" {
			polls++
		}
	}
	if polls != 4 {
		t.Fatalf("%d status polls, want 4", polls)
	}
	// Bounded.
	if err := r.b.Pause(ctx, "hb"); err != nil {
		t.Fatal(err)
	}
	r.host.vm("hvkube-hb").bootLeft = 1 << 30
	r.b.cfg.ResumeTimeout = 20 * time.Millisecond
	if err := r.b.Resume(ctx, "hb"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("resume of a guest that does not answer: %v", err)
	}
}

func TestNotFound(t *testing.T) {
	r := newRig(t)
	id := "nope"
	var buf bytes.Buffer
	calls := map[string]func() error{
		"inspect": func() error { _, err := r.b.Inspect(ctx, id); return err },
		"pause":   func() error { return r.b.Pause(ctx, id) },
		"resume":  func() error { return r.b.Resume(ctx, id) },
		"save":    func() error { return r.b.Save(ctx, id) },
		"restore": func() error { return r.b.Restore(ctx, id) },
		"reset":   func() error { return r.b.Reset(ctx, id) },
		"stop":    func() error { return r.b.Stop(ctx, id) },
		"ready":   func() error { return r.b.Ready(ctx, id) },
		"alive":   func() error { return r.b.Alive(ctx, id) },
		"exec": func() error {
			_, err := r.b.Exec(ctx, id, backend.ExecRequest{Path: "hostname"})
			return err
		},
		"start": func() error {
			_, err := r.b.Exec(ctx, id, backend.ExecRequest{Path: "notepad.exe", Detach: true})
			return err
		},
		"copy in":  func() error { return r.b.CopyIn(ctx, id, `C:\x`, strings.NewReader("x")) },
		"copy out": func() error { return r.b.CopyOut(ctx, id, `C:\x`, &buf) },
		"clipboard": func() error {
			_, err := r.b.ClipboardGet(ctx, id)
			return err
		},
		"input": func() error {
			return r.b.SendInput(ctx, id, []backend.InputEvent{{Kind: backend.EventMove, X: 1, Y: 1}})
		},
		"cursor": func() error { _, _, err := r.b.CursorPosition(ctx, id); return err },
	}
	for name, fn := range calls {
		if err := fn(); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
	}
	if err := r.b.Delete(ctx, id); err != nil {
		t.Errorf("delete a missing sandbox: %v", err)
	}
	// A VM with hvkube's prefix that hvkube did not make is not a sandbox.
	r.host.vms = append(r.host.vms, &fakeVM{name: "hvkube-stranger", id: "x", state: "Running", notes: "my own VM"})
	if _, err := r.b.Inspect(ctx, "stranger"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("inspect a stranger: %v", err)
	}
	if list, err := r.b.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("list: %+v %v", list, err)
	}
	// Create does not take it over.
	r.template(t, backend.TemplateSpec{})
	if _, err := r.b.Create(ctx, backend.SandboxSpec{ID: "stranger", TemplateID: "win11"}); !errors.Is(err, api.ErrConflict) {
		t.Errorf("create over a stranger: %v", err)
	}
	if r.host.vm("hvkube-stranger") == nil {
		t.Error("the stranger's VM was removed")
	}
}

func TestDeleteLeavesNothing(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{})
	r.create(t, "gone")
	if err := r.b.Resume(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(r.b.sbDir("gone"), "disk_8F2C.avhdx"), []byte("x"), 0o400)
	if err := r.b.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if len(r.host.vms) != 0 {
		t.Fatal("the VM is left")
	}
	if _, err := os.Stat(r.b.sbDir("gone")); !os.IsNotExist(err) {
		t.Fatalf("the folder is left: %v", err)
	}
	if err := r.b.Delete(ctx, "gone"); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	if _, err := r.b.Inspect(ctx, "gone"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("inspect after delete: %v", err)
	}
}

func TestListAdoptsAfterRestart(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{})
	a := r.create(t, "a")
	r.create(t, "b")
	if err := r.b.Resume(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := r.b.Save(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	r.b.Close()
	b2 := r.open(t)
	list, err := b2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]backend.Info{}
	for _, i := range list {
		got[i.ID] = i
	}
	if len(got) != 2 || got["a"].State != backend.StateRunning || got["a"].PID != a.PID || got["a"].UID != "uid-a" ||
		got["b"].State != backend.StateSaved || got["b"].PID != 0 || got["b"].TemplateID != "win11" {
		t.Fatalf("list after a restart: %+v", list)
	}
	if err := b2.Ready(ctx, "a"); err != nil {
		t.Fatalf("ready through the new backend: %v", err)
	}
}

func TestInterruptedCreateIsRedone(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{})
	// What a server that stopped during a boot leaves: a running VM whose
	// notes are not marked ready.
	r.host.vms = append(r.host.vms, &fakeVM{name: "hvkube-half", id: "h", state: "Running", pid: 99, mem: 4096 << 20,
		notes: notes{HVKube: 1, Template: "win11"}.json(), checkpoints: map[string]bool{}})
	if got, err := r.b.Inspect(ctx, "half"); err != nil || got.State != backend.StateStopped || got.PID != 0 {
		t.Fatalf("inspect a half-made sandbox: %+v %v", got, err)
	}
	r.host.reset()
	info := r.create(t, "half")
	names := r.host.names()
	if names[0] != "get-vms" || names[1] != "remove-vm" || info.State != backend.StatePaused || info.PID == 99 {
		t.Fatalf("create over a half-made sandbox: %+v, scripts %v", info, names)
	}
}

func TestStateMapping(t *testing.T) {
	r := newRig(t)
	for hv, want := range map[string]string{
		"Running": backend.StateRunning, "Paused": backend.StatePaused, "Saved": backend.StateSaved, "Off": backend.StateStopped,
		"Starting": backend.StateStopped, "Saving": backend.StateStopped, "RunningCritical": backend.StateStopped, "Other": backend.StateStopped,
	} {
		r.host.vms = []*fakeVM{{name: "hvkube-m", id: "m", state: hv, pid: 1234, notes: notes{HVKube: 1, Template: "t", Ready: true}.json()}}
		got, err := r.b.Inspect(ctx, "m")
		if err != nil || got.State != want {
			t.Errorf("%s: %+v %v, want %s", hv, got, err, want)
		}
		if wantPID := want == backend.StateRunning || want == backend.StatePaused; (got.PID != 0) != wantPID {
			t.Errorf("%s: pid %d", hv, got.PID)
		}
	}
}

func TestGuestExec(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{})
	r.create(t, "g")
	if _, err := r.b.Exec(ctx, "g", backend.ExecRequest{Path: "hostname"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("exec in a paused sandbox: %v", err)
	}
	if err := r.b.Resume(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	var gotPath, gotArgs string
	var gotEnv []string
	var gotStdin []byte
	r.host.exec = func(path, arguments string, env []string, stdin []byte) (int, string, string, string) {
		gotPath, gotArgs, gotEnv, gotStdin = path, arguments, env, stdin
		return 3, "out \x00\xff", "err", ""
	}
	res, err := r.b.Exec(ctx, "g", backend.ExecRequest{Path: `C:\Tools\echo args.exe`, Args: []string{"a b", `say "hi"`, "", `C:\dir\`}, Env: []string{"A=1"}, Stdin: []byte("in\x00put")})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != "out \x00\xff" || string(res.Stderr) != "err" {
		t.Fatalf("result %+v", res)
	}
	if gotPath != `C:\Tools\echo args.exe` || gotArgs != `"a b" "say \"hi\"" "" C:\dir\` || !reflect.DeepEqual(gotEnv, []string{"A=1"}) || string(gotStdin) != "in\x00put" {
		t.Fatalf("the guest got %q %q %q %q", gotPath, gotArgs, gotEnv, gotStdin)
	}
	// The credential file's path travels; its content does not.
	c := r.call(t, "guest-exec")
	if c.Args["CredentialFile"] != r.cred {
		t.Fatalf("credential file %v", c.Args["CredentialFile"])
	}
	for _, v := range c.Args {
		if s, ok := v.(string); ok && strings.Contains(s, "secret") {
			t.Fatal("the password is in a script's arguments")
		}
	}
	r.host.exec = func(path, arguments string, env []string, stdin []byte) (int, string, string, string) {
		return 0, "", "", "The system cannot find the file specified"
	}
	if _, err := r.b.Exec(ctx, "g", backend.ExecRequest{Path: "nosuch.exe"}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("exec of a missing program: %v", err)
	}
	// Detached.
	if _, err := r.b.Exec(ctx, "g", backend.ExecRequest{Path: `C:\Program Files\App\app.exe`, Args: []string{"--url", "http://x/?a=1&b=2"}, Detach: true}); err != nil {
		t.Fatal(err)
	}
	if want := `"C:\Program Files\App\app.exe" --url http://x/?a=1&b=2`; len(r.host.started) != 1 || r.host.started[0] != want {
		t.Fatalf("started %q, want %q", r.host.started, want)
	}
	if _, err := r.b.Exec(ctx, "g", backend.ExecRequest{Path: "app.exe", Detach: true, Stdin: []byte("x")}); !errors.Is(err, api.ErrUnsupported) {
		t.Fatalf("detach with input: %v", err)
	}
	for _, req := range []backend.ExecRequest{{Path: ""}, {Path: "a\x00b"}, {Path: "x", Args: []string{"\x00"}}, {Path: "x", Env: []string{"NOEQUALS"}}, {Path: "x", Env: []string{"=1"}}} {
		if _, err := r.b.Exec(ctx, "g", req); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("exec %+v: %v", req, err)
		}
	}
}

func TestGuestFiles(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{})
	r.create(t, "f")
	if err := r.b.Resume(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{0, 1, 2, 0xff}, 100000)
	if err := r.b.CopyIn(ctx, "f", `C:\Users\agent\data.bin`, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := r.b.CopyOut(ctx, "f", `C:\Users\agent\data.bin`, &out); err != nil || !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("copy out: %d bytes, %v", out.Len(), err)
	}
	if err := r.b.CopyOut(ctx, "f", `C:\nope.txt`, &out); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("copy out a missing file: %v", err)
	}
	for _, p := range []string{"relative.txt", "/tmp/x", `\no-drive`, "C:", "C:x", ""} {
		if err := r.b.CopyIn(ctx, "f", p, strings.NewReader("x")); !errors.Is(err, api.ErrInvalid) || api.FieldOf(err) != "path" {
			t.Errorf("copy in %q: %v", p, err)
		}
	}
	// No scratch file stays behind.
	if entries, _ := os.ReadDir(filepath.Join(r.dir, "tmp")); len(entries) != 0 {
		t.Fatalf("scratch files left: %v", entries)
	}
	// The guest OS's runner writes files through CopyIn.
	if err := r.b.runner("f").WriteFile(ctx, `C:\t.txt`, []byte("hi")); err != nil || string(r.host.files[`c:\t.txt`]) != "hi" {
		t.Fatalf("runner WriteFile: %v", err)
	}
}

func TestGuestOSCalls(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{})
	r.create(t, "o")
	if err := r.b.ClipboardSet(ctx, "o", "héllo ✓"); err != nil {
		t.Fatal(err)
	}
	if got, err := r.b.ClipboardGet(ctx, "o"); err != nil || got != "héllo ✓" {
		t.Fatalf("clipboard %q %v", got, err)
	}
	if x, y, err := r.b.CursorPosition(ctx, "o"); err != nil || x != 12 || y != 34 {
		t.Fatalf("cursor %d,%d %v", x, y, err)
	}
}

func TestSendInputChecksEvents(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{Resolution: "1280x800"})
	r.create(t, "in")
	for _, c := range []struct {
		ev    backend.InputEvent
		field string
	}{
		{backend.InputEvent{Kind: backend.EventMove, X: 1280, Y: 1}, "events[0]"},
		{backend.InputEvent{Kind: backend.EventMove, X: 1, Y: -1}, "events[0]"},
		{backend.InputEvent{Kind: backend.EventKey, Key: "nosuchkey", Down: true}, "events[0].key"},
		{backend.InputEvent{Kind: backend.EventButton, Button: "thumb", Down: true}, "events[0].button"},
		{backend.InputEvent{Kind: "teleport"}, "events[0].kind"},
	} {
		err := r.b.SendInput(ctx, "in", []backend.InputEvent{c.ev})
		if !errors.Is(err, api.ErrInvalid) || api.FieldOf(err) != c.field {
			t.Errorf("event %+v: %v (field %q), want %s", c.ev, err, api.FieldOf(err), c.field)
		}
	}
}

func TestReadyAndAlive(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{})
	r.create(t, "ok")
	if err := r.b.Alive(ctx, "ok"); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("alive while paused: %v", err)
	}
	if err := r.b.Resume(ctx, "ok"); err != nil {
		t.Fatal(err)
	}
	if err := r.b.Alive(ctx, "ok"); err != nil {
		t.Fatal(err)
	}
	if err := r.b.Ready(ctx, "ok"); err != nil {
		t.Fatal(err)
	}
	r.os.readyFail = 1
	if err := r.b.Ready(ctx, "ok"); err == nil {
		t.Fatal("ready while the guest OS says not")
	}
	r.host.vm("hvkube-ok").bootLeft = 5
	if err := r.b.Alive(ctx, "ok"); err == nil || !strings.Contains(err.Error(), "No Contact") {
		t.Fatalf("alive without a heartbeat: %v", err)
	}
}

// Errors from PowerShell keep their category.
func TestScriptErrorsKeepTheirCategory(t *testing.T) {
	r := newRig(t)
	r.template(t, backend.TemplateSpec{})
	r.create(t, "e")
	r.host.fail["suspend-vm"] = hvError("suspend-vm", "InvalidOperation", "busy")
	if err := r.b.Resume(ctx, "e"); err != nil {
		t.Fatal(err)
	}
	err := r.b.Pause(ctx, "e")
	var pe *powershell.Error
	if !errors.As(err, &pe) || pe.Message != "busy" {
		t.Fatalf("pause: %v", err)
	}
}

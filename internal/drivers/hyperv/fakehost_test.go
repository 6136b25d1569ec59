package hyperv

// fakeHost is a fake of the Hyper-V host at the PowerShell boundary: a
// powershell.Runner that keeps VMs in memory and answers each of the
// backend's scripts by name, the way the real cmdlets change and report
// them. It records every call. fakeOS is a fake guest OS. They exist
// because there is no Hyper-V here; the real thing is covered by the
// conformance suite on a Windows host.

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/hvkube/hvkube/internal/powershell/pstest"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/guest"
	"github.com/hvkube/hvkube/internal/hostpath"
	"github.com/hvkube/hvkube/internal/powershell"
)

type fakeVM struct {
	name, id, state, notes, path string
	mem                          int64
	cpus                         int
	created                      time.Time
	pid                          int
	checkpoints                  map[string]bool
	gpu                          bool
	bootLeft                     int // status polls until the guest answers
}

type fakeHost struct {
	mu           sync.Mutex
	vms          []*fakeVM
	calls        []pstest.Call
	fail         map[string]error
	totalKB      int64
	freeKB       int64
	gpuSupported bool
	gpus         []string
	vhds         map[string]vhdInfo
	files        map[string][]byte // guest files
	bootPolls    int
	nextPid      int
	nextID       int
	// exec answers guest-exec: exit code, stdout, stderr, start error.
	exec    func(path, arguments string, env []string, stdin []byte) (int, string, string, string)
	started []string // guest-start command lines
	// onStatus, if set, sees each VM vm-status reports on, first.
	onStatus func(v *fakeVM)
}

func newFakeHost() *fakeHost {
	return &fakeHost{
		fail: map[string]error{}, totalKB: 64 << 20, freeKB: 48 << 20, gpuSupported: true,
		vhds: map[string]vhdInfo{}, files: map[string][]byte{}, bootPolls: 2, nextPid: 4100,
		exec: func(path, arguments string, env []string, stdin []byte) (int, string, string, string) {
			return 0, "", "", ""
		},
	}
}

// names lists the scripts called, in order, with repeated polls of
// vm-status folded into one.
func (f *fakeHost) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if c.Script.Name == "vm-status" && len(out) > 0 && out[len(out)-1] == "vm-status" {
			continue
		}
		out = append(out, c.Script.Name)
	}
	return out
}

func (f *fakeHost) reset() {
	f.mu.Lock()
	f.calls = nil
	f.mu.Unlock()
}

func (f *fakeHost) vm(name string) *fakeVM {
	for _, v := range f.vms {
		if v.name == name {
			return v
		}
	}
	return nil
}

func (f *fakeHost) state(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v := f.vm(name); v != nil {
		return v.state
	}
	return ""
}

func hvError(script, category, msg string) error {
	return &powershell.Error{Script: script, Message: msg, Category: category, ExitCode: 1}
}

func str(args powershell.Args, k string) string { s, _ := args[k].(string); return s }

// Run implements powershell.Runner.
func (f *fakeHost) Run(ctx context.Context, s powershell.Script, args powershell.Args, out any) error {
	if !strings.HasPrefix(s.Text, "param(") {
		return fmt.Errorf("script %s does not begin with param()", s.Name)
	}
	f.mu.Lock()
	f.calls = append(f.calls, pstest.Call{Script: s, Args: maps.Clone(args)})
	if err := f.fail[s.Name]; err != nil {
		f.mu.Unlock()
		return err
	}
	res, err := f.answer(s.Name, args)
	f.mu.Unlock()
	if err != nil || res == nil || out == nil {
		return err
	}
	js, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return powershell.Decode(js, out)
}

func (f *fakeHost) record(v *fakeVM) map[string]any {
	pid := 0
	if v.state == "Running" || v.state == "Paused" {
		pid = v.pid
	}
	return map[string]any{
		"Name": v.name, "Id": v.id, "State": v.state, "Notes": v.notes, "MemoryStartup": v.mem,
		"ProcessorCount": v.cpus, "CreationTime": v.created.Format("2006-01-02T15:04:05.0000000Z"), "Path": v.path, "WorkerPid": pid,
	}
}

func (f *fakeHost) answer(name string, args powershell.Args) (any, error) {
	vmArg := func() (*fakeVM, error) {
		v := f.vm(str(args, "Name"))
		if v == nil {
			return nil, hvError(name, "InvalidArgument", "Hyper-V was unable to find a virtual machine with name \""+str(args, "Name")+"\".")
		}
		return v, nil
	}
	need := func(v *fakeVM, states ...string) error {
		for _, s := range states {
			if v.state == s {
				return nil
			}
		}
		return hvError(name, "InvalidOperation", fmt.Sprintf("The operation cannot be performed while the virtual machine is in its current state (%s).", v.state))
	}
	switch name {
	case "probe-host":
		return map[string]any{"ComputerName": "HV01", "SwitchFound": str(args, "Switch") == "Default Switch"}, nil
	case "get-vhd":
		info, ok := f.vhds[str(args, "Path")]
		if !ok {
			return nil, hvError(name, "ObjectNotFound", "The system cannot find the file specified.")
		}
		return info, nil
	case "host-gpu":
		return map[string]any{"Supported": f.gpuSupported, "Names": append([]string{}, f.gpus...)}, nil
	case "capacity":
		vms := []map[string]any{}
		for _, v := range f.vms {
			if strings.HasPrefix(v.name, "hvkube-") {
				vms = append(vms, map[string]any{"Name": v.name, "State": v.state, "MemoryStartup": v.mem})
			}
		}
		return map[string]any{"TotalKB": f.totalKB, "FreeKB": f.freeKB, "VMs": vms}, nil
	case "get-vms":
		var recs []map[string]any
		for _, v := range f.vms {
			if n := str(args, "Name"); (n == "" && strings.HasPrefix(v.name, "hvkube-")) || v.name == n {
				recs = append(recs, f.record(v))
			}
		}
		if len(recs) == 0 {
			return nil, nil
		}
		if len(recs) == 1 {
			return recs[0], nil // ConvertTo-Json writes one result as an object
		}
		return recs, nil
	case "vm-status":
		v := f.vm(str(args, "Name"))
		if v == nil {
			return nil, nil
		}
		if f.onStatus != nil {
			f.onStatus(v)
		}
		st := map[string]any{"Name": v.name, "State": v.state, "Heartbeat": "", "HeartbeatOK": false, "IPAddresses": []string{}}
		if v.state == "Running" {
			if v.bootLeft > 0 {
				v.bootLeft--
				st["Heartbeat"] = "No Contact"
			} else {
				st["Heartbeat"], st["HeartbeatOK"] = "OK", true
				st["IPAddresses"] = []string{"fe80::5c1a:2b3c:4d5e:6f70", "172.20.48.17"}
			}
		}
		return st, nil
	case "new-differencing-vhd":
		if _, err := os.Stat(str(args, "ParentPath")); err != nil {
			return nil, hvError(name, "ObjectNotFound", "parent: "+err.Error())
		}
		return nil, os.WriteFile(str(args, "Path"), []byte("vhdx"), 0o600)
	case "new-vm":
		if f.vm(str(args, "Name")) != nil {
			return nil, hvError(name, "ResourceExists", "a VM with that name exists")
		}
		f.nextID++
		v := &fakeVM{
			name: str(args, "Name"), id: fmt.Sprintf("5bdb4a49-1b0e-4c4e-9a55-%012d", f.nextID), state: "Off",
			notes: str(args, "Notes"), path: filepath.Join(str(args, "Path"), str(args, "Name")),
			mem: args["MemoryBytes"].(int64), cpus: args["ProcessorCount"].(int),
			created: time.Date(2025, 3, 1, 10, 15, 30, 0, time.UTC), checkpoints: map[string]bool{},
		}
		f.vms = append(f.vms, v)
		return map[string]any{"Id": v.id}, nil
	case "set-enhanced-session":
		_, err := vmArg()
		return nil, err
	case "add-gpu":
		v, err := vmArg()
		if err == nil {
			v.gpu = true
		}
		return nil, err
	case "start-vm", "start-paused":
		v, err := vmArg()
		if err != nil {
			return nil, err
		}
		if err := need(v, "Off", "Saved"); err != nil {
			return nil, err
		}
		if v.state == "Off" {
			v.bootLeft = f.bootPolls
		}
		f.nextPid++
		v.pid, v.state = f.nextPid, "Running"
		if name == "start-paused" {
			v.state = "Paused"
		}
		return nil, nil
	case "suspend-vm":
		v, err := vmArg()
		if err == nil {
			if err = need(v, "Running"); err == nil {
				v.state = "Paused"
			}
		}
		return nil, err
	case "resume-vm":
		v, err := vmArg()
		if err == nil {
			if err = need(v, "Paused"); err == nil {
				v.state = "Running"
			}
		}
		return nil, err
	case "save-vm":
		v, err := vmArg()
		if err == nil {
			if err = need(v, "Running", "Paused"); err == nil {
				v.state, v.pid = "Saved", 0
			}
		}
		return nil, err
	case "checkpoint-vm":
		v, err := vmArg()
		if err != nil {
			return nil, err
		}
		if v.gpu {
			return nil, hvError(name, "InvalidOperation", "checkpoints are not supported with a GPU partition adapter")
		}
		v.checkpoints[str(args, "Checkpoint")] = true
		return nil, nil
	case "restore-checkpoint":
		v, err := vmArg()
		if err != nil {
			return nil, err
		}
		if !v.checkpoints[str(args, "Checkpoint")] {
			return nil, hvError(name, "ObjectNotFound", "no checkpoint "+str(args, "Checkpoint"))
		}
		v.state, v.pid = "Saved", 0
		return nil, nil
	case "set-notes":
		v, err := vmArg()
		if err == nil {
			v.notes = str(args, "Notes")
		}
		return nil, err
	case "stop-vm":
		v, err := vmArg()
		if err == nil {
			if err = need(v, "Running", "Paused"); err == nil {
				v.state, v.pid = "Off", 0
			}
		}
		return nil, err
	case "remove-saved-state":
		v, err := vmArg()
		if err == nil {
			if err = need(v, "Saved"); err == nil {
				v.state = "Off"
			}
		}
		return nil, err
	case "remove-vm":
		var keep []*fakeVM
		for _, v := range f.vms {
			if v.name != str(args, "Name") {
				keep = append(keep, v)
			}
		}
		f.vms = keep
		return nil, nil
	case "guest-exec", "guest-start", "guest-copy-in", "guest-copy-out":
		v := f.vm(str(args, "Name"))
		if v == nil {
			return map[string]any{"State": ""}, nil
		}
		if v.state != "Running" {
			return map[string]any{"State": v.state}, nil
		}
		if str(args, "CredentialFile") == "" {
			return nil, hvError(name, "InvalidArgument", "no credential file")
		}
		switch name {
		case "guest-exec":
			env, _ := args["Environment"].([]string)
			stdin, _ := args["Stdin"].([]byte)
			code, stdout, stderr, startErr := f.exec(str(args, "FilePath"), str(args, "Arguments"), env, stdin)
			return map[string]any{"State": "Running", "StartError": startErr, "ExitCode": code, "Stdout": []byte(stdout), "Stderr": []byte(stderr)}, nil
		case "guest-start":
			f.started = append(f.started, str(args, "CommandLine"))
			return map[string]any{"State": "Running", "StartError": "", "ProcessId": 7312}, nil
		case "guest-copy-in":
			data, err := os.ReadFile(str(args, "Source"))
			if err != nil {
				return nil, hvError(name, "ObjectNotFound", err.Error())
			}
			f.files[strings.ToLower(str(args, "Destination"))] = data
		case "guest-copy-out":
			data, ok := f.files[strings.ToLower(str(args, "Source"))]
			if !ok {
				return nil, hvError(name, "ObjectNotFound", "Cannot find path '"+str(args, "Source")+"' because it does not exist.")
			}
			if err := os.WriteFile(str(args, "Destination"), data, 0o600); err != nil {
				return nil, err
			}
		}
		return map[string]any{"State": "Running"}, nil
	}
	return nil, fmt.Errorf("the fake host does not know script %s", name)
}

// fakeOS is a fake Windows guest OS: it records what the backend asks of
// it. Identity runs a program through the backend's runner, as the real
// one would.
type fakeOS struct {
	mu        sync.Mutex
	calls     []string
	readyFail int // Ready fails this many times first
	clipboard string
}

func (o *fakeOS) note(s string) {
	o.mu.Lock()
	o.calls = append(o.calls, s)
	o.mu.Unlock()
}

func (o *fakeOS) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.calls...)
}

func (o *fakeOS) Name() string { return guest.Windows }
func (o *fakeOS) Ready(ctx context.Context, r guest.Runner) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, "ready")
	if o.readyFail > 0 {
		o.readyFail--
		return fmt.Errorf("no desktop yet")
	}
	return nil
}
func (o *fakeOS) SetResolution(ctx context.Context, r guest.Runner, res string) error {
	return api.ErrUnsupported
}
func (o *fakeOS) Identity(ctx context.Context, r guest.Runner, hostname string) error {
	o.note("identity " + hostname)
	res, err := r.Exec(ctx, backend.ExecRequest{Path: `C:\Windows\System32\WindowsPowerShell\v1.0\powershell.exe`, Args: []string{"-NoProfile", "-Command", "Rename-Computer", hostname}})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d", res.ExitCode)
	}
	return err
}
func (o *fakeOS) Rename(ctx context.Context, r guest.Runner, hostname string) error {
	return o.Identity(ctx, r, hostname)
}
func (o *fakeOS) SetClock(ctx context.Context, r guest.Runner, t time.Time) error {
	o.note("clock")
	return nil
}
func (o *fakeOS) TypeText(ctx context.Context, r guest.Runner, text string) error {
	o.note("type " + text)
	return nil
}
func (o *fakeOS) Cursor(ctx context.Context, r guest.Runner) (int, int, error) {
	o.note("cursor")
	return 12, 34, nil
}
func (o *fakeOS) ClipboardGet(ctx context.Context, r guest.Runner) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.clipboard, nil
}
func (o *fakeOS) ClipboardSet(ctx context.Context, r guest.Runner, text string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.clipboard = text
	return nil
}
func (o *fakeOS) IsAbs(p string) bool                                          { return (guest.WindowsOS{}).IsAbs(p) }
func (o *fakeOS) Glob(context.Context, guest.Runner, string) ([]string, error) { return nil, nil }
func (o *fakeOS) ProcessRunning(context.Context, guest.Runner, string) error   { return nil }
func (o *fakeOS) Listening(context.Context, guest.Runner, int) error           { return nil }
func (o *fakeOS) Probes() guest.Probes                                         { return nil }

// rig is a backend on a fake host, with a template's source VHDX.
type rig struct {
	b    *Backend
	host *fakeHost
	os   *fakeOS
	dir  string
	src  string // the template's source VHDX
	cred string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	root := t.TempDir()
	r := &rig{host: newFakeHost(), os: &fakeOS{}, dir: filepath.Join(root, "hvkube"), src: filepath.Join(root, "images", "win11.vhdx"), cred: filepath.Join(root, "guest.json")}
	if err := os.MkdirAll(filepath.Dir(r.src), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.src, []byte(strings.Repeat("vhdx", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.cred, []byte(`{"user":"agent","password":"secret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r.host.vhds[r.src] = vhdInfo{Path: r.src, VhdFormat: "VHDX", VhdType: "Dynamic", Size: 64 << 30, FileSize: 16384}
	r.b = r.open(t)
	return r
}

// open opens a backend on the rig's directory and host (again, for a
// restart).
func (r *rig) open(t *testing.T) *Backend {
	t.Helper()
	roots, err := hostpath.NewRoots(filepath.Dir(r.src))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(context.Background(), Config{
		Dir: r.dir, CredentialFile: r.cred, AllowedRoots: roots, Runner: r.host,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		PollInterval: time.Millisecond, BootTimeout: 5 * time.Second, ResumeTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	b.osFor = func(name string) (guest.OS, error) {
		if name != guest.Windows {
			return guest.For(name, nil)
		}
		return r.os, nil
	}
	b.dial = func(ctx context.Context, addr string) error {
		if addr != "172.20.48.17:3389" {
			return fmt.Errorf("dial %s: refused", addr)
		}
		return nil
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func (r *rig) template(t *testing.T, spec backend.TemplateSpec) backend.TemplateInfo {
	t.Helper()
	if spec.ID == "" {
		spec.ID = "win11"
	}
	if spec.HyperV == nil {
		spec.HyperV = &api.HyperVImage{VHDXPath: r.src}
	}
	if spec.GuestOS == "" {
		spec.GuestOS = guest.Windows
	}
	info, err := r.b.BuildTemplate(context.Background(), spec, nil)
	if err != nil {
		t.Fatalf("build template: %v", err)
	}
	return info
}

func (r *rig) create(t *testing.T, id string) backend.Info {
	t.Helper()
	info, err := r.b.Create(context.Background(), backend.SandboxSpec{ID: id, UID: "uid-" + id, TemplateID: "win11"})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return info
}

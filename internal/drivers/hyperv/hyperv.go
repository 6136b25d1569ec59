// Package hyperv is hvkube's Hyper-V backend for Windows hosts. It drives
// Hyper-V through its PowerShell cmdlets, each call a constant script that
// takes its values as parameters (see scripts.go and internal/powershell),
// and reaches into Windows guests through PowerShell Direct.
//
// A template is a copy of a VHDX, taken once into Dir\templates\ID\ so that
// the disks cloned from it have a parent that never changes, with its
// settings in template.json beside it. A sandbox is a generation 2 VM named
// "hvkube-" + its ID, whose disk is a differencing disk over its template's
// in Dir\sandboxes\ID\ (the VM's configuration, checkpoints and saved state
// live there too). Hyper-V cannot start a VM from another VM's memory, so
// Create boots each sandbox once: it waits until the guest answers, gives
// it its identity, takes a checkpoint named "clean" that holds its memory,
// and pauses it. From then on a sandbox moves between Running, Paused
// (Suspend-VM) and Saved (Save-VM) in seconds, and Reset applies the clean
// checkpoint.
//
// The backend keeps no state of its own besides locks: Hyper-V is the
// record. A VM's notes hold JSON naming its sandbox (uid, template,
// hostname, resolution), so that List finds every sandbox again after a
// restart of the server.
//
// The package builds on every OS (its logic is tested anywhere against a
// recording Runner); it runs only on a Windows host with Hyper-V, as an
// administrator or a member of Hyper-V Administrators.
package hyperv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/atomicfile"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/guest"
	"github.com/hvkube/hvkube/internal/hostpath"
	"github.com/hvkube/hvkube/internal/powershell"
)

// Config configures the backend.
type Config struct {
	// Dir holds templates\ and sandboxes\ (such as D:\hvkube). Hyper-V
	// keeps the sandboxes' VM files there, so it wants a fast local disk.
	Dir string
	// Switch is the virtual switch sandboxes connect to (default
	// "Default Switch", which gives guests NAT and an address the host
	// reaches).
	Switch string
	// CredentialFile holds the guest account PowerShell Direct logs on
	// with, as JSON {"user": "...", "password": "..."}. The scripts read it
	// themselves: the password never crosses a command line or a log.
	CredentialFile string
	// AllowedRoots are the host directories a template's VHDX must lie
	// under. None are allowed when it is empty.
	AllowedRoots hostpath.Roots
	// Runner runs the scripts (default &powershell.Local{}).
	Runner powershell.Runner
	Logger *slog.Logger

	// BootTimeout bounds a sandbox's cold boot to a ready desktop (default
	// 10 minutes).
	BootTimeout time.Duration
	// ResumeTimeout bounds the wait for the guest's heartbeat after a
	// resume or restore (default 2 minutes).
	ResumeTimeout time.Duration
	// PollInterval paces the waits (default 2 seconds).
	PollInterval time.Duration
	// MemoryLimitPercent of host memory is the most guest memory the
	// backend commits (default 80).
	MemoryLimitPercent int
	// RDPPort is the guest port a boot waits to accept connections
	// (default 3389, Remote Desktop); a negative port skips that wait.
	RDPPort int
}

// Backend is the Hyper-V backend. It is safe for concurrent use.
type Backend struct {
	cfg Config
	log *slog.Logger

	// osFor returns the guest OS named by a template (guest.For).
	osFor func(name string) (guest.OS, error)
	// dial checks that a guest port accepts connections.
	dial func(ctx context.Context, addr string) error

	mu       sync.Mutex // guards the following fields
	locks    map[string]*idLock
	building map[string]int // sandbox id -> MB reserved while it is made
	meta     map[string]sbMeta

	capMu sync.Mutex // one capacity check and reservation at a time

	// bgCtx bounds background work (setting guest clocks); Close cancels
	// it and waits for bg.
	bgCtx     context.Context
	bgCancel  context.CancelFunc
	bg        sync.WaitGroup
	closeOnce sync.Once
}

var _ backend.Backend = (*Backend)(nil)

// Name prefixes of the VMs the backend makes.
const (
	sandboxPrefix  = "hvkube-"
	templatePrefix = "hvkube-tpl-"
)

// cleanCheckpoint names a sandbox's checkpoint taken when its desktop was
// first ready.
const cleanCheckpoint = "clean"

// New opens the backend: it checks that Hyper-V answers and that the switch
// exists, and makes its directories.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Dir == "" {
		return nil, errors.New("hyperv backend: Dir is required")
	}
	if cfg.CredentialFile == "" {
		return nil, errors.New("hyperv backend: CredentialFile is required (the guest account PowerShell Direct logs on with)")
	}
	for _, p := range []*string{&cfg.Dir, &cfg.CredentialFile} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, fmt.Errorf("hyperv backend: %w", err)
		}
		*p = abs
	}
	if fi, err := os.Stat(cfg.CredentialFile); err != nil || fi.IsDir() {
		return nil, fmt.Errorf("hyperv backend: guest credential file %s: not a readable file", cfg.CredentialFile)
	}
	if cfg.Switch == "" {
		cfg.Switch = "Default Switch"
	}
	if cfg.Runner == nil {
		cfg.Runner = &powershell.Local{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 10 * time.Minute
	}
	if cfg.ResumeTimeout == 0 {
		cfg.ResumeTimeout = 2 * time.Minute
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 2 * time.Second
	}
	if cfg.MemoryLimitPercent == 0 {
		cfg.MemoryLimitPercent = 80
	}
	if cfg.RDPPort == 0 {
		cfg.RDPPort = 3389
	}
	for _, d := range []string{filepath.Join(cfg.Dir, "templates"), filepath.Join(cfg.Dir, "sandboxes"), filepath.Join(cfg.Dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("hyperv backend: %w", err)
		}
	}
	b := &Backend{
		cfg: cfg, log: cfg.Logger,
		osFor:    func(name string) (guest.OS, error) { return guest.For(name, nil) },
		dial:     dialTCP,
		locks:    map[string]*idLock{},
		building: map[string]int{},
		meta:     map[string]sbMeta{},
	}
	b.bgCtx, b.bgCancel = context.WithCancel(context.WithoutCancel(ctx))
	var probe struct {
		ComputerName string
		SwitchFound  bool
	}
	if err := b.run(ctx, scriptProbeHost, powershell.Args{"Switch": cfg.Switch}, &probe); err != nil {
		b.bgCancel()
		return nil, fmt.Errorf("hyperv backend: Hyper-V does not answer (is it enabled, and does the server run as an administrator or a member of Hyper-V Administrators?): %v: %w", err, api.ErrUnavailable)
	}
	if !probe.SwitchFound {
		b.bgCancel()
		return nil, fmt.Errorf("hyperv backend: there is no virtual switch %q (Get-VMSwitch lists the switches): %w", cfg.Switch, api.ErrUnavailable)
	}
	// Scratch files of copies that were under way when the server stopped.
	if entries, err := os.ReadDir(filepath.Join(cfg.Dir, "tmp")); err == nil {
		for _, e := range entries {
			os.RemoveAll(filepath.Join(cfg.Dir, "tmp", e.Name()))
		}
	}
	b.log.Info("hyperv backend ready", "host", probe.ComputerName, "dir", cfg.Dir, "switch", cfg.Switch)
	return b, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return "hyperv" }

// Close implements backend.Backend: it stops the backend's background work.
// VMs keep running.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.bgCancel()
		b.bg.Wait()
	})
	return nil
}

// run runs a script through the configured Runner.
func (b *Backend) run(ctx context.Context, s powershell.Script, args powershell.Args, out any) error {
	return b.cfg.Runner.Run(ctx, s, args, out)
}

// ---- locks ----

type idLock struct {
	mu   sync.Mutex
	refs int
}

// lock serialises the calls for one key ("sandbox/ID", "template/ID") and
// returns the unlock.
func (b *Backend) lock(key string) func() {
	b.mu.Lock()
	l := b.locks[key]
	if l == nil {
		l = &idLock{}
		b.locks[key] = l
	}
	l.refs++
	b.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		b.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(b.locks, key)
		}
		b.mu.Unlock()
	}
}

// ---- templates ----

// tplMeta is a template's template.json.
type tplMeta struct {
	ID         string    `json:"id"`
	Source     string    `json:"source"`
	Generation int       `json:"generation"`
	GuestOS    string    `json:"guestOS"`
	CPUs       int       `json:"cpus"`
	MemoryMB   int       `json:"memoryMB"`
	Resolution string    `json:"resolution"`
	GPU        bool      `json:"gpu,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	DiskBytes  int64     `json:"diskBytes"`
	// VirtualBytes is the disk's size as the guest sees it.
	VirtualBytes int64 `json:"virtualBytes"`
}

func (t tplMeta) info() backend.TemplateInfo {
	return backend.TemplateInfo{ID: t.ID, CreatedAt: t.CreatedAt, DiskBytes: t.DiskBytes, Resolution: t.Resolution}
}

func (b *Backend) tplDir(id string) string  { return filepath.Join(b.cfg.Dir, "templates", id) }
func (b *Backend) tplDisk(id string) string { return filepath.Join(b.tplDir(id), "disk.vhdx") }

func (b *Backend) loadTemplate(id string) (tplMeta, error) {
	var t tplMeta
	data, err := os.ReadFile(filepath.Join(b.tplDir(id), "template.json"))
	if errors.Is(err, os.ErrNotExist) {
		return t, fmt.Errorf("template %q %w", id, api.ErrNotFound)
	}
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return t, fmt.Errorf("template %s: template.json: %w", id, err)
	}
	return t, nil
}

// vhdInfo is what scriptGetVHD reports.
type vhdInfo struct {
	Path       string
	VhdFormat  string
	VhdType    string
	ParentPath string
	Size       int64
	FileSize   int64
	Attached   bool
}

// BuildTemplate implements backend.Backend. It checks the VHDX (under the
// allowed roots; a VHDX that is not differencing and not in use) and copies
// it into the template's folder: sandboxes' disks are differencing disks
// over that copy, which nothing writes. It boots nothing: every sandbox
// boots once when it is created. Idempotent.
func (b *Backend) BuildTemplate(ctx context.Context, spec backend.TemplateSpec, progress backend.Progress) (backend.TemplateInfo, error) {
	if progress == nil {
		progress = func(string) {}
	}
	if err := api.ValidateName("id", spec.ID); err != nil {
		return backend.TemplateInfo{}, err
	}
	osName := spec.GuestOS
	if osName == "" {
		osName = guest.Windows
	}
	if osName == guest.Linux {
		return backend.TemplateInfo{}, fmt.Errorf("spec.guest.os linux: the hyperv backend drives Windows guests (through PowerShell Direct): %w", api.ErrUnsupported)
	}
	if _, err := b.osFor(osName); err != nil {
		return backend.TemplateInfo{}, err
	}
	if spec.HyperV == nil || spec.HyperV.VHDXPath == "" {
		return backend.TemplateInfo{}, api.Invalid("spec.hyperv.vhdxPath", "required: the hyperv backend builds templates from a VHDX")
	}
	gen := spec.HyperV.Generation
	if gen == 0 {
		gen = 2
	}
	if gen != 2 {
		return backend.TemplateInfo{}, fmt.Errorf("spec.hyperv.generation %d: the hyperv backend makes generation 2 VMs: %w", gen, api.ErrUnsupported)
	}
	res := spec.Resolution
	if res == "" {
		res = api.DefaultResolution
	}
	if _, _, err := api.ParseResolution(res); err != nil {
		return backend.TemplateInfo{}, api.Invalid("spec.display.resolution", "%v", err)
	}
	unlock := b.lock("template/" + spec.ID)
	defer unlock()
	if t, err := b.loadTemplate(spec.ID); err == nil {
		return t.info(), nil
	}
	src := spec.HyperV.VHDXPath
	if err := b.cfg.AllowedRoots.Check("spec.hyperv.vhdxPath", src); err != nil {
		return backend.TemplateInfo{}, err
	}
	fi, err := os.Stat(src)
	if err != nil || !fi.Mode().IsRegular() {
		return backend.TemplateInfo{}, api.Invalid("spec.hyperv.vhdxPath", "%q is not a file on this host", src)
	}
	var vhd vhdInfo
	if err := b.run(ctx, scriptGetVHD, powershell.Args{"Path": src}, &vhd); err != nil {
		return backend.TemplateInfo{}, fmt.Errorf("template %s: %s: %w", spec.ID, src, err)
	}
	switch {
	case vhd.VhdFormat != "VHDX":
		return backend.TemplateInfo{}, api.Invalid("spec.hyperv.vhdxPath", "%q is a %s: generation 2 VMs boot from a VHDX", src, vhd.VhdFormat)
	case vhd.VhdType == "Differencing":
		return backend.TemplateInfo{}, api.Invalid("spec.hyperv.vhdxPath", "%q is a differencing disk (over %s): merge it into a standalone VHDX first (Convert-VHD)", src, vhd.ParentPath)
	case vhd.Attached:
		return backend.TemplateInfo{}, fmt.Errorf("spec.hyperv.vhdxPath: %q is attached to a VM: shut the VM down or detach the disk first: %w", src, api.ErrConflict)
	}
	meta := tplMeta{
		ID: spec.ID, Source: src, Generation: gen, GuestOS: osName,
		CPUs: spec.CPU, MemoryMB: spec.MemoryMB, Resolution: res, GPU: spec.GPU,
		VirtualBytes: vhd.Size,
	}
	if meta.CPUs <= 0 {
		meta.CPUs = 2
	}
	if meta.MemoryMB <= 0 {
		meta.MemoryMB = 4096
	}

	final := b.tplDir(spec.ID)
	tmp := final + ".building"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return backend.TemplateInfo{}, err
	}
	ok := false
	defer func() {
		if !ok {
			removeAllWritable(tmp)
		}
	}()
	progress(fmt.Sprintf("copying %s (%d MB)", src, fi.Size()>>20))
	disk := filepath.Join(tmp, "disk.vhdx")
	if err := copyFile(ctx, src, disk, fi.Size(), progress); err != nil {
		return backend.TemplateInfo{}, fmt.Errorf("template %s: copy %s: %w", spec.ID, src, err)
	}
	// The copy is the parent of every sandbox's disk: a write to it would
	// corrupt them all.
	if err := os.Chmod(disk, 0o444); err != nil {
		return backend.TemplateInfo{}, err
	}
	meta.CreatedAt = time.Now().UTC()
	meta.DiskBytes = fileSize(disk)
	if err := writeJSON(filepath.Join(tmp, "template.json"), meta); err != nil {
		return backend.TemplateInfo{}, err
	}
	removeAllWritable(final)
	if err := os.Rename(tmp, final); err != nil {
		return backend.TemplateInfo{}, err
	}
	ok = true
	progress("template ready")
	b.log.Info("template built", "template", spec.ID, "source", src, "diskBytes", meta.DiskBytes)
	return meta.info(), nil
}

// InspectTemplate implements backend.Backend.
func (b *Backend) InspectTemplate(ctx context.Context, id string) (backend.TemplateInfo, error) {
	if err := api.ValidateName("id", id); err != nil {
		return backend.TemplateInfo{}, err
	}
	t, err := b.loadTemplate(id)
	if err != nil {
		return backend.TemplateInfo{}, err
	}
	return t.info(), nil
}

// DeleteTemplate implements backend.Backend. The sandboxes cloned from a
// template need its disk: while one exists, Hyper-V holds the disk open and
// the delete fails. Deleting a missing template is not an error.
func (b *Backend) DeleteTemplate(ctx context.Context, id string) error {
	if err := api.ValidateName("id", id); err != nil {
		return err
	}
	unlock := b.lock("template/" + id)
	defer unlock()
	if err := removeAllWritable(b.tplDir(id)); err != nil {
		return fmt.Errorf("delete template %s (is a sandbox still using its disk?): %w", id, err)
	}
	return nil
}

// copyFile copies src to dst (through dst.part), reporting every tenth.
func copyFile(ctx context.Context, src, dst string, size int64, progress backend.Progress) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	part := dst + ".part"
	out, err := os.Create(part)
	if err != nil {
		return err
	}
	defer os.Remove(part)
	buf := make([]byte, 4<<20)
	var done int64
	lastTenth := int64(0)
	for {
		if err := ctx.Err(); err != nil {
			out.Close()
			return err
		}
		n, rerr := in.Read(buf)
		if n > 0 {
			if _, err := out.Write(buf[:n]); err != nil {
				out.Close()
				return err
			}
			done += int64(n)
			if size > 0 {
				if tenth := done * 10 / size; tenth > lastTenth && tenth < 10 {
					lastTenth = tenth
					progress(fmt.Sprintf("copying: %d%%", tenth*10))
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			out.Close()
			return rerr
		}
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(part, dst)
}

// removeAllWritable removes a directory tree, clearing read-only files
// first (Windows refuses to delete them).
func removeAllWritable(dir string) error {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			os.Chmod(p, 0o600)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// ---- capacity ----

// capacityInfo is what scriptCapacity reports.
type capacityInfo struct {
	TotalKB int64
	FreeKB  int64
	VMs     []struct {
		Name          string
		State         string
		MemoryStartup int64
	}
}

// Capacity implements backend.Backend. Host memory comes from
// Win32_OperatingSystem; committed memory is the startup memory (which is
// also the most dynamic memory may give) of the sandboxes that are not Off
// or Saved, plus that of the sandboxes being created.
func (b *Backend) Capacity(ctx context.Context) (backend.Capacity, error) {
	var c capacityInfo
	if err := b.run(ctx, scriptCapacity, nil, &c); err != nil {
		return backend.Capacity{}, fmt.Errorf("capacity: %w", err)
	}
	total := int(c.TotalKB / 1024)
	b.mu.Lock()
	committed := 0
	for _, mb := range b.building {
		committed += mb
	}
	for _, vm := range c.VMs {
		id, ok := sandboxID(vm.Name)
		if !ok {
			continue
		}
		if _, building := b.building[id]; building {
			continue
		}
		if vm.State != "Off" && vm.State != "Saved" {
			committed += int(vm.MemoryStartup >> 20)
		}
	}
	b.mu.Unlock()
	return backend.Capacity{
		TotalMemoryMB:     total,
		AvailableMemoryMB: int(c.FreeKB / 1024),
		UsedMemoryMB:      committed,
		LimitMemoryMB:     total * b.cfg.MemoryLimitPercent / 100,
		FreeMemoryMB:      max(total*b.cfg.MemoryLimitPercent/100-committed, 0),
	}, nil
}

// reserve counts memMB for a sandbox being made, or refuses with
// api.ErrUnavailable when it would pass the limit.
func (b *Backend) reserve(ctx context.Context, id string, memMB int) error {
	b.capMu.Lock()
	defer b.capMu.Unlock()
	c, err := b.Capacity(ctx)
	if err != nil {
		return err
	}
	if c.UsedMemoryMB+memMB > c.LimitMemoryMB {
		return fmt.Errorf("not enough host memory: %d MB more would commit %d MB of guest memory, over the limit of %d MB (%d%% of %d MB): %w",
			memMB, c.UsedMemoryMB+memMB, c.LimitMemoryMB, b.cfg.MemoryLimitPercent, c.TotalMemoryMB, api.ErrUnavailable)
	}
	b.mu.Lock()
	b.building[id] = memMB
	b.mu.Unlock()
	return nil
}

func (b *Backend) release(id string) {
	b.mu.Lock()
	delete(b.building, id)
	b.mu.Unlock()
}

// ---- helpers ----

// dialTCP checks that addr accepts a TCP connection.
func dialTCP(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// writeJSON writes v to path as JSON, whole and on disk (atomicfile): a
// crash leaves the old file or the new one, never an empty one.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// tempPath is a fresh scratch file name under Dir\tmp.
func (b *Backend) tempPath(kind string) string {
	return filepath.Join(b.cfg.Dir, "tmp", kind+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strconv.Itoa(int(tempSeq.Add(1))))
}

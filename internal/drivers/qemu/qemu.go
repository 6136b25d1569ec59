// Package qemu is hvkube's QEMU backend for Linux hosts: KVM where a probe
// VM runs under it, TCG software emulation otherwise.
//
// Templates are cold-booted once with their RAM in a file
// (memory-backend-file, share=on); when the desktop answers, the VM is
// stopped and its device state migrated to a file with x-ignore-shared, so
// that the RAM file plus the state file are the template's snapshot. A
// sandbox is a clone: a qcow2 overlay on the template's disk, and a QEMU
// that maps the template's RAM file privately (share=off, copy on write)
// and loads the device state with -incoming. Clones land paused in a
// fraction of a second and share every page they have not written.
//
// Each sandbox has a directory (vm.json, overlay disk, saved state, logs,
// pidfile) and a short run directory for its sockets (QMP, guest agent,
// VNC, NIC). QEMU runs in its own session and outlives the server; on
// start the backend finds the sandboxes' directories and adopts the
// processes that still run.
//
// A guest's network is in this process: one guestnet.Network per QEMU
// process, with the sandbox's egress policy (network.go).
package qemu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/atomicfile"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/capacity"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qga"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
	guestos "github.com/hvkube/hvkube/internal/guest"
	"github.com/hvkube/hvkube/internal/guestnet"
	"github.com/hvkube/hvkube/internal/hostpath"
)

// Config configures the backend.
type Config struct {
	// Dir holds templates/ and sandboxes/ (the server puts it in its data
	// directory).
	Dir string
	// ImageDir holds images built by `make image`, as NAME/current.
	ImageDir string
	// RunDir holds the sockets; it must be short (unix socket paths are
	// limited to 107 bytes). Default: /run/hvkube for root, else
	// $XDG_RUNTIME_DIR/hvkube, else the temp dir.
	RunDir string
	// ShmDir holds scratch files that should live in memory: a template's
	// RAM while it boots, screendumps. Default: /dev/shm/hvkube-UID/HASH,
	// HASH naming Dir, else RunDir.
	ShmDir string
	// Binary is qemu-system-x86_64; QEMUImg is qemu-img.
	Binary  string
	QEMUImg string
	// Accel is kvm, tcg, or empty to choose at New: kvm when a probe VM
	// runs under KVM, else tcg. A chosen kvm turns to tcg for good when
	// KVM stops a real guest with an internal error (see refuseKVM).
	Accel string
	// KVMRecord is the file where a KVM that stopped a guest is recorded,
	// so that later backends on the host (until it reboots) use TCG at
	// once. Default: DefaultKVMRecord(); "-" records nothing.
	KVMRecord string
	// MemoryLimitPercent of host memory is the most the VMs may use,
	// measured as they use it, reserves included (default
	// capacity.DefaultLimitPercent).
	MemoryLimitPercent int
	// RunningReserveMB is the room kept for each running VM to grow in;
	// 0 learns it per template (see capacity.Policy).
	RunningReserveMB int
	// Memory measures the host and the VMs (default capacity.ProcReader).
	Memory capacity.Reader
	// BootTimeout bounds each stage of a cold boot (the guest agent, the
	// desktop) in the CPU time QEMU gets, and at most bootWallFactor times
	// it on the clock (default 5 minutes: TCG is slow; boot.go).
	BootTimeout time.Duration
	// NoSpares turns off spare clones (see spare): every clone then starts
	// its QEMU on demand.
	NoSpares bool
	// NoWarm leaves clones started on demand as they were cloned instead
	// of readying them in the background (warm.go).
	NoWarm bool
	// WarmOnRequest leaves them as cloned until ReadyAhead asks for them
	// (backend.Readier; the node asks for the idle desktops next in line),
	// instead of readying every one (warm.go).
	WarmOnRequest bool
	// MaxSpares is the most spares a template keeps (default
	// DefaultMaxSpares).
	MaxSpares int
	// AllowedRoots are the host directories a template's explicit image
	// files (spec.qemu.disk, kernel, initrd) must lie under; ImageDir
	// alone when empty.
	AllowedRoots hostpath.Roots
	// NetworkHosts are static DNS answers for the guests, checked before
	// the host's resolver: names (no wildcards) and their addresses; of
	// the loopback range only 127.0.0.1, which a guest reaches as its
	// gateway. They answer a name, and do not let the guest connect: the
	// egress policy decides that.
	NetworkHosts map[string][]netip.Addr
	Logger       *slog.Logger
}

// Backend is the QEMU backend. It is safe for concurrent use.
type Backend struct {
	cfg Config
	log *slog.Logger

	accelMu     sync.Mutex // guards the following fields
	accelName   string     // the accelerator new VMs get: kvm or tcg
	accelReason string     // why
	accelProbed bool       // accelName was chosen, not configured
	enc         display.Encoder
	// hostAddrs are the host's interface addresses at New, refused to the
	// guests by default; netHosts is Config.NetworkHosts checked; the
	// guests' other names come from resolver.
	hostAddrs []netip.Addr
	netHosts  map[string][]netip.Addr
	resolver  guestnet.Resolver

	mu        sync.Mutex // guards the following fields
	vms       map[string]*vm
	tplLocks  map[string]*sync.Mutex
	building  map[string]int       // template id -> guest MB being booted
	spares    map[string]*spareSet // template id -> its spare clones
	closeOnce sync.Once

	// book learns what the templates' clones use; foot holds the VMs'
	// measured footprints (memory.go).
	book *capacity.Book
	foot footprints
	// warmQ holds clones to ready in the background (warm.go).
	warmQ chan string
	// readying counts the clones queued to be readied or being readied;
	// queued holds their IDs, under warmMu.
	readying atomic.Int64
	warmMu   sync.Mutex
	queued   map[string]bool

	// bgCtx bounds the backend's own background work (making spares);
	// Close cancels it.
	bgCtx    context.Context
	bgCancel context.CancelFunc
}

var _ backend.Backend = (*Backend)(nil)

// DefaultRunDir picks the socket directory.
func DefaultRunDir() string {
	if os.Geteuid() == 0 {
		return "/run/hvkube"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "hvkube")
	}
	return filepath.Join(os.TempDir(), "hvkube-"+strconv.Itoa(os.Geteuid()))
}

// DefaultImageDir is where `make image` leaves images: HVKUBE_CACHE_DIR,
// else $XDG_CACHE_HOME/hvkube, else ~/.cache/hvkube, plus /images.
func DefaultImageDir() string {
	base := os.Getenv("HVKUBE_CACHE_DIR")
	if base == "" {
		if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
			base = filepath.Join(d, "hvkube")
		} else if home, err := os.UserHomeDir(); err == nil {
			base = filepath.Join(home, ".cache", "hvkube")
		}
	}
	return filepath.Join(base, "images")
}

// New opens the backend and adopts the sandboxes found in cfg.Dir.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Dir == "" {
		return nil, errors.New("qemu backend: Dir is required")
	}
	// QEMU runs in its own directory and finds its files by these paths;
	// they must not be relative. They also tell this backend's processes
	// from others' (ownProcesses).
	for _, d := range []*string{&cfg.Dir, &cfg.ImageDir, &cfg.RunDir} {
		if *d != "" && !filepath.IsAbs(*d) {
			abs, err := filepath.Abs(*d)
			if err != nil {
				return nil, fmt.Errorf("qemu backend: %w", err)
			}
			*d = abs
		}
	}
	if cfg.ImageDir == "" {
		cfg.ImageDir = DefaultImageDir()
	}
	if cfg.RunDir == "" {
		cfg.RunDir = DefaultRunDir()
	}
	if cfg.ShmDir == "" {
		cfg.ShmDir = cfg.RunDir
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			// One directory per backend directory: two servers (or
			// tests) on one host may build templates, and take
			// screendumps of sandboxes, of the same names.
			sum := sha256.Sum256([]byte(cfg.Dir))
			cfg.ShmDir = filepath.Join("/dev/shm", "hvkube-"+strconv.Itoa(os.Geteuid()), hex.EncodeToString(sum[:6]))
		}
	}
	if cfg.Binary == "" {
		cfg.Binary = "qemu-system-x86_64"
	}
	if cfg.QEMUImg == "" {
		cfg.QEMUImg = "qemu-img"
	}
	if cfg.MemoryLimitPercent == 0 {
		cfg.MemoryLimitPercent = capacity.DefaultLimitPercent
	}
	if err := (capacity.Policy{LimitPercent: cfg.MemoryLimitPercent, RunningReserveMB: cfg.RunningReserveMB}).Validate(); err != nil {
		return nil, fmt.Errorf("qemu backend: %w: %w", err, api.ErrInvalid)
	}
	if cfg.Memory == nil {
		cfg.Memory = capacity.ProcReader{}
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 5 * time.Minute
	}
	if cfg.MaxSpares == 0 {
		cfg.MaxSpares = DefaultMaxSpares
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.AllowedRoots) == 0 {
		roots, err := hostpath.NewRoots(cfg.ImageDir)
		if err != nil {
			return nil, fmt.Errorf("qemu backend: %w", err)
		}
		cfg.AllowedRoots = roots
	}
	for _, bin := range []*string{&cfg.Binary, &cfg.QEMUImg} {
		p, err := exec.LookPath(*bin)
		if err != nil {
			return nil, fmt.Errorf("qemu backend: %s not found (install qemu-system-x86 and qemu-utils): %w", *bin, api.ErrUnavailable)
		}
		*bin = p
	}
	if cfg.KVMRecord == "" {
		cfg.KVMRecord = DefaultKVMRecord()
	}
	accel, accelReason, probed := cfg.Accel, "set by configuration", false
	if accel == "" {
		accel, accelReason = chooseAccel(ctx, cfg.Binary, cfg.KVMRecord, cfg.Logger)
		probed = true
	}
	for _, d := range []string{filepath.Join(cfg.Dir, "templates"), filepath.Join(cfg.Dir, "sandboxes"), filepath.Join(cfg.Dir, "spares"), cfg.RunDir, cfg.ShmDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("qemu backend: %w", err)
		}
	}
	netHosts, err := checkHosts(cfg.NetworkHosts)
	if err != nil {
		return nil, fmt.Errorf("qemu backend: %w", err)
	}
	hostAddrs, err := guestnet.HostAddrs()
	if err != nil {
		cfg.Logger.Warn("cannot list the host's addresses: guests are not kept from them by default", "err", err)
		hostAddrs = []netip.Addr{}
	}
	b := &Backend{cfg: cfg, accelName: accel, accelReason: accelReason, accelProbed: probed, log: cfg.Logger, vms: map[string]*vm{}, tplLocks: map[string]*sync.Mutex{}, building: map[string]int{}, spares: map[string]*spareSet{},
		hostAddrs: hostAddrs, netHosts: netHosts, resolver: net.DefaultResolver, book: capacity.NewBook(), warmQ: make(chan string, warmQueueLen), queued: map[string]bool{}}
	b.bgCtx, b.bgCancel = context.WithCancel(context.WithoutCancel(ctx))
	if _, err := b.List(ctx); err != nil {
		return nil, err
	}
	b.removeStrays()
	b.removeStaleSpares()
	go b.sampleLoop()
	for range max(1, runtime.NumCPU()) {
		go b.warmLoop()
	}
	b.log.Info("qemu backend ready", "accel", accel, "accelReason", accelReason, "dir", cfg.Dir, "images", cfg.ImageDir, "sandboxes", len(b.vms))
	return b, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return "qemu" }

// Accel reports the accelerator new VMs get (kvm or tcg).
func (b *Backend) Accel() string {
	b.accelMu.Lock()
	defer b.accelMu.Unlock()
	return b.accelName
}

// AccelReason says why Accel is in use: set by configuration, what the
// probe at New found (a probe VM ran under KVM, or why it could not), or
// the guest KVM stopped since.
func (b *Backend) AccelReason() string {
	b.accelMu.Lock()
	defer b.accelMu.Unlock()
	return b.accelReason
}

// refuseKVM turns a chosen kvm to tcg for the VMs started from now on,
// after KVM stopped a guest with an internal error (what says which): a KVM that
// passed the probe and then cannot run the desktop's kernel (seen with
// nested KVM, at an instruction it could not emulate). It records the
// refusal in Config.KVMRecord for the next backends on this host. It
// reports whether it turned kvm to tcg: not when tcg was in use, nor when
// the configuration asked for kvm.
func (b *Backend) refuseKVM(what string) bool {
	b.accelMu.Lock()
	if b.accelName != "kvm" || !b.accelProbed {
		b.accelMu.Unlock()
		return false
	}
	reason := fmt.Sprintf("/dev/kvm passed the probe, then stopped %s with an internal error (an instruction KVM could not emulate, or a failed VM entry); using TCG", what)
	b.accelName, b.accelReason = "tcg", reason
	b.accelMu.Unlock()
	b.log.Warn("KVM is not usable; using TCG, which is much slower", "reason", reason)
	if b.cfg.KVMRecord != "-" {
		if err := recordKVMRefusal(b.cfg.KVMRecord, reason); err != nil {
			b.log.Warn("cannot record the refusal of KVM: the next backend probes KVM again", "err", err)
		}
	}
	return true
}

// Close drops the backend's connections and guest networks and discards
// its spare clones; the sandboxes' VMs keep running (without a network
// until a backend adopts them again). What their networks denied so far
// is recorded, for the next backend to count on from.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.bgCancel()
		b.dropAllSpares()
		b.mu.Lock()
		vms := make([]*vm, 0, len(b.vms))
		for _, v := range b.vms {
			vms = append(vms, v)
		}
		b.mu.Unlock()
		for _, v := range vms {
			v.disconnect()
			// A call that holds the sandbox (a boot, a save) keeps it: its
			// own record is written when it ends.
			if v.mu.TryLock() {
				if !v.gone && v.meta.ID != "" {
					v.save()
				}
				v.mu.Unlock()
			}
		}
	})
	return nil
}

// ---- templates ----

type tplMeta struct {
	ID    string `json:"id"`
	Image image  `json:"image"`
	// Network: the snapshot has a NIC (see network.go). Snapshots built
	// before guest networks have none, and neither have their clones.
	Network     bool      `json:"network,omitempty"`
	Accel       string    `json:"accel"`
	CPUs        int       `json:"cpus"`
	MemoryMB    int       `json:"memoryMB"`
	Resolution  string    `json:"resolution"`
	CreatedAt   time.Time `json:"createdAt"`
	BootSeconds float64   `json:"bootSeconds"`
	MemoryBytes int64     `json:"memoryBytes"`
	DiskBytes   int64     `json:"diskBytes"`
	// WorkingSetMB is what the template's own VM used when its desktop
	// was ready: the first measure of the working set its clones reach.
	WorkingSetMB int `json:"workingSetMB,omitempty"`
}

func (t tplMeta) info() backend.TemplateInfo {
	info := backend.TemplateInfo{ID: t.ID, CreatedAt: t.CreatedAt, BootTime: time.Duration(t.BootSeconds * float64(time.Second)),
		MemoryBytes: t.MemoryBytes, DiskBytes: t.DiskBytes, Resolution: t.Resolution, Network: t.Network}
	if a := t.Image.Automation; a != nil {
		info.Automation = *a
	}
	return info
}

func (b *Backend) tplDir(id string) string { return filepath.Join(b.cfg.Dir, "templates", id) }

func (b *Backend) loadTemplate(id string) (tplMeta, error) {
	var t tplMeta
	err := readJSON(filepath.Join(b.tplDir(id), "template.json"), &t)
	if errors.Is(err, os.ErrNotExist) {
		return t, fmt.Errorf("template snapshot %q %w", id, api.ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("template snapshot %s: %w: build it again", id, err)
	}
	return t, nil
}

func (b *Backend) tplLock(id string) *sync.Mutex {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.tplLocks[id]
	if !ok {
		l = &sync.Mutex{}
		b.tplLocks[id] = l
	}
	return l
}

// InspectTemplate implements backend.Backend.
func (b *Backend) InspectTemplate(ctx context.Context, id string) (backend.TemplateInfo, error) {
	t, err := b.loadTemplate(id)
	if err != nil {
		return backend.TemplateInfo{}, err
	}
	return t.info(), nil
}

// DeleteTemplate implements backend.Backend.
func (b *Backend) DeleteTemplate(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	l := b.tplLock(id)
	l.Lock()
	defer l.Unlock()
	b.dropSpare(id)
	return os.RemoveAll(b.tplDir(id))
}

// BuildTemplate implements backend.Backend.
func (b *Backend) BuildTemplate(ctx context.Context, spec backend.TemplateSpec, progress backend.Progress) (backend.TemplateInfo, error) {
	if progress == nil {
		progress = func(string) {}
	}
	if err := checkID(spec.ID); err != nil {
		return backend.TemplateInfo{}, err
	}
	if spec.GuestOS != "" && spec.GuestOS != guestos.Linux {
		return backend.TemplateInfo{}, fmt.Errorf("template %s: spec.guest.os %q: the qemu backend runs Linux guests (Windows guests run on the hyperv backend): %w", spec.ID, spec.GuestOS, api.ErrUnsupported)
	}
	l := b.tplLock(spec.ID)
	l.Lock()
	defer l.Unlock()
	if t, err := b.loadTemplate(spec.ID); err == nil {
		return t.info(), nil
	}
	accel := b.Accel()
	info, err := b.buildTemplate(ctx, spec, accel, progress)
	if err != nil && accel == "kvm" && internalError(err) && b.refuseKVM("template "+spec.ID+"'s guest") {
		progress("KVM stopped the guest with an internal error: building again under TCG, and using TCG from now on")
		return b.buildTemplate(ctx, spec, "tcg", progress)
	}
	return info, err
}

// buildTemplate cold-boots the template spec under accel and keeps its
// snapshot; BuildTemplate holds its lock.
func (b *Backend) buildTemplate(ctx context.Context, spec backend.TemplateSpec, accel string, progress backend.Progress) (backend.TemplateInfo, error) {
	img, err := resolveImage(b.cfg.ImageDir, b.cfg.AllowedRoots, spec.Image)
	if err != nil {
		return backend.TemplateInfo{}, err
	}
	meta := tplMeta{ID: spec.ID, Image: img, Accel: accel, CPUs: spec.CPU, MemoryMB: spec.MemoryMB, Resolution: spec.Resolution}
	if meta.CPUs == 0 {
		meta.CPUs = max(img.CPUs, 1)
	}
	if meta.MemoryMB == 0 {
		meta.MemoryMB = max(img.MemoryMB, api.DefaultTemplateMemory)
	}
	if meta.Resolution == "" {
		meta.Resolution = img.Resolution
	}
	switch {
	case spec.NetworkMode == api.NetworkNone:
	case img.Network == nil:
		b.log.Warn("the image declares no network (image.json has no network): the template's snapshot gets no network device, and its sandboxes no network", "template", spec.ID, "image", img.Dir)
		progress("the image declares no network: the snapshot gets no network device")
	default:
		if _, err := img.Network.config(b.hostAddrs); err != nil {
			return backend.TemplateInfo{}, fmt.Errorf("template %s: %w", spec.ID, err)
		}
		meta.Network = true
	}
	if err := b.reserve(spec.ID, meta.MemoryMB, "", admitNew); err != nil {
		return backend.TemplateInfo{}, err
	}
	defer b.release(spec.ID)

	final := b.tplDir(spec.ID)
	tmp := final + ".building"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return backend.TemplateInfo{}, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	progress(fmt.Sprintf("creating the template disk over %s", img.Disk))
	if err := b.overlay(ctx, img.Disk, filepath.Join(tmp, "disk.qcow2")); err != nil {
		return backend.TemplateInfo{}, err
	}
	run := b.runDirFor(tmp)
	defer os.RemoveAll(run)
	m := b.machineFor(meta, "hvkube-template:"+spec.ID, tmp, run, filepath.Join(tmp, "disk.qcow2"))
	// The guest's RAM lives in a shared file while it boots. On a disk the
	// kernel keeps writing its dirty pages back, which slows the boot by
	// half; in memory (tmpfs) it does not. It is copied next to the disk at
	// the end.
	m.MemFile, m.MemShared = filepath.Join(b.cfg.ShmDir, "template-"+spec.ID+".ram"), true
	defer os.Remove(m.MemFile)
	progress(fmt.Sprintf("cold-booting %s (%s, %d MB, %s)", spec.ID, accel, meta.MemoryMB, meta.Resolution))
	start := time.Now()
	p, err := b.launch(ctx, m, tmp)
	if err != nil {
		return backend.TemplateInfo{}, err
	}
	defer p.kill()
	ga := qga.New(m.QGASocket)
	defer ga.Close()
	g := newGuest(ga, img)
	bootCtx, watch, stopWatch := b.watchBoot(ctx, p.pid, meta.CPUs, progress)
	defer stopWatch()
	if err := g.waitAgent(bootCtx, p); err != nil {
		return backend.TemplateInfo{}, fmt.Errorf("template %s: guest agent: %w%s", spec.ID, err, p.logTail())
	}
	progress(fmt.Sprintf("guest agent answers after %.1fs", time.Since(start).Seconds()))
	watch.begin("the desktop to be ready")
	if err := g.waitReady(bootCtx, p); err != nil {
		return backend.TemplateInfo{}, fmt.Errorf("template %s: desktop: %w%s", spec.ID, err, p.logTail())
	}
	if meta.Resolution != img.Resolution {
		if err := g.os.SetResolution(bootCtx, g, meta.Resolution); err != nil {
			return backend.TemplateInfo{}, fmt.Errorf("template %s: %w", spec.ID, err)
		}
	}
	stopWatch() // the boot is over: nothing more to report of it
	boot := time.Since(start)
	meta.BootSeconds = boot.Seconds()
	progress(fmt.Sprintf("desktop ready after %.1fs; taking the snapshot", boot.Seconds()))
	meta.WorkingSetMB, _ = b.cfg.Memory.FootprintMB(p.pid)
	// The guest agent's connection is dropped before the snapshot so that
	// clones start with no host end attached.
	ga.Disconnect()
	if err := p.mon.Stop(ctx); err != nil {
		return backend.TemplateInfo{}, err
	}
	if err := b.keepTemplate(ctx, p, m.MemFile, tmp, final, &meta); err != nil {
		return backend.TemplateInfo{}, fmt.Errorf("template %s: %w", spec.ID, err)
	}
	ok = true
	progress("template snapshot saved")
	b.log.Info("template built", "template", spec.ID, "boot", boot.Round(time.Millisecond), "network", meta.Network)
	return meta.info(), nil
}

// keepTemplate makes template directory final of the stopped QEMU p of a
// template being made in tmp, whose RAM is the shared file memFile: its
// device state (state), its RAM (ram), its facts (template.json, from
// meta), then tmp renamed final.
func (b *Backend) keepTemplate(ctx context.Context, p *proc, memFile, tmp, final string, meta *tplMeta) error {
	if err := saveTemplateState(ctx, p, memFile, tmp); err != nil {
		return err
	}
	return finishTemplate(tmp, final, meta)
}

// saveTemplateState writes the device state (state) and the RAM (ram) of
// the stopped QEMU p of a template being made in tmp, whose RAM is the
// shared file memFile, and ends p.
func saveTemplateState(ctx context.Context, p *proc, memFile, tmp string) error {
	if err := migrateToFile(ctx, p.mon, filepath.Join(tmp, "state")); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := p.quit(ctx); err != nil {
		return err
	}
	if err := copySparse(memFile, filepath.Join(tmp, "ram")); err != nil {
		return fmt.Errorf("keep its memory: %w", err)
	}
	os.Remove(memFile)
	return nil
}

// finishTemplate writes the facts of the template made in tmp
// (template.json, from meta) and renames tmp final.
func finishTemplate(tmp, final string, meta *tplMeta) error {
	meta.CreatedAt = time.Now().UTC()
	meta.MemoryBytes = diskUsage(filepath.Join(tmp, "ram"))
	meta.DiskBytes = fileSize(filepath.Join(tmp, "disk.qcow2"))
	if err := writeJSON(filepath.Join(tmp, "template.json"), meta); err != nil {
		return err
	}
	os.RemoveAll(final)
	return os.Rename(tmp, final)
}

// machineFor fills a command line for a VM from its template facts.
func (b *Backend) machineFor(t tplMeta, name, dir, run, disk string) machine {
	m := machine{
		Name:      name,
		Machine:   t.Image.Machine,
		Accel:     t.Accel,
		CPUs:      t.CPUs,
		MemoryMB:  t.MemoryMB,
		Kernel:    t.Image.Kernel,
		Initrd:    t.Image.Initrd,
		Append:    t.Image.Append,
		Disk:      disk,
		QMPSocket: filepath.Join(run, "qmp.sock"),
		QGASocket: filepath.Join(run, "qga.sock"),
		VNCSocket: filepath.Join(run, "vnc.sock"),
		PIDFile:   filepath.Join(dir, "pid"),
		SerialLog: filepath.Join(dir, "serial.log"),
		TBSizeMB:  64,
	}
	if t.Network {
		m.NetSocket, m.Network = filepath.Join(run, netSocketName), t.Image.Network
	}
	return m
}

// runDirFor is the socket directory of a VM directory: short, and unique
// per directory.
func (b *Backend) runDirFor(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(b.cfg.RunDir, hex.EncodeToString(sum[:6]))
}

// overlay creates a qcow2 overlay backed by base.
func (b *Backend) overlay(ctx context.Context, base, path string) error {
	cmd := exec.CommandContext(ctx, b.cfg.QEMUImg, "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, path)
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("qemu-img create %s: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// migrationCaps are the capabilities of every migration hvkube runs:
// x-ignore-shared (see migrateToFile) and events, so that the end of a
// migration is heard at once instead of at the next poll.
var migrationCaps = map[string]bool{"x-ignore-shared": true, "events": true}

// migrateToFile migrates the stopped VM's state into path (atomically: a
// partial file never has the final name). x-ignore-shared leaves RAM that is
// mapped shared out of the stream: a template's RAM file.
func migrateToFile(ctx context.Context, mon *qmp.Monitor, path string) error {
	return migrateToFileWith(ctx, mon, path, migrationCaps)
}

// migrateToFileWith is migrateToFile with the capabilities caps.
func migrateToFileWith(ctx context.Context, mon *qmp.Monitor, path string, caps map[string]bool) error {
	_, err := migrateToFileInfo(ctx, mon, path, caps)
	return err
}

// migrateToFileInfo is migrateToFileWith, and returns the completed
// migration's statistics. Started on a running VM, it is a live
// migration: the VM stops only at its end (its downtime), and stays
// stopped (postmigrate) until cont.
func migrateToFileInfo(ctx context.Context, mon *qmp.Monitor, path string, caps map[string]bool) (qmp.MigrationInfo, error) {
	tmp := path + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return qmp.MigrationInfo{}, err
	}
	defer os.Remove(tmp)
	err = mon.SendFD(ctx, "migfile", f)
	f.Close() // QEMU holds its own copy
	if err != nil {
		return qmp.MigrationInfo{}, err
	}
	info, err := migrateTo(ctx, mon, "fd:migfile", caps)
	if err != nil {
		return info, err
	}
	return info, os.Rename(tmp, path)
}

// migrateTo migrates the VM of mon to uri with the capabilities caps, as
// fast as the host goes, and returns the completed migration's
// statistics. Started on a running VM, it is a live migration: the VM
// stops only at its end (its downtime), and stays stopped (postmigrate)
// until cont.
func migrateTo(ctx context.Context, mon *qmp.Monitor, uri string, caps map[string]bool) (qmp.MigrationInfo, error) {
	if err := mon.MigrateSetCapabilities(ctx, caps); err != nil {
		return qmp.MigrationInfo{}, err
	}
	if err := mon.MigrateSetParameters(ctx, map[string]any{"max-bandwidth": int64(32) << 30}); err != nil {
		return qmp.MigrationInfo{}, err
	}
	if err := mon.Migrate(ctx, uri); err != nil {
		return qmp.MigrationInfo{}, err
	}
	info, err := mon.WaitMigration(ctx)
	if err != nil {
		return info, err
	}
	return info, leftFinishMigrate(ctx, mon)
}

// finalizeFor bounds the wait for a migrated VM to leave finish-migrate.
const finalizeFor = 10 * time.Second

// leftFinishMigrate waits until mon's VM has left finish-migrate. QEMU
// reports a migration completed a moment before its VM moves on to
// postmigrate, and a cont in between is refused ("Migration is not
// finalized yet").
func leftFinishMigrate(ctx context.Context, mon *qmp.Monitor) error {
	ctx, cancel := context.WithTimeout(ctx, finalizeFor)
	defer cancel()
	for {
		st, err := mon.Status(ctx)
		if err != nil {
			return fmt.Errorf("after the migration: %w", err)
		}
		if st.Status != qmp.StateFinishMigrate {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the VM is still in finish-migrate %s after its migration completed: %w", finalizeFor, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// migrateFromFile loads a state file into a QEMU started with -incoming
// defer and waits until it is loaded (the VM is then paused). Every state
// hvkube writes has x-ignore-shared on (it skips only RAM mapped shared, so
// a clone's saved state still holds all of its RAM), and loading needs the
// same capabilities as saving.
func migrateFromFile(ctx context.Context, mon *qmp.Monitor, path string) error {
	return migrateFromFileWith(ctx, mon, path, migrationCaps)
}

// migrateFromFileWith is migrateFromFile with the capabilities caps.
func migrateFromFileWith(ctx context.Context, mon *qmp.Monitor, path string, caps map[string]bool) error {
	if err := mon.MigrateSetCapabilities(ctx, caps); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = mon.SendFD(ctx, "migfile", f)
	f.Close()
	if err != nil {
		return err
	}
	if err := mon.MigrateIncoming(ctx, "fd:migfile"); err != nil {
		return err
	}
	return waitLoaded(ctx, mon)
}

// waitLoaded waits until the incoming migration of a QEMU started with
// -incoming defer has loaded (the VM is then paused).
func waitLoaded(ctx context.Context, mon *qmp.Monitor) error {
	if _, err := mon.WaitMigration(ctx); err != nil {
		return err
	}
	// The migration reports completed a moment before the run state leaves
	// inmigrate.
	for {
		st, err := mon.Status(ctx)
		if err != nil {
			return err
		}
		if st.Status != qmp.StateInMigrate {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// ---- helpers ----

func checkID(id string) error {
	if err := api.ValidateName("id", id); err != nil {
		return err
	}
	return nil
}

// writeJSON writes v to path as JSON, whole and on disk (atomicfile): a
// crash leaves the old file or the new one, never an empty one.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b, 0o600)
}

// readJSON decodes a file that writeJSON wrote. An empty or cut-short file
// (left by a crash under a server that did not sync its writes) is an
// error that says so, naming the file but not the directory.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	name := filepath.Base(path)
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%s is empty (a write cut short by a crash?)", name)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s is damaged or cut short (%d bytes: %v)", name, len(data), err)
	}
	return nil
}

// copySparse copies a file, leaving holes where src has blocks of zeros
// (most of a guest's RAM that it never touched).
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	var off int64
	for {
		n, rerr := io.ReadFull(in, buf)
		for c := 0; c < n; c += len(zeroChunk) {
			chunk := buf[c:min(n, c+len(zeroChunk))]
			if !allZero(chunk) {
				if _, err := out.WriteAt(chunk, off+int64(c)); err != nil {
					out.Close()
					return err
				}
			}
		}
		off += int64(n)
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			out.Close()
			return rerr
		}
	}
	if err := out.Truncate(fi.Size()); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroChunk))
		if !bytes.Equal(b[:n], zeroChunk[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// zeroChunk is what allZero compares with: bytes.Equal is the runtime's
// vectorised compare, many times faster than a loop over words.
var zeroChunk = make([]byte, 64<<10)

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

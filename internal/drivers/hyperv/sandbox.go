package hyperv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/guest"
	"github.com/hvkube/hvkube/internal/powershell"
)

// notes is the JSON a sandbox's VM keeps in its Notes: what List needs to
// report the sandbox after a restart of the server.
type notes struct {
	HVKube     int    `json:"hvkube"`
	UID        string `json:"uid,omitempty"`
	Template   string `json:"template"`
	Hostname   string `json:"hostname,omitempty"`
	Resolution string `json:"resolution,omitempty"`
	OS         string `json:"os,omitempty"`
	GPU        bool   `json:"gpu,omitempty"`
	// Ready is set when Create has finished; a VM without it is what an
	// interrupted Create left.
	Ready bool `json:"ready,omitempty"`
}

func (n notes) json() string {
	data, _ := json.Marshal(n)
	return string(data)
}

// parseNotes reads a VM's notes; ok is false for VMs hvkube did not make.
func parseNotes(s string) (n notes, ok bool) {
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &n); err != nil || n.HVKube != 1 {
		return notes{}, false
	}
	return n, true
}

// vmRecord is what scriptGetVMs reports of a VM.
type vmRecord struct {
	Name           string
	Id             string
	State          string
	Notes          string
	MemoryStartup  int64
	ProcessorCount int
	CreationTime   string
	Path           string
	WorkerPid      int
}

// vmStatus is what scriptVMStatus reports.
type vmStatus struct {
	Name        string
	State       string
	Heartbeat   string
	HeartbeatOK bool
	IPAddresses []string
}

// sbMeta is what the backend remembers of a sandbox between calls: facts
// that do not change after Create.
type sbMeta struct {
	resolution string
	os         string
}

func vmName(id string) string { return sandboxPrefix + id }

// sandboxID is the sandbox ID of a VM name, if it names one.
func sandboxID(name string) (string, bool) {
	if !strings.HasPrefix(name, sandboxPrefix) || strings.HasPrefix(name, templatePrefix) {
		return "", false
	}
	id := strings.TrimPrefix(name, sandboxPrefix)
	return id, api.ValidateName("id", id) == nil
}

// checkID checks a sandbox ID: a DNS label that does not make a template's
// VM name.
func checkID(id string) error {
	if err := api.ValidateName("id", id); err != nil {
		return err
	}
	if strings.HasPrefix(sandboxPrefix+id, templatePrefix) {
		return api.Invalid("id", "%q: names that begin with tpl- are kept for templates' VMs", id)
	}
	return nil
}

func (b *Backend) sbDir(id string) string { return filepath.Join(b.cfg.Dir, "sandboxes", id) }

// mapState maps a Hyper-V VM state onto a sandbox's. Off is Stopped; so are
// the states between (Starting, Saving, ...) and the critical ones, which
// are logged.
func (b *Backend) mapState(id, hv string) string {
	switch hv {
	case "Running":
		return backend.StateRunning
	case "Paused":
		return backend.StatePaused
	case "Saved":
		return backend.StateSaved
	case "Off":
		return backend.StateStopped
	}
	b.log.Warn("sandbox VM in a state hvkube does not use; reported as Stopped", "sandbox", id, "state", hv)
	return backend.StateStopped
}

// getVM finds a sandbox's VM, or fails with api.ErrNotFound.
func (b *Backend) getVM(ctx context.Context, id string) (vmRecord, error) {
	var recs []vmRecord
	if err := b.run(ctx, scriptGetVMs, powershell.Args{"Name": vmName(id)}, &recs); err != nil {
		return vmRecord{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	var found []vmRecord
	for _, r := range recs {
		if strings.EqualFold(r.Name, vmName(id)) {
			found = append(found, r)
		}
	}
	if len(found) == 0 {
		return vmRecord{}, fmt.Errorf("sandbox %q %w", id, api.ErrNotFound)
	}
	if len(found) > 1 {
		b.log.Warn("several VMs have the sandbox's name; using the first", "sandbox", id, "vms", len(found))
	}
	return found[0], nil
}

// status reads a sandbox VM's state, heartbeat and addresses.
func (b *Backend) status(ctx context.Context, id string) (vmStatus, error) {
	var st vmStatus
	if err := b.run(ctx, scriptVMStatus, powershell.Args{"Name": vmName(id)}, &st); err != nil {
		return st, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if st.State == "" {
		return st, fmt.Errorf("sandbox %q %w", id, api.ErrNotFound)
	}
	return st, nil
}

// info turns a VM's record into a sandbox's Info.
func (b *Backend) info(id string, r vmRecord, n notes) backend.Info {
	state := b.mapState(id, r.State)
	if !n.Ready {
		b.mu.Lock()
		_, building := b.building[id]
		b.mu.Unlock()
		if !building {
			// An interrupted Create: unusable until Create runs again.
			state = backend.StateStopped
		}
	}
	info := backend.Info{
		ID: id, UID: n.UID, TemplateID: n.Template, State: state,
		Display:    "vmconnect:localhost/" + r.Name,
		Resolution: n.Resolution,
		MemoryMB:   int(r.MemoryStartup >> 20),
	}
	if state == backend.StateRunning || state == backend.StatePaused {
		info.PID = r.WorkerPid
	}
	if t, err := time.Parse(time.RFC3339Nano, r.CreationTime); err == nil {
		info.CreatedAt = t.UTC()
	}
	b.mu.Lock()
	b.meta[id] = sbMeta{resolution: n.Resolution, os: n.OS}
	b.mu.Unlock()
	return info
}

// Inspect implements backend.Backend. Info.Display is
// "vmconnect:localhost/VMNAME", what vmconnect.exe takes to show the
// sandbox's console; the backend serves no VNC. PID is the VM's worker
// process (vmwp.exe), 0 when the VM is not running or paused.
func (b *Backend) Inspect(ctx context.Context, id string) (backend.Info, error) {
	if err := checkID(id); err != nil {
		return backend.Info{}, err
	}
	r, err := b.getVM(ctx, id)
	if err != nil {
		return backend.Info{}, err
	}
	n, ok := parseNotes(r.Notes)
	if !ok {
		return backend.Info{}, fmt.Errorf("VM %s was not made by hvkube (its notes say nothing of a sandbox): %w", r.Name, api.ErrNotFound)
	}
	return b.info(id, r, n), nil
}

// List implements backend.Backend: every VM named hvkube-ID whose notes
// name a sandbox, made by this server or before its restart.
func (b *Backend) List(ctx context.Context) ([]backend.Info, error) {
	var recs []vmRecord
	if err := b.run(ctx, scriptGetVMs, powershell.Args{"Name": ""}, &recs); err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	out := []backend.Info{}
	for _, r := range recs {
		id, ok := sandboxID(r.Name)
		if !ok {
			continue
		}
		n, ok := parseNotes(r.Notes)
		if !ok {
			b.log.Warn("ignoring a VM with hvkube's name prefix but no sandbox notes", "vm", r.Name)
			continue
		}
		out = append(out, b.info(id, r, n))
	}
	return out, nil
}

// sandboxMeta returns the facts of a sandbox that do not change, from
// memory or from its VM.
func (b *Backend) sandboxMeta(ctx context.Context, id string) (sbMeta, error) {
	b.mu.Lock()
	m, ok := b.meta[id]
	b.mu.Unlock()
	if ok {
		return m, nil
	}
	if _, err := b.Inspect(ctx, id); err != nil {
		return sbMeta{}, err
	}
	b.mu.Lock()
	m = b.meta[id]
	b.mu.Unlock()
	return m, nil
}

// guestOS is the guest OS of a sandbox.
func (b *Backend) guestOS(ctx context.Context, id string) (guest.OS, error) {
	m, err := b.sandboxMeta(ctx, id)
	if err != nil {
		return nil, err
	}
	name := m.os
	if name == "" {
		name = guest.Windows
	}
	return b.osFor(name)
}

// Create implements backend.Backend. Hyper-V cannot clone a running VM's
// memory, so every sandbox boots once: a differencing disk over the
// template's, a new VM (memory, processors, resolution, and a GPU partition
// if the template asks for one), a cold boot until the guest answers (an
// address, Remote Desktop's port, the heartbeat, the guest OS's own
// readiness), its identity, the clean checkpoint, and a pause. What a
// failed Create made is removed. An existing ID is returned as it is; the
// remains of an interrupted Create are removed and made again.
func (b *Backend) Create(ctx context.Context, spec backend.SandboxSpec) (backend.Info, error) {
	if err := checkID(spec.ID); err != nil {
		return backend.Info{}, err
	}
	id := spec.ID
	unlock := b.lock("sandbox/" + id)
	defer unlock()
	if r, err := b.getVM(ctx, id); err == nil {
		n, ok := parseNotes(r.Notes)
		if !ok {
			return backend.Info{}, fmt.Errorf("create %s: a VM named %s exists that hvkube did not make: %w", id, r.Name, api.ErrConflict)
		}
		if n.Ready {
			return b.info(id, r, n), nil
		}
		b.log.Warn("removing the remains of an interrupted create", "sandbox", id)
		if err := b.destroy(ctx, id); err != nil {
			return backend.Info{}, err
		}
	} else if !errors.Is(err, api.ErrNotFound) {
		return backend.Info{}, err
	}
	tpl, err := b.loadTemplate(spec.TemplateID)
	if err != nil {
		return backend.Info{}, err
	}
	osys, err := b.osFor(tpl.GuestOS)
	if err != nil {
		return backend.Info{}, err
	}
	mem := tpl.MemoryMB
	if spec.MemoryMB > 0 {
		mem = spec.MemoryMB
	}
	mem += mem % 2 // Hyper-V gives memory in 2 MB units
	cpus := tpl.CPUs
	if spec.CPU > 0 {
		cpus = spec.CPU
	}
	res := tpl.Resolution
	if spec.Resolution != "" {
		res = spec.Resolution
	}
	w, h, err := api.ParseResolution(res)
	if err != nil {
		return backend.Info{}, api.Invalid("resolution", "%v", err)
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = id
	}
	if err := b.reserve(ctx, id, mem); err != nil {
		return backend.Info{}, err
	}
	defer b.release(id)
	if tpl.GPU {
		if err := b.checkGPU(ctx); err != nil {
			return backend.Info{}, err
		}
	}

	dir := b.sbDir(id)
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return backend.Info{}, err
	}
	ok := false
	defer func() {
		if !ok {
			// Cleaning up must not stop with the request that failed.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
			defer cancel()
			if err := b.destroy(cctx, id); err != nil {
				b.log.Warn("cleaning up after a failed create", "sandbox", id, "err", err)
			}
		}
	}()
	n := notes{HVKube: 1, UID: spec.UID, Template: tpl.ID, Hostname: hostname, Resolution: fmt.Sprintf("%dx%d", w, h), OS: tpl.GuestOS, GPU: tpl.GPU}
	name := vmName(id)
	disk := filepath.Join(dir, "disk.vhdx")
	if err := b.run(ctx, scriptNewDifferencingVHD, powershell.Args{"Path": disk, "ParentPath": b.tplDisk(tpl.ID)}, nil); err != nil {
		return backend.Info{}, fmt.Errorf("create %s: disk: %w", id, err)
	}
	var created struct{ Id string }
	err = b.run(ctx, scriptNewVM, powershell.Args{
		"Name": name, "Path": dir, "VHDPath": disk, "Switch": b.cfg.Switch,
		"MemoryBytes": int64(mem) << 20, "MinimumMemoryBytes": int64(min(mem, 512)) << 20,
		"ProcessorCount": cpus, "Notes": n.json(), "Width": w, "Height": h,
	}, &created)
	if err != nil {
		return backend.Info{}, fmt.Errorf("create %s: new VM: %w", id, err)
	}
	if err := b.run(ctx, scriptEnhancedSession, powershell.Args{"Name": name}, nil); err != nil {
		// Older hosts lack the setting; vmconnect then uses a basic session.
		b.log.Info("enhanced session transport not set", "sandbox", id, "err", err)
	}
	if tpl.GPU {
		if err := b.run(ctx, scriptAddGPU, powershell.Args{"Name": name}, nil); err != nil {
			return backend.Info{}, fmt.Errorf("create %s: GPU partition: %w", id, err)
		}
	}
	b.log.Debug("sandbox VM made", "sandbox", id, "vm", created.Id)
	start := time.Now()
	if err := b.bootLocked(ctx, id, osys, hostname, tpl.GPU); err != nil {
		return backend.Info{}, fmt.Errorf("create %s: %w", id, err)
	}
	n.Ready = true
	if err := b.run(ctx, scriptSetNotes, powershell.Args{"Name": name, "Notes": n.json()}, nil); err != nil {
		return backend.Info{}, fmt.Errorf("create %s: %w", id, err)
	}
	r, err := b.getVM(ctx, id)
	if err != nil {
		return backend.Info{}, err
	}
	ok = true
	b.log.Info("sandbox created", "sandbox", id, "template", tpl.ID, "boot", time.Since(start).Round(time.Millisecond))
	return b.info(id, r, n), nil
}

// bootLocked cold-boots a sandbox's VM until its guest is ready, gives it
// its identity, takes the clean checkpoint (not for GPU sandboxes: Hyper-V
// checkpoints no VM with a GPU partition) and pauses it.
func (b *Backend) bootLocked(ctx context.Context, id string, osys guest.OS, hostname string, gpu bool) error {
	name := vmName(id)
	if err := b.run(ctx, scriptStartVM, powershell.Args{"Name": name}, nil); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	bctx, cancel := context.WithTimeout(ctx, b.cfg.BootTimeout)
	defer cancel()
	if err := b.waitReady(bctx, id, osys); err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	if err := osys.Identity(bctx, b.runner(id), hostname); err != nil {
		return fmt.Errorf("guest identity: %w", err)
	}
	if !gpu {
		if err := b.run(ctx, scriptCheckpointVM, powershell.Args{"Name": name, "Checkpoint": cleanCheckpoint}, nil); err != nil {
			return fmt.Errorf("clean checkpoint: %w", err)
		}
	}
	if err := b.run(ctx, scriptSuspendVM, powershell.Args{"Name": name}, nil); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	return nil
}

// waitReady waits until a booting VM's guest answers: it has an IPv4
// address, Remote Desktop's port accepts connections (unless RDPPort is
// negative), the heartbeat is OK, and the guest OS says its desktop is up.
// It gives up when the VM stops or ctx ends.
func (b *Backend) waitReady(ctx context.Context, id string, osys guest.OS) error {
	var last error
	for {
		last = b.readyOnce(ctx, id, osys)
		if last == nil {
			return nil
		}
		if errors.Is(last, errVMStopped) || errors.Is(last, api.ErrNotFound) {
			return last
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(b.cfg.PollInterval):
		}
	}
}

var errVMStopped = errors.New("the VM stopped")

// readyOnce checks once what waitReady waits for.
func (b *Backend) readyOnce(ctx context.Context, id string, osys guest.OS) error {
	st, err := b.status(ctx, id)
	if err != nil {
		return err
	}
	if st.State != "Running" {
		if st.State == "Off" {
			return fmt.Errorf("%w while booting", errVMStopped)
		}
		return fmt.Errorf("the VM is %s", st.State)
	}
	ip := firstIPv4(st.IPAddresses)
	if ip == "" {
		return errors.New("no IPv4 address yet")
	}
	if b.cfg.RDPPort > 0 {
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := b.dial(dctx, net.JoinHostPort(ip, strconv.Itoa(b.cfg.RDPPort)))
		cancel()
		if err != nil {
			return fmt.Errorf("port %d at %s: %w", b.cfg.RDPPort, ip, err)
		}
	}
	if !st.HeartbeatOK {
		return fmt.Errorf("heartbeat %q", st.Heartbeat)
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := osys.Ready(gctx, b.runner(id)); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	return nil
}

// firstIPv4 is the first IPv4 address that is not link-local.
func firstIPv4(addrs []string) string {
	for _, a := range addrs {
		ip := net.ParseIP(strings.TrimSpace(a))
		if ip == nil || ip.To4() == nil || ip.IsLinkLocalUnicast() || ip.IsUnspecified() {
			continue
		}
		return ip.String()
	}
	return ""
}

// waitHeartbeat waits until a running VM's heartbeat is OK.
func (b *Backend) waitHeartbeat(ctx context.Context, id string) (vmStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ResumeTimeout)
	defer cancel()
	for {
		st, err := b.status(ctx, id)
		if err != nil {
			return st, err
		}
		if st.State != "Running" {
			return st, fmt.Errorf("sandbox %s is %s: %w", id, st.State, api.ErrConflict)
		}
		if st.HeartbeatOK {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("sandbox %s: the guest's heartbeat is %q: %w", id, st.Heartbeat, ctx.Err())
		case <-time.After(b.cfg.PollInterval):
		}
	}
}

// checkGPU refuses when the host has no GPU to partition.
func (b *Backend) checkGPU(ctx context.Context) error {
	var g struct {
		Supported bool
		Names     []string
	}
	if err := b.run(ctx, scriptHostGPU, nil, &g); err != nil {
		return fmt.Errorf("GPU partitions: %w", err)
	}
	switch {
	case !g.Supported:
		return fmt.Errorf("the template asks for a GPU, and this host's Hyper-V cannot partition GPUs (no Get-VMHostPartitionableGpu): %w", api.ErrUnavailable)
	case len(g.Names) == 0:
		return fmt.Errorf("the template asks for a GPU, and this host has no partitionable GPU (Get-VMHostPartitionableGpu lists none): %w", api.ErrUnavailable)
	}
	return nil
}

// lockedVM locks a sandbox and reads its VM.
func (b *Backend) lockedVM(ctx context.Context, id string) (vmRecord, notes, func(), error) {
	if err := checkID(id); err != nil {
		return vmRecord{}, notes{}, nil, err
	}
	unlock := b.lock("sandbox/" + id)
	r, err := b.getVM(ctx, id)
	if err != nil {
		unlock()
		return vmRecord{}, notes{}, nil, err
	}
	n, ok := parseNotes(r.Notes)
	if !ok {
		unlock()
		return vmRecord{}, notes{}, nil, fmt.Errorf("VM %s was not made by hvkube: %w", r.Name, api.ErrNotFound)
	}
	return r, n, unlock, nil
}

// conflict says why a sandbox in Hyper-V state hv cannot do what was asked.
func conflict(id, hv, op string) error {
	switch hv {
	case "Off":
		return fmt.Errorf("%s %s: the sandbox is stopped: reset it to start it again: %w", op, id, api.ErrConflict)
	case "Saved":
		return fmt.Errorf("%s %s: the sandbox is saved to disk: restore or resume it first: %w", op, id, api.ErrConflict)
	}
	return fmt.Errorf("%s %s: the sandbox's VM is %s: %w", op, id, hv, api.ErrConflict)
}

// Pause implements backend.Backend (Suspend-VM).
func (b *Backend) Pause(ctx context.Context, id string) error {
	r, _, unlock, err := b.lockedVM(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	switch r.State {
	case "Paused":
		return nil
	case "Running":
		return b.run(ctx, scriptSuspendVM, powershell.Args{"Name": r.Name}, nil)
	}
	return conflict(id, r.State, "pause")
}

// Resume implements backend.Backend: Resume-VM for a Paused sandbox,
// Start-VM for a Saved one (Hyper-V restores its saved state). It returns
// when the guest's heartbeat is OK, and sets the guest's clock in the
// background (through PowerShell Direct, which takes seconds); guest calls
// made meanwhile simply run beside it.
func (b *Backend) Resume(ctx context.Context, id string) error {
	r, n, unlock, err := b.lockedVM(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	switch r.State {
	case "Running":
		return nil
	case "Paused":
		err = b.run(ctx, scriptResumeVM, powershell.Args{"Name": r.Name}, nil)
	case "Saved":
		err = b.run(ctx, scriptStartVM, powershell.Args{"Name": r.Name}, nil)
	default:
		return conflict(id, r.State, "resume")
	}
	if err != nil {
		return fmt.Errorf("resume %s: %w", id, err)
	}
	st, err := b.waitHeartbeat(ctx, id)
	if err != nil {
		return fmt.Errorf("resume %s: %w", id, err)
	}
	b.log.Debug("sandbox resumed", "sandbox", id, "from", r.State, "ip", firstIPv4(st.IPAddresses))
	osys, err := b.osFor(orWindows(n.OS))
	if err != nil {
		return err
	}
	b.setClockLater(id, osys)
	return nil
}

func orWindows(name string) string {
	if name == "" {
		return guest.Windows
	}
	return name
}

// setClockLater sets the guest's clock in the background: its clock stood
// still while it was paused or saved.
func (b *Backend) setClockLater(id string, osys guest.OS) {
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		ctx, cancel := context.WithTimeout(b.bgCtx, 2*time.Minute)
		defer cancel()
		if err := osys.SetClock(ctx, b.runner(id), time.Now()); err != nil {
			// Paused or saved again before it was done: the next resume
			// sets it.
			b.log.Debug("set the guest clock after resume", "sandbox", id, "err", err)
		}
	}()
}

// Save implements backend.Backend (Save-VM, from Running or Paused).
func (b *Backend) Save(ctx context.Context, id string) error {
	r, n, unlock, err := b.lockedVM(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	switch r.State {
	case "Saved":
		return nil
	case "Running", "Paused":
		if n.GPU {
			return fmt.Errorf("save %s: Hyper-V cannot save a VM with a GPU partition: %w", id, api.ErrUnsupported)
		}
		if err := b.run(ctx, scriptSaveVM, powershell.Args{"Name": r.Name}, nil); err != nil {
			return fmt.Errorf("save %s: %w", id, err)
		}
		return nil
	}
	return conflict(id, r.State, "save")
}

// Restore implements backend.Backend: Start-VM brings the saved state back
// and Suspend-VM pauses it at once, so a restored sandbox is Paused.
func (b *Backend) Restore(ctx context.Context, id string) error {
	r, _, unlock, err := b.lockedVM(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	switch r.State {
	case "Running", "Paused":
		return nil
	case "Saved":
		if err := b.run(ctx, scriptStartPaused, powershell.Args{"Name": r.Name}, nil); err != nil {
			return fmt.Errorf("restore %s: %w", id, err)
		}
		return nil
	}
	return conflict(id, r.State, "restore")
}

// Reset implements backend.Backend: the clean checkpoint is applied (the VM
// is turned off first if it runs; a checkpoint with memory leaves it Saved)
// and the VM is brought back Paused. A GPU sandbox has no checkpoint: its
// disk is made anew and it boots again.
func (b *Backend) Reset(ctx context.Context, id string) error {
	r, n, unlock, err := b.lockedVM(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	if n.GPU {
		return b.rebootLocked(ctx, id, r, n)
	}
	if err := b.run(ctx, scriptRestoreCheckpoint, powershell.Args{"Name": r.Name, "Checkpoint": cleanCheckpoint}, nil); err != nil {
		return fmt.Errorf("reset %s: %w", id, err)
	}
	if err := b.run(ctx, scriptStartPaused, powershell.Args{"Name": r.Name}, nil); err != nil {
		return fmt.Errorf("reset %s: %w", id, err)
	}
	return nil
}

// rebootLocked resets a sandbox that has no checkpoint: it turns it off,
// replaces its disk with an empty differencing disk over its template's,
// and boots it as Create did.
func (b *Backend) rebootLocked(ctx context.Context, id string, r vmRecord, n notes) error {
	if err := b.stopLocked(ctx, r); err != nil {
		return fmt.Errorf("reset %s: %w", id, err)
	}
	disk := filepath.Join(b.sbDir(id), "disk.vhdx")
	if err := os.Remove(disk); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reset %s: %w", id, err)
	}
	if err := b.run(ctx, scriptNewDifferencingVHD, powershell.Args{"Path": disk, "ParentPath": b.tplDisk(n.Template)}, nil); err != nil {
		return fmt.Errorf("reset %s: disk: %w", id, err)
	}
	osys, err := b.osFor(orWindows(n.OS))
	if err != nil {
		return err
	}
	hostname := n.Hostname
	if hostname == "" {
		hostname = id
	}
	if err := b.bootLocked(ctx, id, osys, hostname, true); err != nil {
		return fmt.Errorf("reset %s: %w", id, err)
	}
	return nil
}

// Stop implements backend.Backend: Stop-VM -TurnOff for a running or
// paused sandbox, Remove-VMSavedState for a saved one.
func (b *Backend) Stop(ctx context.Context, id string) error {
	r, _, unlock, err := b.lockedVM(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	if err := b.stopLocked(ctx, r); err != nil {
		return fmt.Errorf("stop %s: %w", id, err)
	}
	return nil
}

func (b *Backend) stopLocked(ctx context.Context, r vmRecord) error {
	switch r.State {
	case "Off":
		return nil
	case "Saved":
		return b.run(ctx, scriptRemoveSavedState, powershell.Args{"Name": r.Name}, nil)
	}
	return b.run(ctx, scriptStopVM, powershell.Args{"Name": r.Name}, nil)
}

// Delete implements backend.Backend: the VM is turned off and removed, and
// the sandbox's folder (its disk, its checkpoints' disks, its saved state)
// deleted. Deleting a missing sandbox is not an error.
func (b *Backend) Delete(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	unlock := b.lock("sandbox/" + id)
	defer unlock()
	return b.destroy(ctx, id)
}

// destroy removes a sandbox's VM and folder.
func (b *Backend) destroy(ctx context.Context, id string) error {
	if err := b.run(ctx, scriptRemoveVM, powershell.Args{"Name": vmName(id)}, nil); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	b.mu.Lock()
	delete(b.meta, id)
	b.mu.Unlock()
	// Hyper-V lets go of a removed VM's files a moment later (and merges
	// its checkpoints' disks first): the folder is retried for a while.
	dir := b.sbDir(id)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := removeAllWritable(dir)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("delete %s: remove its folder: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("delete %s: remove its folder: %w (last: %v)", id, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Ready implements backend.Backend: the VM runs, its heartbeat is OK and
// the guest OS says its desktop is up.
func (b *Backend) Ready(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	st, err := b.status(ctx, id)
	if err != nil {
		return err
	}
	if st.State != "Running" {
		return conflict(id, st.State, "ready")
	}
	if !st.HeartbeatOK {
		return fmt.Errorf("sandbox %s: the guest's heartbeat is %q", id, st.Heartbeat)
	}
	osys, err := b.guestOS(ctx, id)
	if err != nil {
		return err
	}
	return osys.Ready(ctx, b.runner(id))
}

// Alive implements backend.Backend: the VM runs and its heartbeat is OK.
func (b *Backend) Alive(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	st, err := b.status(ctx, id)
	if err != nil {
		return err
	}
	if st.State != "Running" {
		return conflict(id, st.State, "alive")
	}
	if !st.HeartbeatOK {
		return fmt.Errorf("sandbox %s: the guest's heartbeat is %q", id, st.Heartbeat)
	}
	return nil
}

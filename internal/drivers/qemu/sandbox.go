package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qga"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
)

// vmMeta is a sandbox's vm.json: what the backend needs to find, adopt and
// restart it.
type vmMeta struct {
	ID         string    `json:"id"`
	UID        string    `json:"uid,omitempty"`
	TemplateID string    `json:"templateID"`
	Name       string    `json:"name"` // QEMU -name, how its process is recognised
	Hostname   string    `json:"hostname"`
	Resolution string    `json:"resolution"`
	MemoryMB   int       `json:"memoryMB"`
	RunDir     string    `json:"runDir"`
	CreatedAt  time.Time `json:"createdAt"`
	PID        int       `json:"pid,omitempty"`
	// ColdBoot is set when the clone path failed and the sandbox booted.
	ColdBoot bool `json:"coldBoot,omitempty"`
	// Saved: saved.state holds the sandbox and no process runs.
	Saved bool `json:"saved,omitempty"`
	// Stopped: stopped on purpose.
	Stopped bool `json:"stopped,omitempty"`
	// Pending is what of the clone's identity its guest does not have yet
	// (pendingHostname, pendingIdentity): its first resume writes it.
	Pending string `json:"pending,omitempty"`
	// Network is the sandbox's network spec (nil in a record from before
	// guest networks: nat); adoption gives the guest its policy from it.
	Network *api.Network `json:"network,omitempty"`
	// Denied and LastDenied are its egress denials so far, as of the
	// record (the count goes on from them after a restart).
	Denied     int64              `json:"denied,omitempty"`
	LastDenied *api.NetworkDenial `json:"lastDenied,omitempty"`
	// CheckpointAt is when checkpoint.state and checkpoint.qcow2 were
	// written (checkpoint.go); nil without a checkpoint.
	CheckpointAt *time.Time `json:"checkpointAt,omitempty"`
}

// sandboxNamePrefix starts the -name of the QEMU a sandbox started for
// itself; the rest is the sandbox id and a nonce. A sandbox that took a
// spare runs the spare's QEMU, named as a spare (spareNamePrefix): a
// process's name is fixed when it starts. Its PID (Info.PID, vm.json, the
// pid file in its directory) is what ties a sandbox to its QEMU.
const sandboxNamePrefix = "hvkube-sandbox:"

// clonePrefix is the name prefix pid runs under if it is the QEMU of a
// sandbox or of a spare, else "". (Sandboxes made before spares had a name
// of their own run as "hvkube-sandbox:+TEMPLATE:NONCE", which the first
// prefix covers.)
func clonePrefix(pid int) string {
	for _, prefix := range []string{sandboxNamePrefix, spareNamePrefix} {
		if processAlive(pid, prefix) {
			return prefix
		}
	}
	return ""
}

// killClone kills pid if it is the QEMU of a sandbox or of a spare.
func killClone(pid int) {
	if prefix := clonePrefix(pid); prefix != "" {
		killProcess(pid, prefix, 10*time.Second)
	}
}

// vm is one sandbox.
type vm struct {
	mu   sync.RWMutex // held for writing by lifecycle calls
	id   string
	dir  string
	meta vmMeta
	tpl  tplMeta
	p    *proc // nil when no process
	// live is p for readers that do not hold mu (the backend's memory
	// count, under Backend.mu).
	live     atomic.Pointer[proc]
	g        *guest     // nil when no process
	scr      sync.Mutex // one screendump at a time; guards lastShot and ppm
	lastShot *shot
	ppm      []byte // the last screendump, its memory reused
	kept     screen // the kept screen (keptscreen.go), made at the first screenshot
	gone     bool   // deleted
	// pausedAt is when the vCPUs last stopped; zero if unknown (a fresh
	// clone, a restore, an adopted VM).
	pausedAt time.Time
	// paused: the backend stopped the vCPUs itself and has not run them
	// since (so resume need not ask QEMU).
	paused bool
	// ioStopped: QEMU stopped the vCPUs on a failed disk write (see
	// ioerror.go) and no resume has run them since.
	ioStopped bool
	// answered: the guest of this process has answered a resume. Until
	// it has (a clone, a restore), its code runs for the first time in
	// this process, translated anew under emulation: slow on a busy host.
	answered bool
	// denials are what its guest networks refused (network.go).
	denials *denials
	// pace parts its key events from its pointer events (screen.go).
	pace pace
}

func (v *vm) hasProcess() bool { return v.p != nil && v.p.alive() }

// disconnect drops the backend's connections to v's QEMU and ends its
// guest network; the QEMU runs on.
func (v *vm) disconnect() {
	v.kept.close()
	if v.p != nil && v.p.mon != nil {
		v.p.mon.Close()
	}
	if v.p != nil {
		v.p.link.close()
	}
	if v.g != nil {
		v.g.ga.Close()
	}
}

func (v *vm) qmpSocket() string { return filepath.Join(v.meta.RunDir, "qmp.sock") }
func (v *vm) qgaSocket() string { return filepath.Join(v.meta.RunDir, "qga.sock") }
func (v *vm) vncSocket() string { return filepath.Join(v.meta.RunDir, "vnc.sock") }

func (b *Backend) sbDir(id string) string { return filepath.Join(b.cfg.Dir, "sandboxes", id) }

// lockVM returns the sandbox's entry with its lock held for writing,
// creating an empty entry if create is set.
func (b *Backend) lockVM(id string, create bool) (*vm, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	b.mu.Lock()
	v, ok := b.vms[id]
	if !ok {
		if !create {
			b.mu.Unlock()
			return nil, fmt.Errorf("sandbox %q %w", id, api.ErrNotFound)
		}
		v = &vm{id: id, dir: b.sbDir(id)}
		b.vms[id] = v
	}
	b.mu.Unlock()
	v.mu.Lock()
	if v.gone {
		v.mu.Unlock()
		return b.lockVM(id, create)
	}
	return v, nil
}

// rlockVM returns the sandbox's entry with its lock held for reading.
func (b *Backend) rlockVM(id string) (*vm, error) {
	b.mu.Lock()
	v, ok := b.vms[id]
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("sandbox %q %w", id, api.ErrNotFound)
	}
	v.mu.RLock()
	if v.gone {
		v.mu.RUnlock()
		return nil, fmt.Errorf("sandbox %q %w", id, api.ErrNotFound)
	}
	return v, nil
}

// rlockRunning is rlockVM for calls that need the VM's process: it fails
// (and unlocks) when there is none.
func (b *Backend) rlockRunning(id string) (*vm, error) {
	v, err := b.rlockVM(id)
	if err != nil {
		return nil, err
	}
	if err := v.needProcess(); err != nil {
		v.mu.RUnlock()
		return nil, err
	}
	return v, nil
}

// guestOf returns a running sandbox's guest, with no lock held: a call to
// a paused guest waits until it runs again, and must not hold up the
// pause, resume or delete meanwhile. If the VM goes away under the call,
// the call fails. A clone's guest is returned once its identity is
// written (identity.go).
func (b *Backend) guestOf(ctx context.Context, id string) (*guest, error) {
	v, err := b.rlockRunning(id)
	if err != nil {
		return nil, err
	}
	g := v.g
	v.mu.RUnlock()
	if err := g.gate.wait(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

func (b *Backend) forget(v *vm) {
	v.gone = true
	b.mu.Lock()
	if b.vms[v.id] == v {
		delete(b.vms, v.id)
	}
	b.mu.Unlock()
}

// save writes v's record, with its denials so far.
func (v *vm) save() error {
	if v.denials != nil {
		v.meta.Denied, v.meta.LastDenied = v.denials.get()
	}
	return writeJSON(filepath.Join(v.dir, "vm.json"), v.meta)
}

// Create implements backend.Backend.
func (b *Backend) Create(ctx context.Context, spec backend.SandboxSpec) (backend.Info, error) {
	steps := backend.StartSteps(ctx)
	v, err := b.lockVM(spec.ID, true)
	if err != nil {
		return backend.Info{}, err
	}
	defer v.mu.Unlock()
	if v.meta.ID != "" {
		return b.inspectLocked(ctx, v), nil
	}
	tpl, err := b.loadTemplate(spec.TemplateID)
	if err != nil {
		b.forget(v)
		return backend.Info{}, err
	}
	network := api.EffectiveNetwork(api.Network{}, spec.Network)
	if _, _, err := egressOf(network); err != nil {
		b.forget(v)
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	mem := tpl.MemoryMB
	if spec.MemoryMB != 0 && spec.MemoryMB != tpl.MemoryMB {
		b.forget(v)
		return backend.Info{}, api.Invalid("resources.memoryMB", "%d MB differs from template %s (%d MB): a clone has its template's memory", spec.MemoryMB, spec.TemplateID, tpl.MemoryMB)
	}
	if err := b.reserve(spec.ID, b.expectMB(tpl), tpl.ID, admitNew); err != nil {
		b.forget(v)
		return backend.Info{}, err
	}
	defer b.release(spec.ID)
	os.RemoveAll(v.dir) // a half-made sandbox from an interrupted Create
	if err := os.MkdirAll(v.dir, 0o700); err != nil {
		b.forget(v)
		return backend.Info{}, err
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	v.tpl = tpl
	v.denials = &denials{}
	v.meta = vmMeta{
		Network: &network,
		ID:      spec.ID, UID: spec.UID, TemplateID: spec.TemplateID,
		Name:       sandboxNamePrefix + spec.ID + ":" + strconv.FormatInt(time.Now().UnixNano(), 36),
		Hostname:   hostname,
		Resolution: tpl.Resolution,
		MemoryMB:   mem,
		RunDir:     b.runDirFor(v.dir),
		CreatedAt:  time.Now().UTC(),
	}
	steps.Mark("check, reserve memory, make the directory")
	if err := b.cloneLocked(ctx, v, steps); err != nil {
		b.log.Warn("clone failed; cold-booting", "sandbox", spec.ID, "err", err)
		if err := b.coldBootLocked(ctx, v); err != nil {
			b.destroyLocked(v)
			b.forget(v)
			return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
	}
	if spec.Resolution != "" && spec.Resolution != v.meta.Resolution {
		if err := b.resolutionLocked(ctx, v, spec.Resolution); err != nil {
			b.destroyLocked(v)
			b.forget(v)
			return backend.Info{}, err
		}
	}
	if err := v.save(); err != nil {
		b.destroyLocked(v)
		b.forget(v)
		return backend.Info{}, err
	}
	steps.Mark("record the sandbox")
	if p := v.p; p != nil && !v.meta.ColdBoot {
		if v.meta.Pending == pendingIdentity {
			b.measureCold(p.pid, tpl.ID, b.readiesAll())
			if b.readiesAll() {
				b.queueWarm(v.id) // measured again when readied
			}
		} else {
			b.book.ObserveClone(tpl.ID, b.measure(p.pid, tpl.ID, false))
		}
	}
	return b.inspectLocked(ctx, v), nil
}

// cloneLocked starts v from its template's snapshot; it ends paused, its
// identity pending (see identity.go). It takes one of the template's
// spares if there is one, else starts QEMU, and has spares made.
func (b *Backend) cloneLocked(ctx context.Context, v *vm, steps *backend.Stepper) error {
	v.meta.ColdBoot, v.meta.Saved, v.meta.Stopped = false, false, false
	sp := b.takeSpare(ctx, v.tpl)
	if sp != nil {
		if err := sp.moveTo(v.dir, v.meta.RunDir); err != nil {
			b.log.Warn("could not take the spare clone", "sandbox", v.id, "err", err)
			sp.discard()
			sp = nil
		}
	}
	b.refillSpares(v.tpl)
	if sp != nil {
		steps.Mark("take a spare")
		v.meta.Name = sp.p.name
		v.attachGuest(sp.p, sp.ga)
		v.meta.Pending = pendingHostname
		return nil
	}
	steps.Mark("no spare ready")
	start := time.Now()
	p, err := b.startFromSnapshot(ctx, v.tpl, v.meta.Name, v.dir, v.meta.RunDir, false)
	if err != nil {
		return err
	}
	b.noteStart(v.tpl, time.Since(start))
	steps.Mark("start QEMU, load device state")
	v.attach(p)
	v.meta.Pending = pendingIdentity
	return nil
}

// cloneOverlay puts an empty qcow2 overlay on the template's disk at path.
// Every clone's starts out the same, so one is made with qemu-img per
// template and copied for each clone (a copy is a fraction of a
// millisecond; qemu-img is a process start).
func (b *Backend) cloneOverlay(ctx context.Context, tplID, path string) error {
	blank := filepath.Join(b.tplDir(tplID), "clone-overlay.qcow2")
	if _, err := os.Stat(blank); err != nil {
		tmp := fmt.Sprintf("%s.%d.tmp", blank, time.Now().UnixNano())
		if err := b.overlay(ctx, filepath.Join(b.tplDir(tplID), "disk.qcow2"), tmp); err != nil {
			return err
		}
		if err := os.Rename(tmp, blank); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	data, err := os.ReadFile(blank)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// coldBootLocked boots v from its template's image on a fresh overlay and
// waits for the desktop; it ends paused. It is the fallback when the
// template snapshot cannot be loaded.
func (b *Backend) coldBootLocked(ctx context.Context, v *vm) error {
	if v.p != nil {
		v.p.kill()
		v.detach()
	}
	disk := filepath.Join(v.dir, "disk.qcow2")
	os.Remove(disk)
	if err := b.overlay(ctx, v.tpl.Image.Disk, disk); err != nil {
		return err
	}
	m := b.machineFor(v.tpl, v.meta.Name, v.dir, v.meta.RunDir, disk)
	p, err := b.launch(ctx, m, v.dir)
	if err != nil {
		return err
	}
	v.attach(p)
	v.paused = false // it boots
	bctx, watch, stopWatch := b.watchBoot(ctx, p.pid, v.tpl.CPUs, nil)
	defer stopWatch()
	if err := v.g.waitAgent(bctx, p); err != nil {
		return fmt.Errorf("cold boot: guest agent: %w%s", err, p.logTail())
	}
	watch.begin("the desktop to be ready")
	if err := v.g.waitReady(bctx, p); err != nil {
		return fmt.Errorf("cold boot: desktop: %w", err)
	}
	if v.tpl.Resolution != v.tpl.Image.Resolution {
		if err := v.g.os.SetResolution(bctx, v.g, v.tpl.Resolution); err != nil {
			return err
		}
	}
	if err := v.g.os.Identity(bctx, v.g, v.meta.Hostname); err != nil {
		return err
	}
	v.meta.ColdBoot, v.meta.Saved, v.meta.Stopped, v.meta.Pending = true, false, false, ""
	if err := p.mon.Stop(ctx); err != nil {
		return err
	}
	v.paused = true
	return nil
}

func (b *Backend) resolutionLocked(ctx context.Context, v *vm, res string) error {
	if err := v.p.mon.Cont(ctx); err != nil {
		return err
	}
	v.paused = false
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if v.meta.Pending != "" {
		if err := writeIdentity(rctx, v.g, v.meta.Pending, v.meta.Hostname); err != nil {
			return fmt.Errorf("guest identity: %w", err)
		}
		v.meta.Pending = ""
	}
	if err := v.g.os.SetResolution(rctx, v.g, res); err != nil {
		return err
	}
	v.meta.Resolution = res
	if err := v.p.mon.Stop(ctx); err != nil {
		return err
	}
	v.paused = true
	return nil
}

func (v *vm) attach(p *proc) { v.attachGuest(p, qga.New(v.qgaSocket())) }

// attachGuest makes p v's process and ga its guest agent's client, and
// gives p's guest network v's egress policy. Every process the backend
// starts for a sandbox is handed over paused.
func (v *vm) attachGuest(p *proc, ga *qga.Client) {
	v.p = p
	v.live.Store(p)
	v.g = newGuest(ga, v.tpl.Image)
	v.meta.PID = p.pid
	v.paused, v.ioStopped, v.answered = true, false, false
	v.connectLink()
}

func (v *vm) detach() {
	v.kept.close()
	if v.g != nil {
		v.g.ga.Close()
	}
	v.p, v.g = nil, nil
	v.live.Store(nil)
	v.meta.PID = 0
	v.paused, v.ioStopped = false, false
}

// Pause implements backend.Backend.
func (b *Backend) Pause(ctx context.Context, id string) error {
	v, err := b.lockVM(id, false)
	if err != nil {
		return err
	}
	defer v.mu.Unlock()
	if err := v.needProcess(); err != nil {
		return err
	}
	st, err := v.p.mon.Status(ctx)
	if err != nil {
		return err
	}
	switch st.Status {
	case qmp.StateRunning:
	case qmp.StateIOError:
		// QEMU stopped the vCPUs on a failed disk write; they stay
		// stopped, now on purpose too.
		v.pausedAt, v.paused, v.ioStopped = time.Now(), true, true
		return nil
	default:
		return nil
	}
	// A guest-agent request in flight (the clock being set) just waits
	// for the guest to run again. The connection is kept: the guest agent
	// notices a new one only every 100 ms, which would slow the resume.
	if err := v.p.mon.Stop(ctx); err != nil {
		return err
	}
	v.pausedAt, v.paused = time.Now(), true
	return nil
}

// Resume implements backend.Backend.
func (b *Backend) Resume(ctx context.Context, id string) error {
	v, err := b.lockVM(id, false)
	if err != nil {
		return err
	}
	defer v.mu.Unlock()
	return b.resumeLocked(ctx, v)
}

// resumeLocked is Resume; callers hold v.mu.
func (b *Backend) resumeLocked(ctx context.Context, v *vm) error {
	id := v.meta.ID
	if !v.hasProcess() && v.meta.Saved {
		if err := b.restoreLocked(ctx, v); err != nil {
			return err
		}
	}
	if err := v.needProcess(); err != nil {
		return err
	}
	steps := backend.StartSteps(ctx)
	if !v.paused {
		st, err := v.p.mon.Status(ctx)
		if err == nil && st.Status == qmp.StateRunning {
			return nil
		}
		if err == nil && st.Status == qmp.StateIOError {
			v.ioStopped = true
		}
	}
	// A guest stopped on a failed write, paused on purpose since or not,
	// retries that write as soon as it runs: look for room first.
	if v.ioStopped {
		if err := roomToWrite(v.dir); err != nil {
			return fmt.Errorf("resume %s: the guest stopped on a failed disk write and %w", id, err)
		}
	}
	// QEMU retries the disk requests that failed as soon as the VM runs:
	// if they fail again it stops again, which is heard here rather than
	// waited out as a guest agent that does not answer.
	ioStop := watchIOStop(v.p.mon)
	defer ioStop.stop()
	if err := v.p.mon.Cont(ctx); err != nil {
		return err
	}
	v.paused = false
	steps.Mark("run the vCPUs (cont)")
	// A guest-agent request sent while the guest was paused can stay stuck
	// after it runs again (QEMU does not look at the socket until more
	// bytes come); fail it rather than wait for its timeout (a guest Exec
	// asks again). A guest that QEMU stopped on a failed write may have
	// been stopped again under a request: its connection is not reused.
	if v.g.ga.Busy() || v.ioStopped {
		v.g.ga.Abort()
	}
	// A guest that QEMU stopped on a failed write first completes the
	// writes that waited, and one that runs for the first time in its
	// process is translated anew: they are given longer to answer.
	wait := 10 * time.Second
	if v.ioStopped || !v.answered {
		wait = 30 * time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ioStop.onStop(cancel)
	err := v.g.answer(pctx, v.p)
	if why := ioStop.reason(); why != "" {
		v.ioStopped = true
		return fmt.Errorf("resume %s: the guest stopped again on a failed disk write (%s): %w", id, why, api.ErrUnavailable)
	}
	if err != nil {
		return fmt.Errorf("resume %s: guest agent: %w", id, err)
	}
	v.ioStopped, v.answered = false, true
	steps.Mark("guest answers (ping)")
	b.startIdentityLocked(v)
	// The guest's clock stood still while it was paused. It is set in the
	// background, so that resume returns as soon as the guest answers;
	// guest calls made meanwhile wait their turn. It runs a program (slow
	// under emulation), so a clone's identity goes first. Short pauses are
	// let be.
	if v.pausedAt.IsZero() || time.Since(v.pausedAt) > time.Second {
		g := v.g
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			g.gate.wait(ctx)
			if err := g.os.SetClock(ctx, g, time.Now()); err != nil {
				// Paused or saved again before it was done: the next
				// resume sets it.
				b.log.Debug("set the guest clock after resume", "sandbox", id, "err", err)
			}
		}()
	}
	v.pausedAt = time.Time{}
	return nil
}

func (v *vm) needProcess() error {
	if v.hasProcess() {
		return nil
	}
	switch {
	case v.meta.Saved:
		return fmt.Errorf("sandbox %s is saved to disk: restore or resume it first: %w", v.meta.ID, api.ErrConflict)
	case v.meta.Stopped:
		return fmt.Errorf("sandbox %s is stopped: reset it to start it again: %w", v.meta.ID, api.ErrConflict)
	default:
		return fmt.Errorf("sandbox %s has no QEMU process (it exited or was killed): reset or delete it: %w", v.meta.ID, api.ErrConflict)
	}
}

// Save implements backend.Backend.
func (b *Backend) Save(ctx context.Context, id string) error {
	v, err := b.lockVM(id, false)
	if err != nil {
		return err
	}
	defer v.mu.Unlock()
	if !v.hasProcess() && v.meta.Saved {
		return nil
	}
	if err := v.needProcess(); err != nil {
		return err
	}
	v.g.ga.Abort()
	if err := v.p.mon.Stop(ctx); err != nil {
		return err
	}
	if err := migrateToFile(ctx, v.p.mon, filepath.Join(v.dir, "saved.state")); err != nil {
		return fmt.Errorf("save %s: %w", id, err)
	}
	v.meta.Saved = true
	if err := v.save(); err != nil {
		return err
	}
	if err := v.p.quit(ctx); err != nil {
		return err
	}
	v.detach()
	return v.save()
}

// Restore implements backend.Backend.
func (b *Backend) Restore(ctx context.Context, id string) error {
	v, err := b.lockVM(id, false)
	if err != nil {
		return err
	}
	defer v.mu.Unlock()
	if v.hasProcess() {
		return nil
	}
	return b.restoreLocked(ctx, v)
}

func (b *Backend) restoreLocked(ctx context.Context, v *vm) error {
	if !v.meta.Saved {
		return v.needProcess()
	}
	if err := b.reserve(v.meta.ID, b.restoreMB(v), "", admitExisting); err != nil {
		return err
	}
	defer b.release(v.meta.ID)
	state := filepath.Join(v.dir, "saved.state")
	if err := b.loadState(ctx, v, state); err != nil {
		return fmt.Errorf("restore %s: %w", v.meta.ID, err)
	}
	v.meta.Saved = false
	if err := v.save(); err != nil {
		return err
	}
	os.Remove(state)
	return nil
}

// loadState starts a QEMU for v on its disk, loads state (a saved
// sandbox's or a checkpoint's) into it and makes it v's process, paused.
func (b *Backend) loadState(ctx context.Context, v *vm, state string) error {
	m := b.machineFor(v.tpl, v.meta.Name, v.dir, v.meta.RunDir, filepath.Join(v.dir, "disk.qcow2"))
	m.MemoryMB = v.meta.MemoryMB
	m.Incoming = true
	p, err := b.launch(ctx, m, v.dir)
	if err != nil {
		return err
	}
	if err := migrateFromFile(ctx, p.mon, state); err != nil {
		p.kill()
		return fmt.Errorf("%w%s", err, p.logTail())
	}
	v.attach(p)
	return nil
}

// Reset implements backend.Backend: the sandbox becomes a fresh clone of
// its template. A spare's QEMU takes the place of the old one, which is
// killed after, in the background: the reset waits neither for a QEMU to
// start nor for one to end.
func (b *Backend) Reset(ctx context.Context, id string) error {
	steps := backend.StartSteps(ctx)
	v, err := b.lockVM(id, false)
	if err != nil {
		return err
	}
	defer v.mu.Unlock()
	// The old process's memory is freed a moment after it is killed: the
	// new one takes its room.
	how := admitExisting
	if old := v.p; old != nil {
		how = admitReplace
		v.detach()
		old.mon.Close()
		if v.meta.ColdBoot {
			if err := old.kill(); err != nil {
				return err
			}
		} else {
			// SIGKILL now; the process is gone (its memory freed) a few
			// milliseconds later, while the new one takes its place. Its
			// guest network goes with it.
			go func() {
				killProcess(old.pid, old.name, 10*time.Second)
				old.link.close()
			}()
		}
	}
	steps.Mark("kill the old QEMU")
	os.Remove(filepath.Join(v.dir, "saved.state"))
	v.dropCheckpoint()
	if err := b.reserve(id, b.expectMB(v.tpl), v.meta.TemplateID, how); err != nil {
		return err
	}
	defer b.release(id)
	resolution := v.meta.Resolution
	v.meta.Resolution = v.tpl.Resolution
	if v.meta.ColdBoot {
		err = b.coldBootLocked(ctx, v)
	} else {
		err = b.cloneLocked(ctx, v, steps)
	}
	if err == nil && resolution != v.meta.Resolution {
		err = b.resolutionLocked(ctx, v, resolution)
	}
	if err != nil {
		v.meta.Stopped = true
		v.save()
		return fmt.Errorf("reset %s: %w", id, err)
	}
	err = v.save()
	steps.Mark("record the sandbox")
	return err
}

// Stop implements backend.Backend.
func (b *Backend) Stop(ctx context.Context, id string) error {
	v, err := b.lockVM(id, false)
	if err != nil {
		return err
	}
	defer v.mu.Unlock()
	if v.p != nil {
		if err := v.p.quit(ctx); err != nil {
			return err
		}
		v.detach()
	}
	os.Remove(filepath.Join(v.dir, "saved.state"))
	v.meta.Saved, v.meta.Stopped = false, true
	return v.save()
}

// Delete implements backend.Backend.
func (b *Backend) Delete(ctx context.Context, id string) error {
	v, err := b.lockVM(id, true)
	if err != nil {
		return err
	}
	defer v.mu.Unlock()
	b.destroyLocked(v)
	b.forget(v)
	return nil
}

// destroyLocked kills v's process and removes its files and sockets.
func (b *Backend) destroyLocked(v *vm) {
	if v.p != nil {
		v.p.kill()
		v.detach()
	} else if v.meta.PID != 0 {
		killProcess(v.meta.PID, v.meta.Name, 10*time.Second)
	}
	if v.meta.RunDir != "" {
		os.RemoveAll(v.meta.RunDir)
	} else {
		os.RemoveAll(b.runDirFor(v.dir))
	}
	os.RemoveAll(v.dir)
}

// Inspect implements backend.Backend.
func (b *Backend) Inspect(ctx context.Context, id string) (backend.Info, error) {
	v, err := b.rlockVM(id)
	if err != nil {
		return backend.Info{}, err
	}
	defer v.mu.RUnlock()
	return b.inspectLocked(ctx, v), nil
}

// StateGone is reported for a sandbox whose QEMU process is gone although
// nothing stopped or saved it: it crashed or was killed.
const StateGone = "Gone"

func (b *Backend) inspectLocked(ctx context.Context, v *vm) backend.Info {
	info := backend.Info{
		ID: v.meta.ID, UID: v.meta.UID, TemplateID: v.meta.TemplateID,
		Display: "unix:" + v.vncSocket(), Resolution: v.meta.Resolution,
		MemoryMB: v.meta.MemoryMB, CreatedAt: v.meta.CreatedAt,
		Network: v.networkInfo(),
	}
	switch {
	case v.hasProcess():
		info.PID = v.p.pid
		info.State = backend.StatePaused
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := v.p.mon.Status(sctx)
		cancel()
		switch {
		case err != nil:
		case st.Status == qmp.StateRunning:
			info.State = backend.StateRunning
		case st.Status == qmp.StateIOError && !v.paused:
			info.State = backend.StateIOError
		}
	case v.meta.Saved:
		info.State = backend.StateSaved
	case v.meta.Stopped:
		info.State = backend.StateStopped
	default:
		info.State = StateGone
	}
	return info
}

// List implements backend.Backend. It also adopts sandboxes it did not know
// yet (after a restart of the server).
func (b *Backend) List(ctx context.Context) ([]backend.Info, error) {
	entries, err := os.ReadDir(filepath.Join(b.cfg.Dir, "sandboxes"))
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		b.mu.Lock()
		_, known := b.vms[e.Name()]
		b.mu.Unlock()
		if !known {
			b.adoptDir(ctx, e.Name())
		}
	}
	b.mu.Lock()
	vms := make([]*vm, 0, len(b.vms))
	for _, v := range b.vms {
		vms = append(vms, v)
	}
	b.mu.Unlock()
	var out []backend.Info
	for _, v := range vms {
		v.mu.RLock()
		if !v.gone && v.meta.ID != "" {
			out = append(out, b.inspectLocked(ctx, v))
		}
		v.mu.RUnlock()
	}
	return out, nil
}

// adoptDir loads a sandbox directory and reconnects to its QEMU if it runs.
// Directories without a complete vm.json are leftovers of an interrupted
// Create and are removed.
func (b *Backend) adoptDir(ctx context.Context, id string) {
	dir := b.sbDir(id)
	var meta vmMeta
	err := readJSON(filepath.Join(dir, "vm.json"), &meta)
	if err == nil && meta.ID != id {
		err = fmt.Errorf("vm.json names sandbox %q", meta.ID)
	}
	if err != nil {
		// Without its vm.json nothing says how to reach the sandbox's
		// QEMU or what it holds: its QEMU goes with the directory, and
		// the node reports the sandbox's VM gone.
		if errors.Is(err, os.ErrNotExist) {
			b.log.Warn("removing an incomplete sandbox directory (an interrupted create)", "sandbox", id)
		} else {
			b.log.Error("removing a sandbox directory whose vm.json cannot be read", "sandbox", id, "err", err)
		}
		if pid, perr := readPID(filepath.Join(dir, "pid")); perr == nil {
			killClone(pid)
		}
		os.RemoveAll(dir)
		return
	}
	v := &vm{id: id, dir: dir, meta: meta, denials: &denials{count: meta.Denied, last: meta.LastDenied}}
	if tpl, err := b.loadTemplate(meta.TemplateID); err == nil {
		v.tpl = tpl
	} else {
		b.log.Warn("sandbox's template snapshot is missing", "sandbox", id, "template", meta.TemplateID)
	}
	if p, err := adopt(ctx, meta.PID, meta.Name, dir, v.qmpSocket()); err == nil {
		v.p = p
		v.live.Store(p)
		v.g = newGuest(qga.New(v.qgaSocket()), v.tpl.Image)
		// Its guest network was the last server's: a new one connects to
		// its NIC, with the sandbox's recorded policy.
		if v.tpl.Network {
			if p.link, err = b.startLink(ctx, p, filepath.Join(meta.RunDir, netSocketName), v.tpl.Image.Network); err != nil {
				b.log.Warn("cannot connect the adopted sandbox's guest network", "sandbox", id, "err", err)
			}
			v.connectLink()
		}
		b.log.Info("adopted a running sandbox", "sandbox", id, "pid", meta.PID)
		// A clone resumed before the restart whose identity was still
		// being written: write it again.
		if st, err := p.mon.Status(ctx); err == nil && st.Status == qmp.StateRunning {
			b.startIdentityLocked(v)
		}
	} else if meta.PID != 0 && processAlive(meta.PID, meta.Name) {
		b.log.Warn("sandbox runs but its monitor does not answer", "sandbox", id, "pid", meta.PID, "err", err)
	} else if pid, perr := readPID(filepath.Join(dir, "pid")); perr == nil && pid != meta.PID && clonePrefix(pid) != "" {
		// A QEMU started for this sandbox (a reset) that the server ended
		// before recording it: nothing knows its state.
		b.log.Warn("killing an unrecorded QEMU of a sandbox", "sandbox", id, "pid", pid)
		killClone(pid)
	}
	b.mu.Lock()
	if _, ok := b.vms[id]; !ok {
		b.vms[id] = v
	}
	b.mu.Unlock()
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Ready implements backend.Backend.
func (b *Backend) Ready(ctx context.Context, id string) error {
	g, err := b.guestOf(ctx, id)
	if err != nil {
		return err
	}
	return g.ready(ctx)
}

// Alive implements backend.Backend.
func (b *Backend) Alive(ctx context.Context, id string) error {
	g, err := b.guestOf(ctx, id)
	if err != nil {
		return err
	}
	if err := g.ga.Ping(ctx); err != nil {
		return fmt.Errorf("guest agent: %w", err)
	}
	return nil
}

// PrivateMemory reports the private resident memory of a sandbox's QEMU in
// bytes: what it does not share with its template and siblings.
func (b *Backend) PrivateMemory(ctx context.Context, id string) (int64, error) {
	v, err := b.rlockRunning(id)
	if err != nil {
		return 0, err
	}
	defer v.mu.RUnlock()
	return privateMemory(v.p.pid)
}

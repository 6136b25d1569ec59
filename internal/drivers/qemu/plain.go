package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qga"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
)

// PlainVM is a plain QEMU of an image, for comparisons: it boots the image
// from scratch with the same devices and command line as the backend's
// clones, but with its guest RAM in ordinary memory (no template snapshot,
// no memory file, no -incoming), on a throwaway qcow2 overlay of the
// image's disk. It is what one would run without hvkube, and it reverts
// the way QEMU itself offers: internal snapshots taken with savevm and
// loaded in place with loadvm (what "revert to snapshot" does in desktop
// hypervisors).
//
// A PlainVM is not a sandbox: the backend does not list, adopt, pause or
// clone it, it gets no identity of its own, and it lives only as long as
// the program that made it (Close ends it; a backend started later on the
// same directory kills one left behind). Its guest memory counts against
// the backend's host memory limit while it runs. It exists so that
// hvkube's clone and reset can be measured beside QEMU's own revert. Its
// methods are not safe for concurrent use.
type PlainVM struct {
	b    *Backend
	img  image
	m    machine
	dir  string
	key  string // its entry in the backend's memory accounting
	p    *proc
	g    *guest
	done bool
}

// plainNamePrefix starts the -name of a plain VM's QEMU.
const plainNamePrefix = "hvkube-plain:"

// NewPlainVM prepares a plain QEMU of an image (by name, or by explicit
// paths under the backend's allowed roots, as a template's spec.qemu
// names it). Nothing runs until Start; Close removes what it made.
func (b *Backend) NewPlainVM(q api.QEMUImage) (*PlainVM, error) {
	img, err := resolveImage(b.cfg.ImageDir, b.cfg.AllowedRoots, q)
	if err != nil {
		return nil, err
	}
	// The same facts a template of the image gets by default.
	t := tplMeta{Image: img, Accel: b.Accel(), CPUs: max(img.CPUs, 1), MemoryMB: max(img.MemoryMB, api.DefaultTemplateMemory), Resolution: img.Resolution}
	parent := filepath.Join(b.cfg.Dir, "plain")
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "vm-")
	if err != nil {
		return nil, err
	}
	name := plainNamePrefix + strconv.FormatInt(time.Now().UnixNano(), 36)
	m := b.machineFor(t, name, dir, b.runDirFor(dir), filepath.Join(dir, "disk.qcow2"))
	return &PlainVM{b: b, img: img, m: m, dir: dir, key: name}, nil
}

// Start creates the VM's overlay disk, boots QEMU and waits until the guest
// agent answers and the desktop is ready (a cold boot: tens of seconds
// under TCG, bounded by the backend's boot timeout).
func (v *PlainVM) Start(ctx context.Context) error {
	if v.done {
		return errors.New("plain vm: closed")
	}
	if v.p != nil {
		return errors.New("plain vm: already started")
	}
	if err := v.b.reserve(v.key, v.m.MemoryMB, "", admitNew); err != nil {
		return err
	}
	if err := v.b.overlay(ctx, v.img.Disk, v.m.Disk); err != nil {
		return err
	}
	p, err := v.b.launch(ctx, v.m, v.dir)
	if err != nil {
		return err
	}
	v.p = p
	v.g = newGuest(qga.New(v.m.QGASocket), v.img)
	bctx, watch, stopWatch := v.b.watchBoot(ctx, p.pid, v.img.CPUs, nil)
	defer stopWatch()
	if err := v.g.waitAgent(bctx, p); err != nil {
		if v.m.Accel == "kvm" && internalError(err) && v.b.refuseKVM("a plain VM's guest") {
			// Boot again under TCG, on a new overlay.
			stopWatch()
			v.g.ga.Close()
			p.kill()
			v.p, v.g, v.m.Accel = nil, nil, "tcg"
			v.b.release(v.key)
			os.Remove(v.m.Disk)
			return v.Start(ctx)
		}
		return fmt.Errorf("plain vm: guest agent: %w%s", err, p.logTail())
	}
	watch.begin("the desktop to be ready")
	if err := v.g.waitReady(bctx, p); err != nil {
		return fmt.Errorf("plain vm: desktop: %w%s", err, p.logTail())
	}
	return nil
}

// snapshotName is what SaveVM and LoadVM accept: the name goes into a
// human monitor command line, where spaces, quotes and the like would be
// parsed.
var snapshotName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// SaveVM takes an internal snapshot of the running VM named name: its RAM
// and device state and its disk, inside the overlay's qcow2 file. The guest
// is stopped while the snapshot is written and runs again afterwards. A
// snapshot of the same name is replaced.
func (v *PlainVM) SaveVM(ctx context.Context, name string) error {
	return v.hmp(ctx, "savevm", name)
}

// LoadVM reverts the VM in place to the snapshot named name (RAM, devices
// and disk) and lets it run on from there. It returns when QEMU has loaded
// the snapshot; the guest agent may not answer yet (see Ping). QEMU stops
// the VM before it loads, and a load that fails leaves it stopped.
func (v *PlainVM) LoadVM(ctx context.Context, name string) error {
	return v.hmp(ctx, "loadvm", name)
}

// hmp runs a snapshot command through the human monitor. QEMU's savevm and
// loadvm are synchronous there: the command returns when the snapshot is
// written or loaded. The human monitor reports failure as text, not as a
// QMP error; its commands print nothing when they succeed.
//
// The QMP jobs snapshot-save and snapshot-load do the same work
// (save_snapshot and load_snapshot) but asynchronously: a job to start,
// its status events to wait for and the job to dismiss, which adds round
// trips to what is measured and says nothing more about the revert.
func (v *PlainVM) hmp(ctx context.Context, verb, name string) error {
	if v.p == nil {
		return fmt.Errorf("plain vm: %s: not started", verb)
	}
	if !snapshotName.MatchString(name) {
		return fmt.Errorf("plain vm: %s: snapshot name %q: use 1 to 64 letters, digits, '-' or '_'", verb, name)
	}
	var out string
	if err := v.p.mon.Execute(ctx, "human-monitor-command", map[string]string{"command-line": verb + " " + name}, &out); err != nil {
		return fmt.Errorf("plain vm: %s %s: %w", verb, name, err)
	}
	if out = strings.TrimSpace(out); out != "" {
		return fmt.Errorf("plain vm: %s %s: qemu says: %s", verb, name, out)
	}
	return nil
}

// Ping waits until the guest agent answers. After a LoadVM the agent in
// the guest is the snapshot's: it knows nothing of the requests made since,
// and whatever it was doing when the snapshot was taken (a reply half
// written) it does again. The connection survives the revert: QEMU keeps
// its end, and a snapshot taken after Start was taken with the host
// connected, so the guest's port does not change state. Ping keeps it (a
// new connection answered about 50 ms later under TCG) but does not trust
// its stream: each attempt resynchronises it (guest-sync-delimited after
// a byte that resets the agent's parser, no slower than a guest-ping), and
// that reply is the answer. An attempt with no answer in a second is
// abandoned and the next one made on a new connection. When an attempt
// fails and the guest is not running, Ping fails instead of trying again.
func (v *PlainVM) Ping(ctx context.Context) error {
	if v.p == nil {
		return errors.New("plain vm: ping: not started")
	}
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		err := v.g.ga.Sync(actx)
		cancel()
		if err == nil {
			return nil
		}
		if !v.p.alive() {
			return fmt.Errorf("plain vm: qemu exited%s", v.p.logTail())
		}
		if st, serr := v.p.mon.Status(ctx); serr == nil && st.Status != qmp.StateRunning {
			return fmt.Errorf("plain vm: guest agent: the guest is not running (%s)", st.Status)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("plain vm: guest agent: %w (last: %v)", ctx.Err(), err)
		}
		v.g.ga.Abort()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Exec runs a program in the guest through the guest agent and waits for
// it, as a sandbox's exec does.
func (v *PlainVM) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	if v.p == nil {
		return backend.ExecResult{}, errors.New("plain vm: exec: not started")
	}
	return v.g.Exec(ctx, req)
}

// WriteFile writes a file in the guest through the guest agent.
func (v *PlainVM) WriteFile(ctx context.Context, path string, data []byte) error {
	if v.p == nil {
		return errors.New("plain vm: write file: not started")
	}
	return v.g.WriteFile(ctx, path, data)
}

// Input sends keyboard and pointer events to the guest (QMP
// input-send-event; see qmp.Monitor.InputSendEvent for how to batch them).
func (v *PlainVM) Input(ctx context.Context, events []qmp.InputEvent) error {
	if v.p == nil {
		return errors.New("plain vm: input: not started")
	}
	return v.p.mon.InputSendEvent(ctx, events)
}

// Close kills the VM's QEMU and removes its files and sockets. It is
// idempotent.
func (v *PlainVM) Close() error {
	if v.done {
		return nil
	}
	v.done = true
	var err error
	if v.g != nil {
		v.g.ga.Close()
	}
	if v.p != nil {
		err = v.p.kill()
	}
	v.b.release(v.key)
	os.RemoveAll(filepath.Dir(v.m.QMPSocket))
	if rerr := os.RemoveAll(v.dir); err == nil {
		err = rerr
	}
	return err
}

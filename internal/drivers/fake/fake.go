// Package fake is a FAKE backend: sandboxes that live only in memory, with
// no hypervisor, no guest and no real screen behind them. It exists for
// controller unit tests and control-plane scale simulations only. It is
// never a default, and nothing outside tests and simulations should choose
// it: a sandbox of the fake backend runs nothing.
//
// The fake keeps the contract of package backend: the same run states and
// transitions, the same idempotence, the same error categories (ErrNotFound,
// ErrConflict, ErrUnavailable, ErrInvalid) and the same memory limit as the
// qemu backend. Every call is instant unless Options.Delay asks otherwise.
// On top of the contract it offers what tests need to steer and observe it:
// failure injection (FailNext), a crash (Kill), a full disk (StopOnWriteError,
// SetDiskFull), a call log (Calls, Count),
// what a sandbox was sent (Actions, Typed, Execs, ReadFile), and the
// servers its guest's ports lead to (ServePort).
//
// A Backend is safe for concurrent use.
package fake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/capacity"
	"github.com/hvkube/hvkube/internal/display"
)

var (
	_ backend.Backend    = (*Backend)(nil)
	_ backend.Screen     = (*Backend)(nil)
	_ backend.Input      = (*Backend)(nil)
	_ backend.TextInput  = (*Backend)(nil)
	_ backend.Cursor     = (*Backend)(nil)
	_ backend.Guest      = (*Backend)(nil)
	_ backend.Logs       = (*Backend)(nil)
	_ backend.PortDialer = (*Backend)(nil)
)

// StateGone is reported for a sandbox whose process ended although nothing
// stopped or saved it (see Kill): the same string the qemu backend reports
// for a crashed VM.
const StateGone = "Gone"

// Operation names, as Calls and Count report them and FailNext takes them.
const (
	OpBuildTemplate   = "buildtemplate"
	OpInspectTemplate = "inspecttemplate"
	OpDeleteTemplate  = "deletetemplate"
	OpCreate          = "create"
	OpPause           = "pause"
	OpResume          = "resume"
	OpSave            = "save"
	OpRestore         = "restore"
	OpReset           = "reset"
	OpStop            = "stop"
	OpDelete          = "delete"
	OpInspect         = "inspect"
	OpList            = "list"
	OpReady           = "ready"
	OpAlive           = "alive"
	OpCapacity        = "capacity"
	OpScreenshot      = "screenshot"
	OpScreenSize      = "screensize"
	OpInput           = "input"
	OpExec            = "exec"
	OpCopyIn          = "copyin"
	OpCopyOut         = "copyout"
	OpClipboardGet    = "clipboardget"
	OpClipboardSet    = "clipboardset"
	OpLogs            = "logs"
	OpDialPort        = "dialport"
	OpCheckpoint      = "checkpoint"
	OpRestoreCkpt     = "restorecheckpoint"
)

var knownOps = map[string]bool{
	OpBuildTemplate: true, OpInspectTemplate: true, OpDeleteTemplate: true,
	OpCreate: true, OpPause: true, OpResume: true, OpSave: true, OpRestore: true,
	OpReset: true, OpStop: true, OpDelete: true, OpInspect: true, OpList: true,
	OpReady: true, OpAlive: true, OpCapacity: true, OpScreenshot: true,
	OpScreenSize: true, OpInput: true, OpExec: true, OpCopyIn: true,
	OpCopyOut: true, OpClipboardGet: true, OpClipboardSet: true, OpLogs: true,
	OpDialPort: true, OpCheckpoint: true, OpRestoreCkpt: true,
}

// Defaults of Options.
const (
	DefaultMemoryMB         = 16384
	DefaultLimitPercent     = 80
	DefaultResolution       = "1280x800"
	DefaultTemplateMemoryMB = 512
)

// Options configure a fake backend. The zero value is ready to use.
type Options struct {
	// MemoryMB is the host memory the fake pretends to have (default
	// DefaultMemoryMB).
	MemoryMB int
	// LimitPercent is the share of MemoryMB that sandboxes with a process
	// (Running or Paused) may use (default DefaultLimitPercent).
	LimitPercent int
	// RunningReserveMB is capacity.Policy's: 0 learns it per template.
	RunningReserveMB int
	// Memory, when set, measures the host and each sandbox's process (by
	// its PID, as Inspect reports it) in place of MemoryMB and the guest
	// memory: tests inject one to drive admission and pressure.
	Memory capacity.Reader
	// Resolution is the screen size of templates whose spec names none
	// (default DefaultResolution).
	Resolution string
	// Now is the clock of CreatedAt and of the log lines (default
	// time.Now).
	Now func() time.Time
	// Delay, if set, is asked for the latency of every call (by its Op
	// name) before the call takes effect; the call waits that long, or
	// fails with the context's error, changing nothing, if its context
	// ends first.
	Delay func(op string) time.Duration
	// Exec, if set, runs the guest programs of Backend.Exec in place of
	// the built-in interpreter. It is called without the backend's lock
	// held, so it may call the backend; fs is the sandbox's file system.
	Exec func(id string, fs FS, req backend.ExecRequest) (backend.ExecResult, error)
	// Automation is what every template's guest offers automation
	// clients (default: nothing).
	Automation api.Automation
}

// Call is one recorded call: its Op name and the sandbox or template ID it
// named ("" for List and Capacity).
type Call struct {
	Op, ID string
}

// Backend is the fake backend. Make one with New.
type Backend struct {
	opts Options
	book *capacity.Book // what the templates' clones are measured to use
	enc  display.Encoder

	mu        sync.Mutex // guards the following fields
	templates map[string]backend.TemplateInfo
	sandboxes map[string]*sandbox
	calls     []Call
	counts    map[string]int
	failures  []failure
	nextPID   int
	diskFull  bool                 // see SetDiskFull
	ports     map[guestPort]string // see ServePort
}

type failure struct {
	op, id string
	err    error
}

// sandbox is one fake sandbox; b.mu guards it.
type sandbox struct {
	id, uid, templateID, hostname string
	resolution                    string
	w, h                          int
	memoryMB                      int
	createdAt                     time.Time

	state string
	pid   int // 0 without a process

	network     api.Network         // as the spec gave it
	networkInfo backend.NetworkInfo // see SetDenied

	files     map[string][]byte // the guest file system, by cleaned absolute path
	clipboard string
	x, y      int // the pointer
	frame     int // input actions that changed the screen; drawn into screenshots
	events    []backend.InputEvent
	held      map[string]bool // modifier keys that are down
	typed     strings.Builder
	execs     []backend.ExecRequest
	log       []string
	// checkpoint is its files as of its latest checkpoint; nil without.
	checkpoint map[string][]byte
}

// New returns a fake backend with no templates and no sandboxes. It panics
// if opts.Resolution is set and is not WIDTHxHEIGHT: options are written by
// tests, and a bad one is a bug in the test.
func New(opts Options) *Backend {
	if opts.MemoryMB <= 0 {
		opts.MemoryMB = DefaultMemoryMB
	}
	if opts.LimitPercent <= 0 {
		opts.LimitPercent = DefaultLimitPercent
	}
	if opts.Resolution == "" {
		opts.Resolution = DefaultResolution
	}
	if _, _, err := api.ParseResolution(opts.Resolution); err != nil {
		panic(fmt.Sprintf("fake.New: Options.Resolution: %v", err))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Backend{
		opts:      opts,
		book:      capacity.NewBook(),
		templates: map[string]backend.TemplateInfo{},
		sandboxes: map[string]*sandbox{},
		counts:    map[string]int{},
		ports:     map[guestPort]string{},
		nextPID:   1000,
	}
}

// Name implements backend.Backend: "fake".
func (b *Backend) Name() string { return "fake" }

// Close implements backend.Backend. It does nothing: the fake's sandboxes
// stay, as VMs outlive the server, and the Backend keeps working.
func (b *Backend) Close() error { return nil }

// ---- steering and observing ----

// FailNext makes the next call of op (one of the Op constants) for sandbox
// or template id, or for any ID when id is "", return err, once, without
// taking effect. Several FailNext calls queue up, each used once, in order.
// It panics on an unknown op, so that a misspelt name fails the test rather
// than never firing.
func (b *Backend) FailNext(op, id string, err error) {
	if !knownOps[op] {
		panic(fmt.Sprintf("fake.FailNext: unknown op %q", op))
	}
	b.mu.Lock()
	b.failures = append(b.failures, failure{op: op, id: id, err: err})
	b.mu.Unlock()
}

// Calls returns every call made so far, in order, failed ones included.
func (b *Backend) Calls() []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// Count returns how many calls of op were made so far, failed ones
// included.
func (b *Backend) Count(op string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counts[op]
}

// ClearCalls forgets the calls recorded so far (Calls and Count start from
// zero again). Queued failures stay.
func (b *Backend) ClearCalls() {
	b.mu.Lock()
	b.calls, b.counts = nil, map[string]int{}
	b.mu.Unlock()
}

// Kill simulates a crash of a sandbox's VM process: a Running or Paused
// sandbox becomes StateGone, with no process (PID 0) and its clipboard
// lost; its files stay, as a disk would. Ready, Alive, Resume and the guest
// and input calls then fail with ErrConflict; Reset, Stop and Delete work.
// Killing a sandbox without a process, or a missing one, does nothing.
func (b *Backend) Kill(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sandboxes[id]
	if !ok || !s.hasProcess() {
		return
	}
	b.transitionLocked(s, "kill", StateGone)
	s.pid = 0
	s.clipboard = ""
}

// StopOnWriteError simulates a disk write of a Running sandbox that found
// no room: as QEMU does, the hypervisor stops the sandbox, which is then
// backend.StateIOError with its process kept. Resume runs it again unless
// the disk is still full (SetDiskFull); Pause makes it Paused. A sandbox
// that is not Running, or a missing one, is left alone.
func (b *Backend) StopOnWriteError(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sandboxes[id]; ok && s.state == backend.StateRunning {
		b.transitionLocked(s, "write error", backend.StateIOError)
	}
}

// SetDiskFull says whether the fake host's disk is full: while it is,
// resuming a sandbox stopped on a write error (StopOnWriteError) fails with
// ErrUnavailable and leaves it stopped, as its retried write fails again.
func (b *Backend) SetDiskFull(full bool) {
	b.mu.Lock()
	b.diskFull = full
	b.mu.Unlock()
}

// begin records a call, takes a failure queued for it, and waits out the
// Delay, in that order. It returns the queued failure or the context's
// error, if any: then the call must change nothing.
func (b *Backend) begin(ctx context.Context, op, id string) error {
	b.mu.Lock()
	b.calls = append(b.calls, Call{Op: op, ID: id})
	b.counts[op]++
	var injected error
	for i, f := range b.failures {
		if f.op == op && (f.id == "" || f.id == id) {
			injected = f.err
			b.failures = slices.Delete(b.failures, i, i+1)
			break
		}
	}
	b.mu.Unlock()
	if b.opts.Delay != nil {
		if d := b.opts.Delay(op); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%s %s: %w", op, id, ctx.Err())
			case <-t.C:
			}
		}
	}
	return injected
}

// ---- templates ----

// BuildTemplate implements backend.Backend. It records the template at
// once: its resolution is spec.Resolution or Options.Resolution, its memory
// spec.MemoryMB or DefaultTemplateMemoryMB. It is idempotent: a template
// that exists is returned as it is. A bad ID or resolution is ErrInvalid.
func (b *Backend) BuildTemplate(ctx context.Context, spec backend.TemplateSpec, progress backend.Progress) (backend.TemplateInfo, error) {
	if err := b.begin(ctx, OpBuildTemplate, spec.ID); err != nil {
		return backend.TemplateInfo{}, err
	}
	if err := api.ValidateName("id", spec.ID); err != nil {
		return backend.TemplateInfo{}, err
	}
	res := spec.Resolution
	if res == "" {
		res = b.opts.Resolution
	}
	if _, _, err := api.ParseResolution(res); err != nil {
		return backend.TemplateInfo{}, api.Invalid("resolution", "%v", err)
	}
	mem := spec.MemoryMB
	if mem <= 0 {
		mem = DefaultTemplateMemoryMB
	}
	b.mu.Lock()
	info, ok := b.templates[spec.ID]
	if !ok {
		info = backend.TemplateInfo{ID: spec.ID, CreatedAt: b.now(), MemoryBytes: int64(mem) << 20, Resolution: res, Automation: b.opts.Automation}
		b.templates[spec.ID] = info
	}
	b.mu.Unlock()
	if !ok && progress != nil {
		progress("fake template " + spec.ID + " ready")
	}
	return info, nil
}

// InspectTemplate implements backend.Backend: ErrNotFound for an unknown
// id.
func (b *Backend) InspectTemplate(ctx context.Context, id string) (backend.TemplateInfo, error) {
	if err := b.begin(ctx, OpInspectTemplate, id); err != nil {
		return backend.TemplateInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	info, ok := b.templates[id]
	if !ok {
		return backend.TemplateInfo{}, fmt.Errorf("template %q %w", id, api.ErrNotFound)
	}
	return info, nil
}

// DeleteTemplate implements backend.Backend. Sandboxes cloned from the
// template keep working. Deleting a missing template is not an error.
func (b *Backend) DeleteTemplate(ctx context.Context, id string) error {
	if err := b.begin(ctx, OpDeleteTemplate, id); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.templates, id)
	b.mu.Unlock()
	return nil
}

// ---- sandboxes ----

// Create implements backend.Backend. It lands the sandbox Paused, at once.
// It is idempotent (an ID that exists is returned as it is); an unknown
// template is ErrNotFound; a spec.MemoryMB other than the template's, a bad
// ID or a bad resolution is ErrInvalid; memory past the limit (see
// Capacity) is ErrUnavailable.
func (b *Backend) Create(ctx context.Context, spec backend.SandboxSpec) (backend.Info, error) {
	if err := b.begin(ctx, OpCreate, spec.ID); err != nil {
		return backend.Info{}, err
	}
	if err := api.ValidateName("id", spec.ID); err != nil {
		return backend.Info{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sandboxes[spec.ID]; ok {
		return s.infoLocked(), nil
	}
	tpl, ok := b.templates[spec.TemplateID]
	if !ok {
		return backend.Info{}, fmt.Errorf("create sandbox %s: template %q %w", spec.ID, spec.TemplateID, api.ErrNotFound)
	}
	mem := int(tpl.MemoryBytes >> 20)
	if spec.MemoryMB != 0 && spec.MemoryMB != mem {
		return backend.Info{}, api.Invalid("resources.memoryMB", "%d MB differs from template %s (%d MB): a clone has its template's memory", spec.MemoryMB, spec.TemplateID, mem)
	}
	res := tpl.Resolution
	if spec.Resolution != "" {
		res = spec.Resolution
	}
	w, h, err := api.ParseResolution(res)
	if err != nil {
		return backend.Info{}, api.Invalid("resolution", "%v", err)
	}
	if err := b.reserveLocked(b.expectLocked(spec.TemplateID), nil, false); err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	s := &sandbox{
		id: spec.ID, uid: spec.UID, templateID: spec.TemplateID, hostname: hostname,
		resolution: res, w: w, h: h, memoryMB: mem, createdAt: b.now(),
		state: backend.StatePaused, pid: b.newPIDLocked(),
		files: map[string][]byte{}, x: w / 2, y: h / 2,
		network: spec.Network, networkInfo: networkInfoOf(spec.Network),
	}
	b.sandboxes[spec.ID] = s
	b.observeCloneLocked(s)
	s.log = append(s.log, fmt.Sprintf("%s create: from template %s -> %s", b.now().Format(time.RFC3339Nano), spec.TemplateID, s.state))
	return s.infoLocked(), nil
}

// Pause implements backend.Backend: Running (or IOError) becomes Paused;
// pausing a paused sandbox does nothing; a sandbox without a process is
// ErrConflict.
func (b *Backend) Pause(ctx context.Context, id string) error {
	return b.lifecycle(ctx, OpPause, id, func(s *sandbox) error {
		switch s.state {
		case backend.StateRunning, backend.StateIOError:
			b.transitionLocked(s, OpPause, backend.StatePaused)
		case backend.StatePaused:
		default:
			return s.conflict(OpPause)
		}
		return nil
	})
}

// Resume implements backend.Backend: Paused becomes Running, Saved is
// restored (within the memory limit) and runs, IOError runs unless the
// disk is full (SetDiskFull: then ErrUnavailable); resuming a running
// sandbox does nothing; Stopped and Gone are ErrConflict.
func (b *Backend) Resume(ctx context.Context, id string) error {
	return b.lifecycle(ctx, OpResume, id, func(s *sandbox) error {
		switch s.state {
		case backend.StateRunning:
		case backend.StatePaused:
			b.transitionLocked(s, OpResume, backend.StateRunning)
		case backend.StateIOError:
			if b.diskFull {
				return fmt.Errorf("resume %s: the guest stopped on a failed disk write and the (fake) disk is still full: %w", s.id, api.ErrUnavailable)
			}
			b.transitionLocked(s, OpResume, backend.StateRunning)
		case backend.StateSaved:
			if err := b.reserveLocked(s.memoryMB, nil, true); err != nil {
				return fmt.Errorf("resume %s: %w", s.id, err)
			}
			s.pid = b.newPIDLocked()
			b.transitionLocked(s, OpResume, backend.StateRunning)
		default:
			return s.conflict(OpResume)
		}
		return nil
	})
}

// Save implements backend.Backend: a Running, Paused or IOError sandbox
// becomes Saved, with no process; its files and clipboard are kept. Saving
// a saved sandbox does nothing; Stopped and Gone are ErrConflict.
func (b *Backend) Save(ctx context.Context, id string) error {
	return b.lifecycle(ctx, OpSave, id, func(s *sandbox) error {
		switch s.state {
		case backend.StateRunning, backend.StatePaused, backend.StateIOError:
			s.pid = 0
			b.transitionLocked(s, OpSave, backend.StateSaved)
		case backend.StateSaved:
		default:
			return s.conflict(OpSave)
		}
		return nil
	})
}

// Restore implements backend.Backend: a Saved sandbox comes back Paused,
// within the memory limit; restoring a sandbox that has a process does
// nothing; Stopped and Gone are ErrConflict.
func (b *Backend) Restore(ctx context.Context, id string) error {
	return b.lifecycle(ctx, OpRestore, id, func(s *sandbox) error {
		switch s.state {
		case backend.StateRunning, backend.StatePaused, backend.StateIOError:
		case backend.StateSaved:
			if err := b.reserveLocked(s.memoryMB, nil, true); err != nil {
				return fmt.Errorf("restore %s: %w", s.id, err)
			}
			s.pid = b.newPIDLocked()
			b.transitionLocked(s, OpRestore, backend.StatePaused)
		default:
			return s.conflict(OpRestore)
		}
		return nil
	})
}

// Reset implements backend.Backend: from any state the sandbox returns to
// its template's clean state, Paused, with a new process: its file system
// and clipboard are emptied and the pointer goes back to the middle of the
// screen. What it was sent (Actions, Typed, Execs) stays on record. If the
// memory limit refuses the new process (ErrUnavailable), nothing changes.
func (b *Backend) Reset(ctx context.Context, id string) error {
	return b.lifecycle(ctx, OpReset, id, func(s *sandbox) error {
		if err := b.reserveLocked(b.expectLocked(s.templateID), s, true); err != nil {
			return fmt.Errorf("reset %s: %w", s.id, err)
		}
		s.pid = b.newPIDLocked()
		s.files = map[string][]byte{}
		s.checkpoint = nil
		s.clipboard = ""
		s.x, s.y = s.w/2, s.h/2
		b.transitionLocked(s, OpReset, backend.StatePaused)
		return nil
	})
}

// Checkpoint implements backend.Checkpointer: the sandbox's files are
// kept as they are now; it goes on as it was. A sandbox without a process
// is ErrConflict.
func (b *Backend) Checkpoint(ctx context.Context, id string) (time.Duration, error) {
	return 0, b.lifecycle(ctx, OpCheckpoint, id, func(s *sandbox) error {
		if !s.hasProcess() {
			return s.conflict(OpCheckpoint)
		}
		s.checkpoint = maps.Clone(s.files)
		if s.checkpoint == nil {
			s.checkpoint = map[string][]byte{}
		}
		return nil
	})
}

// RestoreCheckpoint implements backend.Checkpointer: the sandbox has the
// files of its latest checkpoint, Paused, with a new process; ErrNotFound
// without a checkpoint.
func (b *Backend) RestoreCheckpoint(ctx context.Context, id string) error {
	return b.lifecycle(ctx, OpRestoreCkpt, id, func(s *sandbox) error {
		if s.checkpoint == nil {
			return fmt.Errorf("sandbox %s has no checkpoint: %w", id, api.ErrNotFound)
		}
		s.files = maps.Clone(s.checkpoint)
		s.pid = b.newPIDLocked()
		b.transitionLocked(s, OpRestoreCkpt, backend.StatePaused)
		return nil
	})
}

// Stop implements backend.Backend: the sandbox becomes Stopped, with no
// process and no saved state; its files are kept. Stopping a stopped
// sandbox does nothing.
func (b *Backend) Stop(ctx context.Context, id string) error {
	return b.lifecycle(ctx, OpStop, id, func(s *sandbox) error {
		if s.state != backend.StateStopped {
			s.pid = 0
			s.clipboard = ""
			b.transitionLocked(s, OpStop, backend.StateStopped)
		}
		return nil
	})
}

// Delete implements backend.Backend: the sandbox and all it had (files,
// records of what it was sent, log) are gone. Deleting a missing sandbox is
// not an error.
func (b *Backend) Delete(ctx context.Context, id string) error {
	if err := b.begin(ctx, OpDelete, id); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.sandboxes, id)
	b.mu.Unlock()
	return nil
}

// lifecycle runs fn on sandbox id under the lock, after begin.
func (b *Backend) lifecycle(ctx context.Context, op, id string, fn func(s *sandbox) error) error {
	if err := b.begin(ctx, op, id); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.getLocked(id)
	if err != nil {
		return err
	}
	return fn(s)
}

// Inspect implements backend.Backend.
func (b *Backend) Inspect(ctx context.Context, id string) (backend.Info, error) {
	if err := b.begin(ctx, OpInspect, id); err != nil {
		return backend.Info{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.getLocked(id)
	if err != nil {
		return backend.Info{}, err
	}
	return s.infoLocked(), nil
}

// List implements backend.Backend: every sandbox, sorted by ID.
func (b *Backend) List(ctx context.Context) ([]backend.Info, error) {
	if err := b.begin(ctx, OpList, ""); err != nil {
		return nil, err
	}
	b.mu.Lock()
	list := make([]backend.Info, 0, len(b.sandboxes))
	for _, s := range b.sandboxes {
		list = append(list, s.infoLocked())
	}
	b.mu.Unlock()
	slices.SortFunc(list, func(x, y backend.Info) int { return strings.Compare(x.ID, y.ID) })
	return list, nil
}

// Ready implements backend.Backend: nil for a Running sandbox, an
// ErrConflict error otherwise.
func (b *Backend) Ready(ctx context.Context, id string) error {
	return b.lifecycle(ctx, OpReady, id, func(s *sandbox) error { return s.needRunning(OpReady) })
}

// Alive implements backend.Backend: nil for a Running sandbox, an
// ErrConflict error otherwise.
func (b *Backend) Alive(ctx context.Context, id string) error {
	return b.lifecycle(ctx, OpAlive, id, func(s *sandbox) error { return s.needRunning(OpAlive) })
}

// Capacity implements backend.Backend. Memory is counted as
// internal/capacity counts it, from Options.Memory when set; without it
// the host has Options.MemoryMB and each sandbox with a process (Running
// or Paused) uses its whole guest memory.
func (b *Backend) Capacity(ctx context.Context) (backend.Capacity, error) {
	if err := b.begin(ctx, OpCapacity, ""); err != nil {
		return backend.Capacity{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.accountLocked(nil)
	var tpls []string
	for id := range b.templates {
		b.expectLocked(id)
		tpls = append(tpls, id)
	}
	return backend.CapacityOf(a, b.book, tpls), nil
}

// Logs implements backend.Logs: one line per lifecycle operation that took
// effect on the sandbox, oldest first.
func (b *Backend) Logs(ctx context.Context, id string) (io.ReadCloser, error) {
	if err := b.begin(ctx, OpLogs, id); err != nil {
		return nil, err
	}
	b.mu.Lock()
	s, err := b.getLocked(id)
	var text string
	if err == nil {
		text = strings.Join(s.log, "\n") + "\n"
	}
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader([]byte(text))), nil
}

// ---- helpers ----

func (b *Backend) now() time.Time { return b.opts.Now().UTC() }

func (b *Backend) getLocked(id string) (*sandbox, error) {
	s, ok := b.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q %w", id, api.ErrNotFound)
	}
	return s, nil
}

func (b *Backend) newPIDLocked() int {
	b.nextPID++
	return b.nextPID
}

// footprintLocked is what a sandbox's process uses: as Options.Memory
// measures it, else its whole guest memory.
func (b *Backend) footprintLocked(s *sandbox) int {
	if b.opts.Memory == nil {
		return s.memoryMB
	}
	mb, err := b.opts.Memory.FootprintMB(s.pid)
	if err != nil {
		return 0
	}
	return mb
}

// accountLocked counts the host's memory without except's process (which
// is being replaced).
func (b *Backend) accountLocked(except *sandbox) capacity.Account {
	ds := make([]capacity.Desktop, 0, len(b.sandboxes))
	used := 0
	for _, s := range b.sandboxes {
		if s == except || !s.hasProcess() {
			continue
		}
		d := capacity.Desktop{Template: s.templateID, Running: s.state == backend.StateRunning, FootprintMB: b.footprintLocked(s), ExpectMB: s.memoryMB}
		used += d.FootprintMB
		ds = append(ds, d)
	}
	h := capacity.Host{TotalMB: b.opts.MemoryMB, AvailableMB: max(b.opts.MemoryMB-used, 0), PressureAvg10: -1}
	if b.opts.Memory != nil {
		if mh, err := b.opts.Memory.Host(); err == nil {
			h = mh
		}
	}
	return capacity.Count(h, capacity.Policy{LimitPercent: b.opts.LimitPercent, RunningReserveMB: b.opts.RunningReserveMB}, b.book, ds)
}

// expectLocked is what a new clone of a template is expected to use.
func (b *Backend) expectLocked(tplID string) int {
	b.book.Set(tplID, capacity.Profile{GuestMB: int(b.templates[tplID].MemoryBytes >> 20)})
	return b.book.Profile(tplID).Expect()
}

// reserveLocked refuses with ErrUnavailable when a process expected to
// use memMB (besides except's, which is being replaced) does not fit. A
// sandbox that exists coming back (existing: a restore, a reset) may go
// past the limit while the host has the room, as on QEMU
// (capacity.Account.FitsExisting).
func (b *Backend) reserveLocked(memMB int, except *sandbox, existing bool) error {
	if a := b.accountLocked(except); !a.Fits(memMB) && (!existing || !a.FitsExisting(memMB)) {
		return fmt.Errorf("%s: %w", a.Refusal("the sandbox", memMB), api.ErrUnavailable)
	}
	return nil
}

// observeCloneLocked refines the template's clone size from the clone's
// measured footprint.
func (b *Backend) observeCloneLocked(s *sandbox) {
	if b.opts.Memory != nil {
		b.book.ObserveClone(s.templateID, b.footprintLocked(s))
	}
}

func (b *Backend) transitionLocked(s *sandbox, op, to string) {
	s.log = append(s.log, fmt.Sprintf("%s %s: %s -> %s", b.now().Format(time.RFC3339Nano), op, s.state, to))
	s.state = to
}

func (s *sandbox) hasProcess() bool {
	return s.state == backend.StateRunning || s.state == backend.StatePaused || s.state == backend.StateIOError
}

func (s *sandbox) infoLocked() backend.Info {
	network := s.networkInfo
	if network.LastDenied != nil {
		last := *network.LastDenied
		network.LastDenied = &last
	}
	return backend.Info{
		ID: s.id, UID: s.uid, TemplateID: s.templateID, State: s.state, PID: s.pid,
		Display: "fake:" + s.id, Resolution: s.resolution, MemoryMB: s.memoryMB, CreatedAt: s.createdAt,
		Network: &network,
	}
}

// conflict is the ErrConflict error of op on s in its current state.
func (s *sandbox) conflict(op string) error {
	var why string
	switch s.state {
	case backend.StatePaused:
		why = "it is paused: resume it first"
	case backend.StateSaved:
		why = "it is saved to disk: restore or resume it first"
	case backend.StateStopped:
		why = "it is stopped: reset it to start it again"
	case StateGone:
		why = "it has no process (it exited or was killed): reset or delete it"
	case backend.StateIOError:
		why = "it stopped on a failed disk write: resume it when the disk has room"
	default:
		why = "it is " + s.state
	}
	return fmt.Errorf("%s %s: %s: %w", op, s.id, why, api.ErrConflict)
}

func (s *sandbox) needRunning(op string) error {
	if s.state == backend.StateRunning {
		return nil
	}
	return s.conflict(op)
}

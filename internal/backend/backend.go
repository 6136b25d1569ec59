// Package backend is the contract between hvkube's controllers and the
// hypervisors that run desktop VMs (qemu on Linux, hyperv on Windows).
//
// Terms. A template is a desktop image made ready to clone: booted once,
// waited on until its desktop answers, and snapshotted (RAM and device
// state) at that clean point. A sandbox is one VM cloned from a template.
// Both are named by IDs that hvkube chooses (DNS labels); the backend keeps
// whatever it needs under those IDs and can list them again after a restart
// of the server, since VMs outlive it.
//
// Run states. A sandbox is Running (vCPUs run), Paused (in RAM, vCPUs
// stopped: resume takes milliseconds), Saved (on disk, no process: restore
// takes about a second) or Stopped (no process and no saved state; only
// Reset or Delete apply). Creating a sandbox from a template lands it Paused.
// A running sandbox whose disk write failed (its host file system is full)
// is IOError: the hypervisor stopped its vCPUs so that the guest does not
// see the failure; Resume runs it again once writes can succeed, and fails
// (wrapping api.ErrUnavailable, the sandbox left IOError) while they
// cannot. Pause turns it Paused.
//
// Every method takes a context that bounds the call only: a VM's life is
// never tied to a request's context. Methods are safe for concurrent use;
// calls for one ID are serialised by the backend. Missing IDs are reported
// with errors wrapping api.ErrNotFound, invalid arguments with
// api.ErrInvalid, and requests the host cannot meet (memory) with
// api.ErrUnavailable.
package backend

import (
	"context"
	"io"
	"net"
	"sort"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/capacity"
)

// Run states of a sandbox.
const (
	StateRunning = "Running"
	StatePaused  = "Paused"
	StateSaved   = "Saved"
	StateStopped = "Stopped"
	// StateIOError: the hypervisor stopped a running sandbox after a
	// failed disk write (QEMU's io-error run state; Hyper-V's
	// Paused-Critical).
	StateIOError = "IOError"
)

// TemplateSpec is what a backend needs to build a template.
type TemplateSpec struct {
	// ID names the template snapshot; a new spec (a new generation) gets a
	// new ID, so old snapshots stay valid for the sandboxes cloned from them.
	ID     string
	Image  api.QEMUImage
	HyperV *api.HyperVImage
	// GuestOS is the template's spec.guest.os: "linux" or "windows".
	GuestOS  string
	CPU      int
	MemoryMB int
	// GPU asks for a GPU partition (hyperv); backends without GPUs refuse
	// it with api.ErrUnsupported.
	GPU        bool
	Resolution string
	// NetworkMode is the template's spec.network.mode: nat (or empty)
	// gives the snapshot a network device where the image declares a
	// network, none gives it none. Clones have the device set of their
	// snapshot, whatever their own spec says.
	NetworkMode string
}

// TemplateInfo describes a built template.
type TemplateInfo struct {
	ID        string
	CreatedAt time.Time
	BootTime  time.Duration // cold boot to a ready desktop, when built
	// Stopped is how long the sandbox stood stopped, when captured.
	Stopped     time.Duration
	MemoryBytes int64
	DiskBytes   int64
	Resolution  string
	// Network reports whether the snapshot has a network device. A
	// template asked for one (NetworkMode nat) has none when its image
	// declares no network, or when it was built by a backend without
	// networks; its clones then have no network.
	Network bool
	// Automation is what the guest offers automation clients, as its
	// image declares it (the zero value: nothing).
	Automation api.Automation
}

// SandboxSpec is what a backend needs to create a sandbox.
type SandboxSpec struct {
	ID         string
	UID        string // the Sandbox object's uid, kept to tell orphans apart
	TemplateID string
	CPU        int
	MemoryMB   int
	// Resolution, when it differs from the template's, is applied in the
	// guest after the clone, or refused with api.ErrUnsupported.
	Resolution string
	Hostname   string
	// Network is the sandbox's network as api.EffectiveNetwork gives it
	// (its mode and egress rules, or its template's); the zero value is
	// nat with the default egress policy. A sandbox of a snapshot without
	// a network device has no network whatever this says (Info.Network
	// says why).
	Network api.Network
}

// Info is what Inspect and List report of a sandbox.
type Info struct {
	ID         string
	UID        string
	TemplateID string
	State      string
	PID        int
	// Display is where its screen is served: "unix:/path/vnc.sock" or
	// "tcp:127.0.0.1:5901".
	Display    string
	Resolution string
	MemoryMB   int
	CreatedAt  time.Time
	// Network is the sandbox's network, or nil from a backend that does
	// not report one.
	Network *NetworkInfo
}

// NetworkInfo is what a backend reports of a sandbox's network.
type NetworkInfo struct {
	// Mode is what the sandbox runs with: nat, or none (no network device,
	// or a device whose policy lets nothing through).
	Mode string
	// Address is the guest's address on its network; empty with mode none.
	Address string
	// Denied counts the connections and DNS questions the egress policy
	// refused, over the sandbox's life; LastDenied is the latest of them.
	Denied     int64
	LastDenied *api.NetworkDenial
	// Unavailable, when set, says why a sandbox that asked for a network
	// has none (its template's snapshot has no network device: rebuild
	// the template).
	Unavailable string
}

// Capacity is the host's memory as the backend admits sandboxes, in MiB.
// Backends that measure what their VMs use (qemu) count that; others
// (hyperv) count the memory the VMs were given.
type Capacity struct {
	TotalMemoryMB     int
	AvailableMemoryMB int
	// LimitMemoryMB is the most the sandboxes may use, reserves included.
	LimitMemoryMB int
	// UsedMemoryMB is what the sandboxes' VMs use now.
	UsedMemoryMB int
	// ReservedMemoryMB is held for VMs being made and for running ones to
	// grow in.
	ReservedMemoryMB int
	// FreeMemoryMB is what a new sandbox may still take.
	FreeMemoryMB int
	// Running and Paused count the VMs with a process.
	Running, Paused int
	// MemoryPressure is the share (percent) of the last 10 s in which
	// tasks waited for memory (Linux PSI); negative when unknown.
	MemoryPressure float64
	// Templates are the templates in use: what their clones take, and
	// how many more fit now.
	Templates []TemplateCapacity
}

// TemplateCapacity is one template's share of Capacity.
type TemplateCapacity struct {
	ID string
	// GuestMB is its guest memory; CloneMB what a readied clone uses;
	// ColdMB what one as cloned uses, where clones stay so until readied
	// (backend.Readier); WorkingSetMB the most a running clone was seen
	// to use (0: not measured).
	GuestMB, CloneMB, ColdMB, WorkingSetMB int
	// Fit is how many more clones fit now.
	Fit int
}

// CapacityOf reports an account and the templates' profiles.
func CapacityOf(a capacity.Account, book *capacity.Book, templates []string) Capacity {
	c := Capacity{
		TotalMemoryMB: a.TotalMB, AvailableMemoryMB: a.AvailableMB, LimitMemoryMB: a.LimitMB,
		UsedMemoryMB: a.UsedMB, ReservedMemoryMB: a.ReservedMB, FreeMemoryMB: max(a.FreeMB, 0),
		Running: a.Running, Paused: a.Paused, MemoryPressure: a.PressureAvg10,
	}
	sort.Strings(templates)
	for _, id := range templates {
		p := book.Profile(id)
		c.Templates = append(c.Templates, TemplateCapacity{ID: id, GuestMB: p.GuestMB, CloneMB: p.CloneMB, ColdMB: p.ColdMB, WorkingSetMB: p.WorkingSetMB, Fit: a.More(p.Expect())})
	}
	return c
}

// Progress reports a step of a long operation.
type Progress func(step string)

// Backend runs sandboxes. Optional abilities (screen, input, guest access)
// are the separate interfaces below, found by type assertion.
type Backend interface {
	// Name is "qemu" or "hyperv".
	Name() string

	// BuildTemplate makes spec.ID ready to clone, cold-booting the image and
	// snapshotting it when the desktop answers. It blocks for the whole
	// build (seconds to a minute) and reports steps to progress. It is
	// idempotent: a template that is already built returns its info at once.
	BuildTemplate(ctx context.Context, spec TemplateSpec, progress Progress) (TemplateInfo, error)
	// InspectTemplate returns a built template, or ErrNotFound.
	InspectTemplate(ctx context.Context, id string) (TemplateInfo, error)
	// DeleteTemplate removes a template's snapshot. Sandboxes cloned from it
	// keep working only if the backend says so; callers delete templates
	// that no sandbox uses. Deleting a missing template is not an error.
	DeleteTemplate(ctx context.Context, id string) error

	// Create clones a sandbox from a built template and returns it Paused.
	// If the clone path fails the backend falls back to a cold boot (the
	// sandbox then comes back Running). Create is idempotent: an ID that
	// exists is returned as it is.
	Create(ctx context.Context, spec SandboxSpec) (Info, error)
	// Pause stops the vCPUs; pausing a paused sandbox does nothing.
	Pause(ctx context.Context, id string) error
	// Resume runs a Paused sandbox (or restores a Saved one), sets the guest
	// clock, and returns when the guest agent answers. Resuming a running
	// sandbox does nothing.
	Resume(ctx context.Context, id string) error
	// Save writes the sandbox's state to disk and ends its process; it is
	// then Saved. Saving a saved sandbox does nothing.
	Save(ctx context.Context, id string) error
	// Restore brings a Saved sandbox back, Paused. Restoring a sandbox that
	// has a process does nothing.
	Restore(ctx context.Context, id string) error
	// Reset returns the sandbox to its clean state (its template's snapshot,
	// or its own checkpoint if it has one), Paused. Everything written since
	// is gone.
	Reset(ctx context.Context, id string) error
	// Stop ends the sandbox's process without saving; its disk is kept
	// until Delete. Stopping a stopped sandbox does nothing.
	Stop(ctx context.Context, id string) error
	// Delete ends the sandbox and removes everything it had: processes,
	// sockets, files. Deleting a missing sandbox is not an error.
	Delete(ctx context.Context, id string) error
	// Inspect reports a sandbox as it really is.
	Inspect(ctx context.Context, id string) (Info, error)
	// List reports every sandbox the backend has, including those started
	// before the server restarted (which it adopts).
	List(ctx context.Context) ([]Info, error)
	// Ready reports whether the sandbox's guest answers and its desktop is
	// up (nil), or why not. It may run a program in the guest.
	Ready(ctx context.Context, id string) error
	// Alive is the cheap health check of a running sandbox: the guest
	// agent answers.
	Alive(ctx context.Context, id string) error
	// Capacity reports host memory. Create refuses with ErrUnavailable when
	// a new sandbox would pass the limit.
	Capacity(ctx context.Context) (Capacity, error)
	// Close releases connections; VMs keep running.
	Close() error
}

// Capturer is the optional ability of a backend to make a template of a
// sandbox as it is now: its memory and disk become a snapshot that new
// sandboxes clone from, as from a built template ("set the desktop up,
// then clone it").
type Capturer interface {
	// CaptureTemplate writes template id from sandbox sandboxID. The
	// sandbox stops for the copy, then runs again (or stays paused) as it
	// was. An id that exists is ErrConflict; a sandbox without a process,
	// ErrConflict.
	CaptureTemplate(ctx context.Context, sandboxID, id string, progress Progress) (TemplateInfo, error)
}

// Checkpointer is the optional ability of a backend to save a sandbox as
// it is now, memory and disk, while it goes on (it stands stopped for the
// copy), and to bring it back to that point later: after its process died,
// or the host restarted. A checkpoint is the sandbox's own: Reset and
// Delete drop it, and a later checkpoint replaces it.
type Checkpointer interface {
	// Checkpoint saves the sandbox now and returns how long its guest
	// stood stopped. The sandbox runs on, or stays paused, as it was.
	Checkpoint(ctx context.Context, id string) (time.Duration, error)
	// RestoreCheckpoint brings the sandbox back to its latest checkpoint,
	// Paused, ending its process first if it has one. ErrNotFound when it
	// has none.
	RestoreCheckpoint(ctx context.Context, id string) error
}

// Readier is the optional ability of a backend whose fresh clones pay on
// their first resume for work that can be done ahead (QEMU under TCG: the
// guest's code translated anew in the clone's process, its identity
// written), at a cost in memory (the translated code: about twice a cold
// clone's footprint). Such a backend leaves clones as cloned until asked;
// the node asks for the idle desktops next in line for a claim, so that
// memory goes to the desktops about to be used rather than to every one.
type Readier interface {
	// Unreadied lists the sandboxes still as cloned and not queued to be
	// readied.
	Unreadied(ctx context.Context) []string
	// ReadyAhead queues a sandbox to be readied in the background: run,
	// given its identity and clock, paused again. A sandbox readied,
	// running, gone or already queued is left alone; one whose readying
	// would not fit in the host's memory is refused with ErrUnavailable.
	ReadyAhead(ctx context.Context, id string) error
}

// ScreenshotOptions shape a screenshot.
type ScreenshotOptions struct {
	// Format is "png" (default) or "jpeg".
	Format  string
	Quality int // JPEG quality, 1..100
	// Width and Height scale the image when non-zero.
	Width, Height int
}

// Screen captures a sandbox's screen.
type Screen interface {
	// Screenshot returns the encoded image and its content type. The
	// sandbox must be running or paused.
	Screenshot(ctx context.Context, id string, opts ScreenshotOptions) ([]byte, string, error)
	// ScreenSize returns the screen's current size in pixels.
	ScreenSize(ctx context.Context, id string) (width, height int, err error)
}

// Raw input event kinds.
const (
	EventMove   = "move"   // pointer to X, Y (pixels of the desktop)
	EventButton = "button" // Button pressed (Down) or released
	EventKey    = "key"    // Key pressed (Down) or released
)

// Pointer buttons. The wheel is four buttons that are pressed and released
// once per notch.
const (
	ButtonLeft       = "left"
	ButtonRight      = "right"
	ButtonMiddle     = "middle"
	ButtonBack       = "back"
	ButtonForward    = "forward"
	ButtonWheelUp    = "wheel-up"
	ButtonWheelDown  = "wheel-down"
	ButtonWheelLeft  = "wheel-left"
	ButtonWheelRight = "wheel-right"
)

// InputEvent is one raw input event. The action layer (internal/display)
// turns computer-use actions into these; backends only deliver them.
type InputEvent struct {
	Kind string
	// X and Y are the pointer's position in desktop pixels (EventMove).
	X, Y   int
	Button string
	// Key is a QEMU QKeyCode name ("a", "shift", "ret"): the key map of
	// internal/display.
	Key  string
	Down bool
}

// Input delivers raw input events to a running sandbox, in order. A
// backend paces them as its device needs (QEMU's PS/2 queue drops keys
// sent back to back).
type Input interface {
	SendInput(ctx context.Context, id string, evs []InputEvent) error
}

// TextInput types text that the key map cannot (characters beyond ASCII)
// by other means, through the guest.
type TextInput interface {
	TypeText(ctx context.Context, id, text string) error
}

// Cursor reports where the guest's pointer is.
type Cursor interface {
	CursorPosition(ctx context.Context, id string) (x, y int, err error)
}

// ExecRequest runs a program in the guest. Args are passed as a list, never
// through a shell.
type ExecRequest struct {
	Path  string
	Args  []string
	Env   []string
	Stdin []byte
	// Detach starts the program and returns at once, with no result: for
	// programs that keep running (a sandbox's startup commands).
	Detach bool
}

// ExecResult is a finished guest program.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// Guest reaches inside a running sandbox.
type Guest interface {
	Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error)
	CopyIn(ctx context.Context, id, guestPath string, r io.Reader) error
	CopyOut(ctx context.Context, id, guestPath string, w io.Writer) error
	ClipboardGet(ctx context.Context, id string) (string, error)
	ClipboardSet(ctx context.Context, id, text string) error
}

// Display serves a sandbox's live screen.
type Display interface {
	// DialDisplay connects to the sandbox's VNC server.
	DialDisplay(ctx context.Context, id string) (io.ReadWriteCloser, error)
}

// Logs reads a sandbox's console log.
type Logs interface {
	// Logs returns the sandbox's console output so far; the caller closes it.
	Logs(ctx context.Context, id string) (io.ReadCloser, error)
}

// PortDialer reaches TCP ports inside a sandbox's guest: the port forwards
// of the API (…/sandboxes/{name}/ports/{port}/…) go through it, for
// automation clients (Chromium's DevTools, WebDriver) and servers that run
// in the guest.
type PortDialer interface {
	// DialPort opens a TCP connection to port (1..65535) inside sandbox
	// id's guest, over the sandbox's own network: to what listens on the
	// guest's loopback address where the backend can reach it (Chromium's
	// DevTools and chromedriver listen only there), else on the guest's
	// address on that network. It never opens a listening port on the
	// host, and the connection never passes through one.
	//
	// The sandbox must be running (ErrConflict otherwise; ErrNotFound when
	// it does not exist); a port out of range is ErrInvalid, and a
	// sandbox without a network an error wrapping api.ErrUnsupported. A
	// port nothing listens on, or a guest that does not answer, is an
	// error of no category; ctx bounds the dial only (its error when it
	// ends first). The connection supports deadlines; its life is the
	// caller's, who closes it, and it does not end with ctx.
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
}

// Package guest knows the operating system inside a desktop VM: how to tell
// that its desktop is up, give a clone its own identity, set its clock,
// type text the keyboard map cannot, find the pointer and use the
// clipboard. It knows no hypervisor: it runs programs through the Runner a
// backend gives it (QEMU's guest agent, Hyper-V's PowerShell Direct), so a
// backend's work on the guest is the same whatever carries it.
package guest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// Operating systems.
const (
	Linux   = "linux"
	Windows = "windows"
)

// Runner runs a program in the guest and waits for it (backend.Guest's
// Exec, bound to one VM).
type Runner interface {
	Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error)
}

// FileWriter is a Runner that can also write a guest file without running
// a program (QEMU's guest agent can), which is faster.
type FileWriter interface {
	WriteFile(ctx context.Context, path string, data []byte) error
}

// OS is what a backend knows of the operating system in its guests.
type OS interface {
	// Name is Linux or Windows.
	Name() string
	// Ready reports whether the desktop is up and a user is logged on.
	Ready(ctx context.Context, r Runner) error
	// SetResolution changes the screen's size from inside the guest, or
	// says api.ErrUnsupported.
	SetResolution(ctx context.Context, r Runner, resolution string) error
	// Identity gives a fresh clone its own name and machine identity.
	Identity(ctx context.Context, r Runner, hostname string) error
	// Rename gives a guest that already has its own machine identity a
	// new hostname, the rest of Identity left as it is.
	Rename(ctx context.Context, r Runner, hostname string) error
	// SetClock sets the guest's clock (after a resume from a snapshot).
	SetClock(ctx context.Context, r Runner, t time.Time) error
	// TypeText types text into the focused window from inside the guest
	// (for characters the host's keyboard cannot send).
	TypeText(ctx context.Context, r Runner, text string) error
	// Cursor reports where the pointer is on the desktop.
	Cursor(ctx context.Context, r Runner) (x, y int, err error)
	ClipboardGet(ctx context.Context, r Runner) (string, error)
	ClipboardSet(ctx context.Context, r Runner, text string) error
	// IsAbs reports whether p is an absolute path in the guest.
	IsAbs(p string) bool
	// Glob lists the regular files that match an absolute path pattern
	// (* ? [...]); the pattern is expanded, never run.
	Glob(ctx context.Context, r Runner, pattern string) ([]string, error)
	// ProcessRunning fails unless a process of that name runs.
	ProcessRunning(ctx context.Context, r Runner, name string) error
	// Listening fails unless something accepts TCP connections on port
	// (on the guest's loopback).
	Listening(ctx context.Context, r Runner, port int) error
	// Probes are the commands the conformance suite looks inside with.
	Probes() Probes
}

// Probes are guest commands that let the conformance suite check what a
// backend did, whatever the guest. They are for tests: text and paths are
// the suite's own constants.
type Probes interface {
	// Text is what a probe printed, from its standard output.
	Text(stdout []byte) string
	// TempPath is a path in a directory every user may write.
	TempPath(name string) string
	// HomePath is a path in the desktop user's home directory.
	HomePath(name string) string
	// TypedWrite is a line that, typed into the desktop's terminal and
	// followed by Return, writes text and a newline to path.
	TypedWrite(text, path string) string
	// ReadFile prints a file's content.
	ReadFile(path string) backend.ExecRequest
	// Touch creates an empty file.
	Touch(path string) backend.ExecRequest
	// Exists exits 0 when path exists and non-zero when it does not.
	Exists(path string) backend.ExecRequest
	// Sync flushes the guest's file writes to disk.
	Sync() backend.ExecRequest
	// Hostname prints the guest's host name.
	Hostname() backend.ExecRequest
	// IDs prints the identities that differ between clones (machine id,
	// boot id), separated by white space.
	IDs() backend.ExecRequest
}

// For returns the OS named by a template's spec.guest.os ("" is Linux).
// helpers are the Linux image's helper commands (see Linux).
func For(name string, helpers map[string]string) (OS, error) {
	switch name {
	case "", Linux:
		return NewLinux(helpers), nil
	case Windows:
		return WindowsOS{}, nil
	}
	return nil, api.Invalid("spec.guest.os", "%q: want linux or windows", name)
}

// run runs req and fails unless it exits 0, with the program's error text.
func run(ctx context.Context, r Runner, req backend.ExecRequest) (backend.ExecResult, error) {
	res, err := r.Exec(ctx, req)
	if err != nil {
		return res, err
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(string(res.Stderr))
		if msg == "" {
			msg = strings.TrimSpace(string(res.Stdout))
		}
		return res, fmt.Errorf("%s exited %d: %s", req.Path, res.ExitCode, msg)
	}
	return res, nil
}

// Bind makes a Runner of one sandbox of a backend.Guest.
func Bind(g backend.Guest, sandbox string) Runner { return bound{g, sandbox} }

type bound struct {
	g  backend.Guest
	id string
}

func (b bound) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	return b.g.Exec(ctx, b.id, req)
}

// Package direct is the contract for reaching one VM straight through its
// own channels, its monitor and its guest agent, named by their sockets:
// no server, store or Backend in between. The tools for developing guest
// images (internal/vmdebug, `hvkube debug`) use it on a VM that hvkube does
// not manage, such as the one images/linux-desktop/boot.sh starts.
//
// A driver fills it in with the clients and mappings its Backend uses (the
// QEMU driver's qemu.Direct, over QMP and the QEMU guest agent), so that
// what an image's self-test checks is what a sandbox gets; cmd/hvkube
// chooses the driver. It speaks the backend's terms: raw input events in
// desktop pixels, guest programs run with an argument list.
package direct

import (
	"context"
	"encoding/json"
	"time"

	"github.com/hvkube/hvkube/internal/backend"
)

// Dialer reaches a VM's monitor and guest agent by their sockets.
type Dialer interface {
	// DialMonitor connects to the monitor at socket; the caller closes it.
	DialMonitor(ctx context.Context, socket string) (Monitor, error)
	// Agent returns the guest agent at socket. It connects when first
	// used, not before; the caller closes it.
	Agent(socket string) Agent
}

// Monitor is a VM's monitor.
type Monitor interface {
	// Command runs one monitor command with args (a JSON object, nil for
	// none) and returns its answer as JSON (empty when it has none).
	Command(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error)
	// Screendump has the VM write its screen to path as a binary PPM (P6).
	// The VM's process opens the file itself, and may run as another user.
	Screendump(ctx context.Context, path string) error
	// SendEvent delivers one raw input event at once; a move's X and Y are
	// pixels of a width x height screen. It does not pace events: the
	// caller spaces them as the VM's devices need. An event the contract
	// does not know is an error wrapping api.ErrInvalid.
	SendEvent(ctx context.Context, e backend.InputEvent, width, height int) error
	// Close ends the connection.
	Close() error
}

// Agent is a VM's guest agent. The agent serves one client at a time: an
// Agent keeps one connection for all its calls (and connects again when it
// breaks), and other clients wait until Close. Its calls are serialised.
type Agent interface {
	// Sync returns once the agent answers; ctx bounds the wait.
	Sync(ctx context.Context) error
	// Exec runs a program in the guest and waits for it, capturing its
	// output. A non-empty Env is the program's whole environment; with
	// none it inherits the agent's. A program ended by signal N exits
	// 128+N. With Detach it starts the program and returns at once, with
	// no result.
	Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error)
	// SetTime sets the guest's clock to t.
	SetTime(ctx context.Context, t time.Time) error
	// Time reads the guest's clock.
	Time(ctx context.Context) (time.Time, error)
	// Close ends the connection, so that another client may talk to the
	// agent.
	Close() error
}

package qmp

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// RunState is the VM run state reported by query-status.
type RunState string

// Run states a backend meets in practice (QAPI RunState has a few more).
const (
	StatePrelaunch     RunState = "prelaunch"      // started with -S, never run
	StateRunning       RunState = "running"        // vCPUs running
	StatePaused        RunState = "paused"         // stopped by stop (or after incoming migration with -S)
	StateInMigrate     RunState = "inmigrate"      // waiting for or receiving incoming migration
	StatePostMigrate   RunState = "postmigrate"    // outgoing migration completed; VM stopped
	StateFinishMigrate RunState = "finish-migrate" // final stage of outgoing migration
	StateShutdown      RunState = "shutdown"       // guest shut down (QEMU run with -no-shutdown)
	StateSuspended     RunState = "suspended"      // guest suspended to RAM
	StateInternalError RunState = "internal-error"
	StateIOError       RunState = "io-error"
	StateGuestPanicked RunState = "guest-panicked"
)

// StatusInfo is the reply to query-status.
type StatusInfo struct {
	// Running reports whether the vCPUs are running.
	Running bool `json:"running"`
	// Status is the run state.
	Status RunState `json:"status"`
}

// Status returns the VM's run state (query-status).
func (m *Monitor) Status(ctx context.Context) (StatusInfo, error) {
	var st StatusInfo
	err := m.Execute(ctx, "query-status", nil, &st)
	return st, err
}

// Stop pauses the vCPUs (stop). QEMU emits a STOP event. Stopping a VM that
// is already paused succeeds.
func (m *Monitor) Stop(ctx context.Context) error {
	return m.Execute(ctx, "stop", nil, nil)
}

// Cont resumes the vCPUs (cont), including a VM started with -S. QEMU emits a
// RESUME event (before the reply). Continuing a running VM succeeds.
func (m *Monitor) Cont(ctx context.Context) error {
	return m.Execute(ctx, "cont", nil, nil)
}

// Quit asks QEMU to exit (quit) and waits until it has closed the monitor
// connection, which it does as the process exits; QEMU sends a SHUTDOWN event
// with reason "host-qmp-quit" first. Quit returns nil once Done is closed, or
// the ctx error if that does not happen in time. The process may still be
// tearing down when Quit returns; wait on it to be sure it is gone.
func (m *Monitor) Quit(ctx context.Context) error {
	err := m.Execute(ctx, "quit", nil, nil)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("qmp quit: wait for exit: %w", context.Cause(ctx))
	}
}

// ScreendumpPPM writes the primary display to file as a binary PPM (P6,
// maxval 255) and returns once the file is complete. file is opened by the
// QEMU process, so it must be a path QEMU can write. PPM is QEMU's default
// screendump format, so no "format" argument is sent and this works on QEMU
// versions before 7.1 too. (The PNG format added in 7.1 has red and blue
// swapped in 7.2; encode PPM in Go instead.)
func (m *Monitor) ScreendumpPPM(ctx context.Context, file string) error {
	return m.Execute(ctx, "screendump", map[string]string{"filename": file}, nil)
}

// MouseInfo describes one pointer device (query-mice).
type MouseInfo struct {
	Name  string `json:"name"`
	Index int    `json:"index"`
	// Current reports whether the device receives pointer events that more
	// than one device could take (buttons, wheel). A guest driver activates
	// the USB tablet when it starts using it; before that the PS/2 mouse is
	// current.
	Current bool `json:"current"`
	// Absolute reports whether the device takes absolute coordinates.
	Absolute bool `json:"absolute"`
}

// QueryMice lists the VM's pointer devices (query-mice).
func (m *Monitor) QueryMice(ctx context.Context) ([]MouseInfo, error) {
	var mice []MouseInfo
	err := m.Execute(ctx, "query-mice", nil, &mice)
	return mice, err
}

// BlockIOError is the data of a BLOCK_IO_ERROR event: a disk request
// failed. With Action "stop" QEMU stops the VM (run state io-error, a STOP
// event follows) and retries the request when it is continued; with
// "report" the guest sees the error.
type BlockIOError struct {
	Device    string `json:"device"`
	NodeName  string `json:"node-name"`
	Operation string `json:"operation"` // "read" or "write"
	Action    string `json:"action"`    // "stop", "report" or "ignore"
	// NoSpace is set when the request failed for want of room (ENOSPC).
	NoSpace bool   `json:"nospace"`
	Reason  string `json:"reason"` // the host's error, "No space left on device"
}

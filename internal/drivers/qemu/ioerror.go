package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
)

// A disk write that finds no room (the file system of a sandbox's overlay
// is full) stops the guest: under QEMU's default write-error policy
// (werror=enospc) the VM enters the io-error run state instead of failing
// the write in the guest, and the failed requests are retried when the VM
// is continued. Inspect reports such a sandbox as backend.StateIOError;
// Resume continues it when there is room again, and fails at once, saying
// why, when there is none or the guest stops again.

// minRoomToWrite is the least free space on a sandbox's file system for
// which Resume tries to continue a guest stopped on a failed write: a
// qcow2 overlay grows by 64 KiB clusters plus their tables.
const minRoomToWrite = 1 << 20

// roomToWrite returns nil if the file system of dir has room for a
// guest's writes, else an error wrapping api.ErrUnavailable that says how
// little it has. A free space that cannot be read counts as room: trying
// costs little, and a guest that stops again is heard (watchIOStop).
func roomToWrite(dir string) error {
	free, err := freeSpace(dir)
	if err != nil || free >= minRoomToWrite {
		return nil
	}
	return fmt.Errorf("the file system of its disk has %d KiB free: %w", free>>10, api.ErrUnavailable)
}

// ioStopWatch hears a VM stop on a failed disk write (BLOCK_IO_ERROR with
// action "stop") while it is being resumed.
type ioStopWatch struct {
	sub  *qmp.Subscription
	done chan struct{} // closed when the watching goroutine ends

	mu     sync.Mutex // guards the following fields
	why    string
	cancel context.CancelFunc
}

// watchIOStop starts watching mon; call stop when done.
func watchIOStop(mon *qmp.Monitor) *ioStopWatch {
	w := &ioStopWatch{sub: mon.Subscribe("BLOCK_IO_ERROR"), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ev := range w.sub.C {
			var e qmp.BlockIOError
			if json.Unmarshal(ev.Data, &e) != nil || e.Action != "stop" {
				continue
			}
			why := e.Operation + " on " + e.Device
			if e.Reason != "" {
				why = e.Reason + ": " + why
			}
			w.mu.Lock()
			if w.why == "" {
				w.why = why
			}
			cancel := w.cancel
			w.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		}
	}()
	return w
}

// onStop has cancel called when the VM stops on a failed write (at once if
// it has already).
func (w *ioStopWatch) onStop(cancel context.CancelFunc) {
	w.mu.Lock()
	w.cancel = cancel
	stopped := w.why != ""
	w.mu.Unlock()
	if stopped {
		cancel()
	}
}

// reason says why the VM stopped on a failed write, or "" if it did not.
func (w *ioStopWatch) reason() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.why
}

// stop ends the watch.
func (w *ioStopWatch) stop() {
	w.sub.Cancel()
	<-w.done
}

package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
)

var (
	_ backend.Screen    = (*Backend)(nil)
	_ backend.Input     = (*Backend)(nil)
	_ backend.TextInput = (*Backend)(nil)
	_ backend.Cursor    = (*Backend)(nil)
	_ backend.Guest     = (*Backend)(nil)
	_ backend.Display   = (*Backend)(nil)
)

// Screenshot implements backend.Screen. It encodes the sandbox's kept
// screen (keptscreen.go), which says how fresh that is; when the screen
// cannot be kept, a QMP screendump (screendumpLocked). Agents often look
// at a screen that has not changed: the last encoding is kept and served
// again while the screen and the options are the same.
func (b *Backend) Screenshot(ctx context.Context, id string, opts backend.ScreenshotOptions) ([]byte, string, error) {
	v, err := b.rlockRunning(id)
	if err != nil {
		return nil, "", err
	}
	defer v.mu.RUnlock()
	format := display.Format(opts.Format)
	if opts.Format == "" {
		format = display.PNG
	}
	eo := display.EncodeOptions{Format: format, Quality: opts.Quality, Width: opts.Width, Height: opts.Height}
	v.scr.Lock()
	defer v.scr.Unlock()
	if k := b.keptScreenLocked(ctx, v); k != nil {
		data, err := b.keptShotLocked(ctx, v, k, opts, eo)
		var bad invalidOptions
		switch {
		case err == nil:
			return data, format.ContentType(), nil
		case errors.As(err, &bad):
			return nil, "", api.Invalid("format", "%v", bad.error)
		case ctx.Err() != nil:
			return nil, "", err
		}
		b.log.Warn("the kept screen failed; taking a screendump", "sandbox", v.id, "err", err)
		v.kept.p.CompareAndSwap(k, failedKept(err))
		k.close()
	}
	return b.screendumpLocked(ctx, v, opts, eo)
}

// keptScreenLocked returns v's kept screen, connecting it if there is
// none (or the last one failed more than keptRetry ago); nil when it
// cannot be had. v.scr is held.
func (b *Backend) keptScreenLocked(ctx context.Context, v *vm) *keptScreen {
	k := v.kept.load()
	usable, retry := k.state()
	if usable {
		return k
	}
	if !retry || b.bgCtx.Err() != nil {
		return nil
	}
	nk, err := dialKept(ctx, v.vncSocket())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		b.log.Warn("cannot keep the screen; screenshots take screendumps", "sandbox", v.id, "err", err)
		nk = failedKept(err)
	} else {
		// The connection ends with the backend at the latest.
		nk.hook(b.bgCtx)
	}
	if !v.kept.p.CompareAndSwap(k, nk) {
		nk.close() // the process went meanwhile
		return nil
	}
	if nk.err != nil {
		return nil
	}
	return nk
}

// keptShotLocked encodes v's kept screen k as opts say, or returns the
// last encoding if neither the screen nor the options changed since. v.scr
// is held.
func (b *Backend) keptShotLocked(ctx context.Context, v *vm, k *keptScreen, opts backend.ScreenshotOptions, eo display.EncodeOptions) ([]byte, error) {
	for i := 0; k.look() && i < 2; i++ {
		// QEMU may not have refreshed the screen for a while, or the whole
		// of a resized screen has not come yet.
		if err := k.fresh(ctx); err != nil {
			return nil, err
		}
	}
	if c := v.lastShot; c != nil && c.kept == k && c.gen == k.generation() && c.opts == opts {
		return c.data, nil
	}
	data, gen, err := k.encode(&b.enc, eo)
	if err != nil {
		return nil, err
	}
	v.lastShot = &shot{kept: k, gen: gen, opts: opts, data: data}
	return data, nil
}

// screendumpLocked takes a screenshot by QMP screendump to PPM in memory
// (tmpfs), encoded here; QEMU 7.2's own PNG output swaps red and blue.
// v.scr is held.
func (b *Backend) screendumpLocked(ctx context.Context, v *vm, opts backend.ScreenshotOptions, eo display.EncodeOptions) ([]byte, string, error) {
	path := filepath.Join(b.cfg.ShmDir, v.id+".ppm")
	defer os.Remove(path)
	if err := v.p.mon.ScreendumpPPM(ctx, path); err != nil {
		return nil, "", fmt.Errorf("screendump: %w", err)
	}
	raw, err := readInto(path, v.ppm)
	if err != nil {
		return nil, "", err
	}
	v.ppm = raw // the next screendump reads into the same memory
	sum := maphash.Bytes(screenSeed, raw)
	if c := v.lastShot; c != nil && c.kept == nil && c.sum == sum && c.opts == opts {
		return c.data, eo.Format.ContentType(), nil
	}
	var buf bytes.Buffer
	if err := b.enc.EncodePPM(&buf, raw, eo); err != nil {
		return nil, "", api.Invalid("format", "%v", err)
	}
	v.lastShot = &shot{sum: sum, opts: opts, data: buf.Bytes()}
	return v.lastShot.data, eo.Format.ContentType(), nil
}

var screenSeed = maphash.MakeSeed()

// readInto reads a whole file into buf, growing it if needed.
func readInto(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	n := int(fi.Size())
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// shot is the last screenshot of a VM: of the kept screen kept at its
// generation gen, or (kept nil) of a screendump whose PPM hashed to sum.
type shot struct {
	kept *keptScreen
	gen  uint64
	sum  uint64
	opts backend.ScreenshotOptions
	data []byte
}

// ScreenSize implements backend.Screen.
func (b *Backend) ScreenSize(ctx context.Context, id string) (int, int, error) {
	v, err := b.rlockVM(id)
	if err != nil {
		return 0, 0, err
	}
	defer v.mu.RUnlock()
	w, h, err := api.ParseResolution(v.meta.Resolution)
	return w, h, err
}

// SendInput implements backend.Input. Each key or button change is its
// own input-send-event (QEMU loses a press and release sent in one batch),
// and key events are paced (see keyGap).
func (b *Backend) SendInput(ctx context.Context, id string, evs []backend.InputEvent) error {
	v, err := b.rlockVM(id)
	if err != nil {
		return err
	}
	w, h, err := api.ParseResolution(v.meta.Resolution)
	if err == nil {
		err = checkEvents(evs, w, h)
	}
	if err == nil {
		err = v.needProcess()
	}
	var mon *qmp.Monitor
	if err == nil {
		mon = v.p.mon
	}
	kept := v.kept.load()
	// Key events are paced: the lock is not held for them.
	v.mu.RUnlock()
	if err != nil {
		return err
	}
	lastKey := false
	for _, e := range evs {
		// The keyboard and the tablet are two devices the guest drains
		// at its own pace: a key sent right after a click, in this call
		// or the one before, can reach applications before it (a
		// ctrl+click arrives as a plain one, text typed into the window
		// the click was to focus goes elsewhere).
		if d := v.pace.next(e.Kind == backend.EventKey); d > 0 {
			if err := clock.Sleep(ctx, d); err != nil {
				return err
			}
		}
		if e.Kind == backend.EventKey && lastKey {
			if err := clock.Sleep(ctx, keyGap); err != nil {
				return err
			}
		}
		lastKey = e.Kind == backend.EventKey
		if err := mon.InputSendEvent(ctx, qmpEvents(e, w, h)); err != nil {
			return err
		}
	}
	// Whoever sends input looks at the screen next: the kept screen
	// follows closely from now on.
	kept.look()
	return nil
}

// qmpEvents is the input-send-event of one raw event, checked by
// checkEvents, on a w x h screen: a move's pixels map to the tablet's
// range.
func qmpEvents(e backend.InputEvent, w, h int) []qmp.InputEvent {
	switch e.Kind {
	case backend.EventMove:
		return qmp.AbsMove(qmp.PixelToAbs(e.X, e.Y, w, h))
	case backend.EventButton:
		if e.Down {
			return []qmp.InputEvent{qmp.ButtonDown(qmp.Button(qemuButton(e.Button)))}
		}
		return []qmp.InputEvent{qmp.ButtonUp(qmp.Button(qemuButton(e.Button)))}
	case backend.EventKey:
		if e.Down {
			return []qmp.InputEvent{qmp.KeyDown(e.Key)}
		}
		return []qmp.InputEvent{qmp.KeyUp(e.Key)}
	}
	return nil
}

// qemuButton is QEMU's InputButton name of a button: back and forward are
// its side and extra buttons.
func qemuButton(b string) string {
	switch b {
	case backend.ButtonBack:
		return "side"
	case backend.ButtonForward:
		return "extra"
	}
	return b
}

// checkEvents checks raw events against a width x height screen.
func checkEvents(evs []backend.InputEvent, w, h int) error {
	for i, e := range evs {
		switch e.Kind {
		case backend.EventMove:
			if err := display.CheckPoint(e.X, e.Y, w, h); err != nil {
				return api.Invalid(fmt.Sprintf("events[%d]", i), "%v", err)
			}
		case backend.EventButton:
			switch e.Button {
			case backend.ButtonLeft, backend.ButtonRight, backend.ButtonMiddle, backend.ButtonBack, backend.ButtonForward,
				backend.ButtonWheelUp, backend.ButtonWheelDown, backend.ButtonWheelLeft, backend.ButtonWheelRight:
			default:
				return api.Invalid(fmt.Sprintf("events[%d].button", i), "unknown button %q", e.Button)
			}
		case backend.EventKey:
			if !display.IsQCode(e.Key) {
				return api.Invalid(fmt.Sprintf("events[%d].key", i), "unknown key %q", e.Key)
			}
		default:
			return api.Invalid(fmt.Sprintf("events[%d].kind", i), "unknown event kind %q", e.Kind)
		}
	}
	return nil
}

// TypeText implements backend.TextInput.
func (b *Backend) TypeText(ctx context.Context, id, text string) error {
	g, err := b.guestOf(ctx, id)
	if err != nil {
		return err
	}
	return g.os.TypeText(ctx, g, text)
}

// CursorPosition implements backend.Cursor: the guest's X server says where
// the pointer is.
func (b *Backend) CursorPosition(ctx context.Context, id string) (int, int, error) {
	g, err := b.guestOf(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	return g.os.Cursor(ctx, g)
}

// keyGap paces key events. QEMU's PS/2 keyboard queue holds 16 bytes (a
// few keystrokes) and drops what does not fit; a guest that is busy, or
// starved of CPU on a loaded host, drains it slowly, and text sent back to
// back loses characters. About 20 ms a character keeps a stall of 100 ms
// inside the queue. (xdotool paces its typing for the same reason.)
const keyGap = 10 * time.Millisecond

// pace remembers when a VM's last key and pointer events went out, so that
// an event of one device waits deviceGap after the other's, across calls
// as within one.
type pace struct {
	mu           sync.Mutex
	key, pointer time.Time
}

// next is how long an event of the keyboard (key) or else the pointer must
// wait before it is sent, and records it as sent then.
func (p *pace) next(key bool) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	mine, other := &p.pointer, p.key
	if key {
		mine, other = &p.key, p.pointer
	}
	var d time.Duration
	if !other.IsZero() && !mine.After(other) {
		d = max(0, deviceGap-now.Sub(other))
	}
	if d > 0 || now.After(*mine) {
		*mine = now.Add(d)
	}
	return d
}

// deviceGap parts key events from pointer events next to them. The
// keyboard (PS/2) and the pointer (a USB tablet the guest polls) are two
// queues, and the guest's input stack sees them in the order it drains
// them: under software emulation, pointer events sent right after a key
// were seen landing about 100 ms after it.
const deviceGap = 200 * time.Millisecond

// Exec implements backend.Guest.
func (b *Backend) Exec(ctx context.Context, id string, req backend.ExecRequest) (backend.ExecResult, error) {
	if strings.TrimSpace(req.Path) == "" {
		return backend.ExecResult{}, api.Invalid("command", "required")
	}
	g, err := b.guestOf(ctx, id)
	if err != nil {
		return backend.ExecResult{}, err
	}
	return g.Exec(ctx, req)
}

// CopyIn implements backend.Guest.
func (b *Backend) CopyIn(ctx context.Context, id, guestPath string, r io.Reader) error {
	g, err := b.guestAt(ctx, id, guestPath)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	return g.ga.FileWrite(ctx, guestPath, data)
}

// CopyOut implements backend.Guest.
func (b *Backend) CopyOut(ctx context.Context, id, guestPath string, w io.Writer) error {
	g, err := b.guestAt(ctx, id, guestPath)
	if err != nil {
		return err
	}
	data, err := g.ga.FileRead(ctx, guestPath)
	if err != nil {
		return fmt.Errorf("read %s: %w", guestPath, err)
	}
	_, err = w.Write(data)
	return err
}

func (b *Backend) guestAt(ctx context.Context, id, guestPath string) (*guest, error) {
	g, err := b.guestOf(ctx, id)
	if err != nil {
		return nil, err
	}
	if !g.os.IsAbs(guestPath) {
		return nil, api.Invalid("path", "%q is not an absolute guest path", guestPath)
	}
	return g, nil
}

// ClipboardGet implements backend.Guest.
func (b *Backend) ClipboardGet(ctx context.Context, id string) (string, error) {
	g, err := b.guestOf(ctx, id)
	if err != nil {
		return "", err
	}
	return g.os.ClipboardGet(ctx, g)
}

// ClipboardSet implements backend.Guest.
func (b *Backend) ClipboardSet(ctx context.Context, id, text string) error {
	g, err := b.guestOf(ctx, id)
	if err != nil {
		return err
	}
	return g.os.ClipboardSet(ctx, g, text)
}

// DialDisplay implements backend.Display: a connection to the sandbox's VNC
// server (a unix socket).
func (b *Backend) DialDisplay(ctx context.Context, id string) (io.ReadWriteCloser, error) {
	v, err := b.rlockRunning(id)
	if err != nil {
		return nil, err
	}
	defer v.mu.RUnlock()
	var d net.Dialer
	return d.DialContext(ctx, "unix", v.vncSocket())
}

// Logs implements backend.Logs: the guest's serial console.
func (b *Backend) Logs(ctx context.Context, id string) (io.ReadCloser, error) {
	v, err := b.rlockVM(id)
	if err != nil {
		return nil, err
	}
	defer v.mu.RUnlock()
	return os.Open(filepath.Join(v.dir, "serial.log"))
}

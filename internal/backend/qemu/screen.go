package qemu

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/backend/qemu/qmp"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/display"
)

var (
	_ backend.Screen    = (*Backend)(nil)
	_ backend.Input     = (*Backend)(nil)
	_ backend.TextInput = (*Backend)(nil)
	_ backend.Cursor    = (*Backend)(nil)
	_ backend.Guest     = (*Backend)(nil)
	_ backend.Display   = (*Backend)(nil)
)

// Screenshot implements backend.Screen: QMP screendump to PPM in memory
// (tmpfs), encoded here; QEMU 7.2's own PNG
// output swaps red and blue. Agents often look at a screen that has not
// changed: the last encoding is kept and served again while the pixels and
// the options are the same.
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
	v.scr.Lock()
	defer v.scr.Unlock()
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
	if c := v.lastShot; c != nil && c.sum == sum && c.opts == opts {
		return c.data, c.ctype, nil
	}
	var buf bytes.Buffer
	if err := b.enc.EncodePPM(&buf, raw, display.EncodeOptions{Format: format, Quality: opts.Quality, Width: opts.Width, Height: opts.Height}); err != nil {
		return nil, "", api.Invalid("format", "%v", err)
	}
	v.lastShot = &shot{sum: sum, opts: opts, data: buf.Bytes(), ctype: format.ContentType()}
	return v.lastShot.data, v.lastShot.ctype, nil
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

// shot is the last screenshot of a VM.
type shot struct {
	sum   uint64
	opts  backend.ScreenshotOptions
	data  []byte
	ctype string
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
	// Key events are paced: the lock is not held for them.
	v.mu.RUnlock()
	if err != nil {
		return err
	}
	lastKey := false
	for _, e := range evs {
		var ev []qmp.InputEvent
		switch e.Kind {
		case backend.EventMove:
			ax, ay := display.PixelToAbs(e.X, e.Y, w, h)
			ev = qmp.AbsMove(ax, ay)
		case backend.EventButton:
			ev = []qmp.InputEvent{qmp.ButtonUp(qmp.Button(qemuButton(e.Button)))}
			if e.Down {
				ev = []qmp.InputEvent{qmp.ButtonDown(qmp.Button(qemuButton(e.Button)))}
			}
		case backend.EventKey:
			if lastKey {
				if err := clock.Sleep(ctx, keyGap); err != nil {
					return err
				}
			}
			ev = []qmp.InputEvent{qmp.KeyUp(e.Key)}
			if e.Down {
				ev = []qmp.InputEvent{qmp.KeyDown(e.Key)}
			}
		}
		lastKey = e.Kind == backend.EventKey
		if err := mon.InputSendEvent(ctx, ev); err != nil {
			return err
		}
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
	g, err := b.guestOf(id)
	if err != nil {
		return err
	}
	return typeInGuest(ctx, g, text)
}

// CursorPosition implements backend.Cursor: the guest's X server says where
// the pointer is.
func (b *Backend) CursorPosition(ctx context.Context, id string) (int, int, error) {
	g, err := b.guestOf(id)
	if err != nil {
		return 0, 0, err
	}
	return cursor(ctx, g)
}

// typeInGuest types text that the host's keyboard map cannot (non-ASCII)
// with xdotool in the guest. xdotool maps a spare keycode to a character it
// cannot find, types it and maps the keycode back at once, and a busy
// application that looks the keycode up late gets nothing; so the
// characters are mapped first, for good, with xmodmap, and xdotool finds
// them in place.
func typeInGuest(ctx context.Context, g *guest, text string) error {
	run := func(path string, args ...string) (string, error) {
		res, err := g.exec(ctx, backend.ExecRequest{Path: path, Args: args})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%s exited %d: %s", path, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		return string(res.Stdout), err
	}
	table, err := run("xmodmap", "-pk")
	if err != nil {
		return err
	}
	// Lines are "KEYCODE  0xVALUE (name)  0xVALUE (name) ...".
	mapped := map[uint64]bool{}
	var free []string
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if _, err := strconv.Atoi(f[0]); err != nil {
			continue
		}
		used := false
		for _, field := range f[1:] {
			if v, err := strconv.ParseUint(strings.TrimPrefix(field, "0x"), 16, 32); err == nil && strings.HasPrefix(field, "0x") && v != 0 {
				mapped[v] = true
				used = true
			}
		}
		if !used {
			free = append(free, f[0])
		}
	}
	var assign []string
	for _, r := range text {
		if r < 0x80 {
			continue
		}
		ks := keysymOf(r)
		if mapped[ks] {
			continue
		}
		if len(free) == 0 {
			return api.Invalid("text", "too many different non-ASCII characters for the guest's keyboard map")
		}
		assign = append(assign, "-e", fmt.Sprintf("keycode %s = 0x%x 0x%x", free[0], ks, ks))
		free = free[1:]
		mapped[ks] = true
	}
	if len(assign) > 0 {
		if _, err := run("xmodmap", assign...); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond) // applications refresh their keymaps
	}
	_, err = run("xdotool", "type", "--delay", "20", "--", text)
	return err
}

// keysymOf is the X keysym xdotool uses for a character: Latin-1 maps to
// itself, the rest to the Unicode keysym range.
func keysymOf(r rune) uint64 {
	if r <= 0xff {
		return uint64(r)
	}
	return 0x01000000 | uint64(r)
}

// cursor asks the guest's X server where the pointer is.
func cursor(ctx context.Context, g *guest) (int, int, error) {
	res, err := g.exec(ctx, backend.ExecRequest{Path: "xdotool", Args: []string{"getmouselocation", "--shell"}})
	if err != nil {
		return 0, 0, err
	}
	if res.ExitCode != 0 {
		return 0, 0, fmt.Errorf("xdotool getmouselocation exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	x, y := -1, -1
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		k, val, _ := strings.Cut(strings.TrimSpace(line), "=")
		n, err := strconv.Atoi(val)
		if err != nil {
			continue
		}
		switch k {
		case "X":
			x = n
		case "Y":
			y = n
		}
	}
	if x < 0 || y < 0 {
		return 0, 0, fmt.Errorf("xdotool getmouselocation: unexpected output %q", res.Stdout)
	}
	return x, y, nil
}

// keyGap paces key events. QEMU's PS/2 keyboard queue holds 16 bytes (a
// few keystrokes) and drops what does not fit; a guest that is busy, or
// starved of CPU on a loaded host, drains it slowly, and text sent back to
// back loses characters. About 20 ms a character keeps a stall of 100 ms
// inside the queue. (xdotool paces its typing for the same reason.)
const keyGap = 10 * time.Millisecond

// Exec implements backend.Guest.
func (b *Backend) Exec(ctx context.Context, id string, req backend.ExecRequest) (backend.ExecResult, error) {
	if strings.TrimSpace(req.Path) == "" {
		return backend.ExecResult{}, api.Invalid("command", "required")
	}
	g, err := b.guestOf(id)
	if err != nil {
		return backend.ExecResult{}, err
	}
	return g.exec(ctx, req)
}

// CopyIn implements backend.Guest.
func (b *Backend) CopyIn(ctx context.Context, id, guestPath string, r io.Reader) error {
	g, err := b.guestAt(id, guestPath)
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
	g, err := b.guestAt(id, guestPath)
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

func (b *Backend) guestAt(id, guestPath string) (*guest, error) {
	if !strings.HasPrefix(guestPath, "/") {
		return nil, api.Invalid("path", "%q is not an absolute guest path", guestPath)
	}
	return b.guestOf(id)
}

// ClipboardGet implements backend.Guest.
func (b *Backend) ClipboardGet(ctx context.Context, id string) (string, error) {
	g, err := b.guestOf(id)
	if err != nil {
		return "", err
	}
	return g.clipboardGet(ctx)
}

// ClipboardSet implements backend.Guest.
func (b *Backend) ClipboardSet(ctx context.Context, id, text string) error {
	g, err := b.guestOf(id)
	if err != nil {
		return err
	}
	return g.clipboardSet(ctx, text)
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

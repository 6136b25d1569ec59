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
	"github.com/hvkube/hvkube/internal/display"
)

var (
	_ backend.Screen  = (*Backend)(nil)
	_ backend.Input   = (*Backend)(nil)
	_ backend.Guest   = (*Backend)(nil)
	_ backend.Display = (*Backend)(nil)
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

// Input implements backend.Input. Each key or button change is its own
// input-send-event: QEMU loses a press and release sent in one batch.
func (b *Backend) Input(ctx context.Context, id string, a api.Action) (backend.InputResult, error) {
	v, err := b.rlockVM(id)
	if err != nil {
		return backend.InputResult{}, err
	}
	w, h, err := api.ParseResolution(v.meta.Resolution)
	if err == nil {
		err = api.ValidateAction("", a, w, h, false)
	}
	if err == nil {
		err = v.needProcess()
	}
	var mon *qmp.Monitor
	var g *guest
	if err == nil {
		mon, g = v.p.mon, v.g
	}
	// Typing can take seconds: the lock is not held for it (see guestOf).
	v.mu.RUnlock()
	if err != nil {
		return backend.InputResult{}, err
	}
	in := inputter{mon: mon, w: w, h: h}
	switch a.Action {
	case "mouse_move":
		return backend.InputResult{}, in.move(ctx, a.Coordinate)
	case "left_click", "right_click", "middle_click", "double_click", "triple_click":
		btn, clicks := qmp.ButtonLeft, 1
		switch a.Action {
		case "right_click":
			btn = qmp.ButtonRight
		case "middle_click":
			btn = qmp.ButtonMiddle
		case "double_click":
			clicks = 2
		case "triple_click":
			clicks = 3
		}
		var held []display.KeyStroke
		if a.Text != "" { // modifier keys held during the click
			if held, err = parseKeysField("text", a.Text); err != nil {
				return backend.InputResult{}, err
			}
		}
		return backend.InputResult{}, in.click(ctx, a.Coordinate, btn, clicks, held)
	case "left_mouse_down", "left_mouse_up":
		if a.Coordinate != nil {
			if err := in.move(ctx, a.Coordinate); err != nil {
				return backend.InputResult{}, err
			}
		}
		return backend.InputResult{}, in.button(ctx, qmp.ButtonLeft, a.Action == "left_mouse_down")
	case "left_click_drag":
		return backend.InputResult{}, in.drag(ctx, a.StartCoordinate, a.Coordinate)
	case "scroll":
		return backend.InputResult{}, in.scroll(ctx, a.Coordinate, a.ScrollDirection, a.ScrollAmount)
	case "key":
		strokes, err := parseKeysField("text", a.Text)
		if err != nil {
			return backend.InputResult{}, err
		}
		return backend.InputResult{}, in.strokes(ctx, strokes)
	case "hold_key":
		strokes, err := parseKeysField("text", a.Text)
		if err != nil {
			return backend.InputResult{}, err
		}
		return backend.InputResult{}, in.hold(ctx, strokes, time.Duration(a.Duration*float64(time.Second)))
	case "type":
		strokes, err := display.TypeText(a.Text)
		if err == nil {
			return backend.InputResult{}, in.strokes(ctx, strokes)
		}
		// Text the keyboard map cannot type goes through the guest.
		return backend.InputResult{}, typeInGuest(ctx, g, a.Text)
	case "cursor_position":
		x, y, err := cursor(ctx, g)
		return backend.InputResult{X: x, Y: y}, err
	}
	return backend.InputResult{}, api.Invalid("action", "%q is not an input action", a.Action)
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

func parseKeysField(field, s string) ([]display.KeyStroke, error) {
	strokes, err := display.ParseKeys(s)
	if err != nil {
		return nil, api.Invalid(field, "%v", err)
	}
	return strokes, nil
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

// inputter sends input events to one VM.
type inputter struct {
	mon  *qmp.Monitor
	w, h int
}

func (in inputter) send(ctx context.Context, evs ...qmp.InputEvent) error {
	return in.mon.InputSendEvent(ctx, evs)
}

func (in inputter) move(ctx context.Context, c []int) error {
	if c == nil {
		return nil
	}
	ax, ay := display.PixelToAbs(c[0], c[1], in.w, in.h)
	return in.send(ctx, qmp.AbsMove(ax, ay)...)
}

func (in inputter) button(ctx context.Context, btn qmp.Button, down bool) error {
	if down {
		return in.send(ctx, qmp.ButtonDown(btn))
	}
	return in.send(ctx, qmp.ButtonUp(btn))
}

// keyGap paces key events. QEMU's PS/2 keyboard queue holds 16 bytes (a
// few keystrokes) and drops what does not fit; a guest that is busy, or
// starved of CPU on a loaded host, drains it slowly, and text sent back to
// back loses characters. About 20 ms a character keeps a stall of 100 ms
// inside the queue. (xdotool paces its typing for the same reason.)
const keyGap = 10 * time.Millisecond

func (in inputter) keys(ctx context.Context, evs []display.KeyEvent) error {
	for i, e := range evs {
		if i > 0 {
			time.Sleep(keyGap)
		}
		ev := qmp.KeyUp(e.QCode)
		if e.Down {
			ev = qmp.KeyDown(e.QCode)
		}
		if err := in.send(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

func (in inputter) click(ctx context.Context, c []int, btn qmp.Button, clicks int, held []display.KeyStroke) error {
	if err := in.move(ctx, c); err != nil {
		return err
	}
	for _, k := range held {
		if err := in.keys(ctx, k.Press()); err != nil {
			return err
		}
	}
	for i := 0; i < clicks; i++ {
		if err := in.button(ctx, btn, true); err != nil {
			return err
		}
		if err := in.button(ctx, btn, false); err != nil {
			return err
		}
	}
	for i := len(held) - 1; i >= 0; i-- {
		if err := in.keys(ctx, held[i].Release()); err != nil {
			return err
		}
	}
	return nil
}

func (in inputter) drag(ctx context.Context, from, to []int) error {
	if err := in.move(ctx, from); err != nil {
		return err
	}
	if err := in.button(ctx, qmp.ButtonLeft, true); err != nil {
		return err
	}
	// A few steps in between, so that applications see a drag.
	const steps = 8
	for i := 1; i <= steps; i++ {
		x := from[0] + (to[0]-from[0])*i/steps
		y := from[1] + (to[1]-from[1])*i/steps
		if err := in.move(ctx, []int{x, y}); err != nil {
			return err
		}
	}
	return in.button(ctx, qmp.ButtonLeft, false)
}

func (in inputter) scroll(ctx context.Context, c []int, dir string, amount int) error {
	if err := in.move(ctx, c); err != nil {
		return err
	}
	d, err := display.ParseScrollDirection(dir)
	if err != nil {
		return api.Invalid("scroll_direction", "%v", err)
	}
	if amount == 0 {
		amount = 3
	}
	btn := qmp.Button(d.WheelButton())
	for i := 0; i < amount; i++ {
		if err := in.button(ctx, btn, true); err != nil {
			return err
		}
		if err := in.button(ctx, btn, false); err != nil {
			return err
		}
	}
	return nil
}

func (in inputter) strokes(ctx context.Context, ks []display.KeyStroke) error {
	for i, k := range ks {
		if i > 0 {
			time.Sleep(keyGap)
		}
		if err := in.keys(ctx, k.Events()); err != nil {
			return err
		}
	}
	return nil
}

func (in inputter) hold(ctx context.Context, ks []display.KeyStroke, d time.Duration) error {
	for _, k := range ks {
		if err := in.keys(ctx, k.Press()); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	for i := len(ks) - 1; i >= 0; i-- {
		if err := in.keys(context.WithoutCancel(ctx), ks[i].Release()); err != nil {
			return err
		}
	}
	return ctx.Err()
}

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

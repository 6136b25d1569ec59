package vmdebug

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/backend/direct"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/guest"
)

// SelfTestOptions configure SelfTest.
type SelfTestOptions struct {
	// QMP and QGA are the VM's sockets.
	QMP, QGA string
	// Out is the directory the screenshots go to (PNG).
	Out string
	// ImageDir, when set, holds the image's image.json: its helpers, and
	// where its terminal window should be.
	ImageDir string
	// Log gets a line per check.
	Log io.Writer
}

// imageInfo is what the self-test reads of image.json.
type imageInfo struct {
	Helpers  map[string]string `json:"helpers"`
	Terminal struct {
		ClientArea *rect `json:"clientArea"`
	} `json:"terminal"`
}

type rect struct {
	X      int `json:"x"`
	Y      int `json:"y"`
	Width  int `json:"width"`
	Height int `json:"height"`
}

// helperIdentity is images/linux-desktop's helper that gives a clone its
// own identity (image.json names it "identity").
const helperIdentity = "identity"

// SelfTest checks a running images/linux-desktop guest the way hvkube uses
// it: screenshots, absolute pointer moves landing on the pixel asked for
// (against xdotool), a click into the terminal and typing with key
// events, the clipboard helpers (UTF-8), resolution changes, the identity
// helper, the guest clock, and no zombie processes. It reaches the VM's
// sockets with dial. It returns how many checks failed; an error means it
// could not run.
func SelfTest(ctx context.Context, dial direct.Dialer, o SelfTestOptions) (failed int, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return 0, err
	}
	helpers := map[string]string{helperIdentity: "/usr/local/bin/hvkube-identity"}
	for k, v := range guest.DefaultHelpers {
		helpers[k] = v
	}
	var info imageInfo
	if o.ImageDir != "" {
		b, err := os.ReadFile(filepath.Join(o.ImageDir, "image.json"))
		if err != nil {
			return 0, err
		}
		if err := json.Unmarshal(b, &info); err != nil {
			return 0, fmt.Errorf("%s/image.json: %w", o.ImageDir, err)
		}
		for k, v := range info.Helpers {
			helpers[k] = v
		}
	}
	mon, err := dial.DialMonitor(ctx, o.QMP)
	if err != nil {
		return 0, err
	}
	defer mon.Close()
	agent := dial.Agent(o.QGA)
	defer agent.Close()
	d := &Desktop{Monitor: mon, Agent: agent, Env: XEnv}
	acts := display.NewActions(d)

	check := func(ok bool, format string, args ...any) {
		mark := "ok   "
		if !ok {
			mark = "FAIL "
			failed++
		}
		fmt.Fprintln(o.Log, mark+strings.TrimRight(fmt.Sprintf(format, args...), " "))
	}
	note := func(text string) {
		text = strings.TrimSpace(text)
		fmt.Fprintln(o.Log, "     "+strings.ReplaceAll(text, "\n", "\n     "))
	}
	x := func(stdin []byte, path string, args ...string) (code int, stdout, stderr string) {
		res, err := agent.Exec(ctx, backend.ExecRequest{Path: path, Args: args, Env: XEnv, Stdin: stdin})
		if err != nil {
			return -1, "", err.Error()
		}
		return res.ExitCode, string(res.Stdout), string(res.Stderr)
	}
	shot := func(name string) (image.Image, time.Duration, error) {
		img, took, err := Screendump(ctx, mon)
		if err != nil {
			return nil, 0, err
		}
		var b bytes.Buffer
		var enc display.Encoder
		if err := enc.Encode(&b, img, display.EncodeOptions{Format: display.PNG}); err != nil {
			return nil, 0, err
		}
		return img, took, os.WriteFile(filepath.Join(o.Out, name), b.Bytes(), 0o644)
	}

	// The screen: a desktop, not a blank frame.
	img, took, err := shot("desktop.png")
	if err != nil {
		return failed, err
	}
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	colours := map[[3]uint32]bool{}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r, g, b}] = true
		}
	}
	check(len(colours) > 8, "screendump %dx%d in %d ms, %d colours -> %s", w, h, took.Milliseconds(), len(colours), filepath.Join(o.Out, "desktop.png"))

	// The terminal window, and where a click lands in it.
	_, out, _ := x(nil, "xdotool", "search", "--onlyvisible", "--class", "XTerm")
	wid := ""
	if f := strings.Fields(out); len(f) > 0 {
		wid = f[0]
	}
	check(wid != "", "xterm window found (%s)", wid)
	area := rect{X: 40, Y: 40, Width: 600, Height: 400}
	if wid != "" {
		// xwininfo's absolute position (xdotool's is off under a
		// reparenting window manager).
		_, out, _ := x(nil, "xwininfo", "-id", wid)
		area = parseXwininfo(out, area)
		note(fmt.Sprintf("xterm window (client area): %dx%d+%d+%d", area.Width, area.Height, area.X, area.Y))
	}
	cx, cy := area.X+area.Width/2, area.Y+area.Height/2
	if want := info.Terminal.ClientArea; want != nil && w == 1280 {
		check(area == *want, "xterm where image.json says: %+v (found %+v)", *want, area)
	}

	// The pointer: absolute moves land on the pixel asked for. The tablet
	// reports changes only and starts at 0,0, so a first move to 0,0 would
	// not reach X.
	points := [][2]int{{w - 1, h - 1}, {0, 0}, {w / 2, h / 2}, {1, 1}, {123, 456 % h}}
	for range 5 {
		points = append(points, [2]int{rand.IntN(w), rand.IntN(h)})
	}
	for _, p := range append(points, [2]int{cx, cy}) {
		if _, err := acts.Do(ctx, "", api.Action{Action: "mouse_move", Coordinate: p[:]}, display.Space{}); err != nil {
			check(false, "abs move to %d,%d: %v", p[0], p[1], err)
			continue
		}
		time.Sleep(300 * time.Millisecond)
		gx, gy, err := d.CursorPosition(ctx, "")
		check(err == nil && gx == p[0] && gy == p[1], "abs move to %d,%d: X reports %d,%d%s", p[0], p[1], gx, gy, errText(err))
	}

	// A click into the terminal, and a command typed with key events.
	x(nil, "rm", "-f", "/tmp/t")
	_, err = acts.Do(ctx, "", api.Action{Action: "left_click"}, display.Space{})
	check(err == nil, "click into the terminal%s", errText(err))
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	_, err = acts.Do(ctx, "", api.Action{Action: "type", Text: "echo hi > /tmp/t\n"}, display.Space{})
	typed := time.Since(start)
	content := ""
	for range 40 {
		code, c, _ := x(nil, "cat", "/tmp/t")
		if content = c; code == 0 && c != "" {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	check(err == nil && content == "hi\n", "typed 'echo hi > /tmp/t' (%.2f s of key events): /tmp/t = %q%s", typed.Seconds(), content, errText(err))
	if _, _, err := shot("typed.png"); err != nil {
		return failed, err
	}

	// The clipboard, with text beyond ASCII.
	text := "hvkube clipboard ✓ äöü\nsecond line"
	start = time.Now()
	code, _, stderr := x([]byte(text), helpers[guest.HelperClipboardSet])
	took = time.Since(start)
	// It returns at once (well, under emulation): an xclip still attached
	// to guest-exec's pipes would hold the call until the selection is
	// lost.
	check(code == 0 && took < 10*time.Second, "%s returned %d in %.2f s %s", helpers[guest.HelperClipboardSet], code, took.Seconds(), strings.TrimSpace(stderr))
	code, out, stderr = x(nil, helpers[guest.HelperClipboardGet])
	check(code == 0 && out == text, "%s returned %d: %q %s", helpers[guest.HelperClipboardGet], code, out, strings.TrimSpace(stderr))
	// A second owner replaces the first (whose xclip exits and must be
	// reaped).
	x([]byte("second"), helpers[guest.HelperClipboardSet])
	_, out, _ = x(nil, helpers[guest.HelperClipboardGet])
	check(out == "second", "clipboard replaced: %q", out)

	// Resolution changes and back. 1920x1080 is among the display's
	// modes; 1000x700 is not (a mode gets added).
	orig := fmt.Sprintf("%dx%d", w, h)
	for _, res := range []string{"1920x1080", "1000x700", orig} {
		start := time.Now()
		code, _, stderr := x(nil, helpers[guest.HelperResolution], res)
		took := time.Since(start)
		img, _, err := shot("screen-" + res + ".png")
		if err != nil {
			return failed, err
		}
		got := fmt.Sprintf("%dx%d", img.Bounds().Dx(), img.Bounds().Dy())
		check(code == 0 && got == res, "%s %s: exit %d in %.1f s, screendump %s %s", helpers[guest.HelperResolution], res, code, took.Seconds(), got, strings.TrimSpace(stderr))
	}
	code, _, stderr = x(nil, helpers[guest.HelperResolution], "99999x1")
	check(code != 0 && stderr != "", "%s rejects a bad size: %s", helpers[guest.HelperResolution], strings.TrimSpace(stderr))
	code, _, stderr = x(nil, helpers[guest.HelperResolution], "4096x2160")
	_, out, _ = x(nil, helpers[guest.HelperReady])
	check(code != 0 && strings.TrimSpace(out) == "ready "+orig, "%s 4096x2160 fails cleanly (exit %d): %s", helpers[guest.HelperResolution], code, strings.TrimSpace(stderr))

	code, out, _ = x(nil, helpers[guest.HelperReady])
	check(code == 0, "%s: %s", helpers[guest.HelperReady], strings.TrimSpace(out))

	// The identity of a clone.
	code, out, stderr = x(nil, helpers[helperIdentity], "selftest-1")
	_, host, _ := x(nil, "cat", "/proc/sys/kernel/hostname")
	check(code == 0 && strings.TrimSpace(host) == "selftest-1", "%s: exit %d, hostname %q; %q %s",
		helpers[helperIdentity], code, strings.TrimSpace(host), strings.TrimSpace(out), strings.TrimSpace(stderr))
	code, out, stderr = x(nil, helpers[guest.HelperReady])
	check(code == 0, "X clients still connect after the hostname change: %s %s", strings.TrimSpace(out), strings.TrimSpace(stderr))

	// The guest clock, set from the host.
	serr := agent.SetTime(ctx, time.Now())
	gt, gerr := agent.Time(ctx)
	off := time.Until(gt)
	check(serr == nil && gerr == nil && off.Abs() < 2*time.Second, "guest-set-time%s, guest clock off by %+.2f s%s", errText(serr), -off.Seconds(), errText(gerr))

	// No zombies left (PID 1 reaps), and what memory and disk hold.
	_, out, _ = x(nil, "ps", "-eo", "stat=,pid=,comm=")
	var zombies []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "Z") {
			zombies = append(zombies, strings.TrimSpace(line))
		}
	}
	check(len(zombies) == 0, "no zombie processes %v", zombies)
	_, out, _ = x(nil, "free", "-m")
	note(out)
	_, out, _ = x(nil, "df", "-h", "/")
	note(out)

	if failed > 0 {
		fmt.Fprintf(o.Log, "%d failed\n", failed)
	} else {
		fmt.Fprintln(o.Log, "all checks passed")
	}
	return failed, nil
}

// parseXwininfo reads the absolute position and size of a window from
// xwininfo's output, keeping def's for what it does not say.
func parseXwininfo(out string, def rect) rect {
	r := def
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			continue
		}
		switch k {
		case "Absolute upper-left X":
			r.X = n
		case "Absolute upper-left Y":
			r.Y = n
		case "Width":
			r.Width = n
		case "Height":
			r.Height = n
		}
	}
	return r
}

// errText is what a check's line says of err: nothing, or ": err".
func errText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

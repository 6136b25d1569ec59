// Package vmdebug is what `hvkube debug` does: tools for making guest
// images, which talk straight to the monitor and guest-agent sockets of one
// VM that hvkube does not manage (images/linux-desktop/boot.sh starts such
// a VM). They reach it through the direct contract, which a driver fills
// in with the clients and pointer mapping its backend uses (cmd/hvkube
// gives them the QEMU driver's), and drive it with the key map, action
// layer and screenshot encoding of the rest of hvkube, so that what an
// image's self-test checks is what hvkube will do to it.
package vmdebug

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/backend/direct"
	"github.com/hvkube/hvkube/internal/clock"
	"github.com/hvkube/hvkube/internal/display"
)

// XEnv is the environment of guest programs that talk to the desktop of
// images/linux-desktop (its X server and session).
var XEnv = []string{"DISPLAY=:0", "XAUTHORITY=/home/agent/.Xauthority", "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}

// Exec runs a program in the guest and waits for it to exit. The guest
// agent serves one client at a time: the connection is closed on return.
func Exec(ctx context.Context, dial direct.Dialer, agentSocket string, req backend.ExecRequest) (backend.ExecResult, error) {
	a := dial.Agent(agentSocket)
	defer a.Close()
	return a.Exec(ctx, req)
}

// Screendump takes the VM's screen with the monitor's screendump (a PPM
// that the VM writes to a file this process then reads) and returns it
// with the time the screendump took.
func Screendump(ctx context.Context, mon direct.Monitor) (*image.RGBA, time.Duration, error) {
	dir, err := os.MkdirTemp("", "hvkube-screen-")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	// QEMU opens the file, and may run as another user.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, 0, err
	}
	path := filepath.Join(dir, "screen.ppm")
	start := time.Now()
	if err := mon.Screendump(ctx, path); err != nil {
		return nil, 0, fmt.Errorf("screendump: %w", err)
	}
	took := time.Since(start)
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	img, err := display.DecodePPM(f)
	if err != nil {
		return nil, 0, fmt.Errorf("screendump: %w", err)
	}
	return img, took, nil
}

// keyGap paces key events as the QEMU backend does: the guest's PS/2
// keyboard queue is short.
const keyGap = 10 * time.Millisecond

// Desktop is a display.Desktop over one VM's monitor and guest agent, so
// that the action layer (display.Actions) drives the VM as hvkube drives
// a sandbox: the sandbox names it is given are ignored. Typing beyond
// ASCII and the pointer's position go through xdotool in the guest, with
// Env; without an Agent they are unsupported.
//
// A Desktop is for one goroutine at a time.
type Desktop struct {
	Monitor direct.Monitor
	Agent   direct.Agent
	Env     []string

	w, h int // the screen's size at the last ScreenSize
}

// Screenshot implements display.Desktop.
func (d *Desktop) Screenshot(ctx context.Context, _ string, opts backend.ScreenshotOptions) ([]byte, string, error) {
	img, _, err := Screendump(ctx, d.Monitor)
	if err != nil {
		return nil, "", err
	}
	f := display.Format(opts.Format)
	if f == "" {
		f = display.PNG
	}
	var enc display.Encoder
	var b bytes.Buffer
	if err := enc.Encode(&b, img, display.EncodeOptions{Format: f, Quality: opts.Quality, Width: opts.Width, Height: opts.Height}); err != nil {
		return nil, "", api.Invalid("format", "%v", err)
	}
	return b.Bytes(), f.ContentType(), nil
}

// ScreenSize implements display.Desktop: the size of a screendump, since
// the guest may have changed its resolution.
func (d *Desktop) ScreenSize(ctx context.Context, _ string) (int, int, error) {
	img, _, err := Screendump(ctx, d.Monitor)
	if err != nil {
		return 0, 0, err
	}
	d.w, d.h = img.Rect.Dx(), img.Rect.Dy()
	return d.w, d.h, nil
}

// SendInput implements display.Desktop as the QEMU backend does: each key
// or button change goes out on its own, key events are paced, and a move's
// pixels are of the screen size the action layer read just before.
func (d *Desktop) SendInput(ctx context.Context, sandbox string, evs []backend.InputEvent) error {
	if d.w == 0 {
		if _, _, err := d.ScreenSize(ctx, sandbox); err != nil {
			return err
		}
	}
	w, h := d.w, d.h
	lastKey := false
	for _, e := range evs {
		switch e.Kind {
		case backend.EventMove:
			if err := display.CheckPoint(e.X, e.Y, w, h); err != nil {
				return api.Invalid("coordinate", "%v", err)
			}
		case backend.EventButton:
			// Nothing to check here, nor to wait for.
		case backend.EventKey:
			if lastKey {
				if err := clock.Sleep(ctx, keyGap); err != nil {
					return err
				}
			}
		default:
			return api.Invalid("kind", "unknown event kind %q", e.Kind)
		}
		lastKey = e.Kind == backend.EventKey
		if err := d.Monitor.SendEvent(ctx, e, w, h); err != nil {
			return err
		}
	}
	return nil
}

// TypeText implements display.Desktop with xdotool in the guest.
func (d *Desktop) TypeText(ctx context.Context, _, text string) error {
	_, err := d.run(ctx, "xdotool", "type", "--", text)
	return err
}

// CursorPosition implements display.Desktop with xdotool in the guest.
func (d *Desktop) CursorPosition(ctx context.Context, _ string) (int, int, error) {
	out, err := d.run(ctx, "xdotool", "getmouselocation", "--shell")
	if err != nil {
		return 0, 0, err
	}
	return parseMouseLocation(out)
}

// parseMouseLocation reads xdotool getmouselocation --shell: X=… and Y=…
// lines.
func parseMouseLocation(out string) (x, y int, err error) {
	vals := map[string]int{}
	for _, line := range strings.Fields(out) {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(v); err == nil {
			vals[k] = n
		}
	}
	x, okx := vals["X"]
	y, oky := vals["Y"]
	if !okx || !oky {
		return 0, 0, fmt.Errorf("xdotool getmouselocation said %q", out)
	}
	return x, y, nil
}

// run runs a program in the guest with d.Env and fails unless it exits 0.
func (d *Desktop) run(ctx context.Context, path string, args ...string) (string, error) {
	if d.Agent == nil {
		return "", fmt.Errorf("%s in the guest needs its guest agent's socket: %w", path, api.ErrUnsupported)
	}
	res, err := d.Agent.Exec(ctx, backend.ExecRequest{Path: path, Args: args, Env: d.Env})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("%s %s: exit %d: %s", path, strings.Join(args, " "), res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return string(res.Stdout), nil
}

// errExited: the VM's process is gone.
var errExited = errors.New("QEMU exited")

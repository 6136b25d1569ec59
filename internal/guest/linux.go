package guest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// Helper commands a Linux image provides (images/linux-desktop installs
// them; an image's image.json may name others).
const (
	HelperReady        = "ready"
	HelperResolution   = "resolution"
	HelperClipboardGet = "clipboardGet"
	HelperClipboardSet = "clipboardSet"
)

// DefaultHelpers are where images/linux-desktop puts its helpers.
var DefaultHelpers = map[string]string{
	HelperReady:        "/usr/local/bin/hvkube-ready",
	HelperResolution:   "/usr/local/bin/hvkube-resolution",
	HelperClipboardGet: "/usr/local/bin/hvkube-clipboard-get",
	HelperClipboardSet: "/usr/local/bin/hvkube-clipboard-set",
}

// LinuxOS is a Linux desktop with X11 (images/linux-desktop): its helper
// commands, xdotool and xmodmap. Programs run with the guest's X display in
// their environment (the Runner's business).
type LinuxOS struct {
	helpers map[string]string
}

// NewLinux is the Linux guest with the image's helper commands; missing
// ones are DefaultHelpers.
func NewLinux(helpers map[string]string) LinuxOS {
	h := make(map[string]string, len(DefaultHelpers))
	for k, v := range DefaultHelpers {
		h[k] = v
	}
	for k, v := range helpers {
		h[k] = v
	}
	return LinuxOS{helpers: h}
}

// Name implements OS.
func (LinuxOS) Name() string { return Linux }

// helper runs one of the image's helper commands and fails unless it exits 0.
func (l LinuxOS) helper(ctx context.Context, r Runner, name string, stdin []byte, args ...string) (backend.ExecResult, error) {
	p := l.helpers[name]
	if p == "" {
		return backend.ExecResult{}, fmt.Errorf("the image has no %s helper: %w", name, api.ErrUnsupported)
	}
	return run(ctx, r, backend.ExecRequest{Path: p, Args: args, Stdin: stdin})
}

// Ready implements OS: the image's ready helper says the desktop is up.
func (l LinuxOS) Ready(ctx context.Context, r Runner) error {
	_, err := l.helper(ctx, r, HelperReady, nil)
	return err
}

// SetResolution implements OS with the image's resolution helper (xrandr).
func (l LinuxOS) SetResolution(ctx context.Context, r Runner, res string) error {
	if _, _, err := api.ParseResolution(res); err != nil {
		return api.Invalid("resolution", "%v", err)
	}
	if _, err := l.helper(ctx, r, HelperResolution, nil, res); err != nil {
		return fmt.Errorf("resolution %s: %v: %w", res, err, api.ErrUnsupported)
	}
	return nil
}

// Identity implements OS: a fresh clone gets its own machine id and boot
// id (the image's init binds /run/hvkube/boot_id over the kernel's, which
// is made once per boot) and its hostname (see Rename). It writes files,
// through the Runner's FileWriter when it has one (no program run: under
// emulation a program costs a second). The kernel reseeds its random
// number generator by itself: every clone's vmgenid device reports a new
// generation.
func (l LinuxOS) Identity(ctx context.Context, r Runner, hostname string) error {
	id := make([]byte, 16)
	boot := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return err
	}
	if _, err := rand.Read(boot); err != nil {
		return err
	}
	boot[6] = boot[6]&0x0f | 0x40 // a version 4 UUID, as the kernel makes
	boot[8] = boot[8]&0x3f | 0x80
	bootID := fmt.Sprintf("%x-%x-%x-%x-%x\n", boot[0:4], boot[4:6], boot[6:8], boot[8:10], boot[10:16])
	if err := writeFiles(ctx, r, []guestFile{
		{"/etc/machine-id", []byte(hex.EncodeToString(id) + "\n")},
		{"/run/hvkube/boot_id", []byte(bootID)},
	}); err != nil {
		return err
	}
	return l.Rename(ctx, r, hostname)
}

// Rename implements OS: the kernel's hostname, and /etc/hosts so that it
// resolves (/etc/hostname only matters at boot, and a clone never boots).
func (LinuxOS) Rename(ctx context.Context, r Runner, hostname string) error {
	hosts := "127.0.0.1\tlocalhost\n127.0.1.1\t" + hostname + "\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"
	return writeFiles(ctx, r, []guestFile{
		{"/proc/sys/kernel/hostname", []byte(hostname)},
		{"/etc/hosts", []byte(hosts)},
	})
}

type guestFile struct {
	path string
	data []byte
}

func writeFiles(ctx context.Context, r Runner, files []guestFile) error {
	for _, f := range files {
		if err := writeFile(ctx, r, f.path, f.data); err != nil {
			return fmt.Errorf("guest identity: %s: %w", f.path, err)
		}
	}
	return nil
}

// writeFile writes a guest file with the Runner's FileWriter, or else with
// tee reading the data on its standard input.
func writeFile(ctx context.Context, r Runner, p string, data []byte) error {
	if fw, ok := r.(FileWriter); ok {
		return fw.WriteFile(ctx, p, data)
	}
	_, err := run(ctx, r, backend.ExecRequest{Path: "tee", Args: []string{p}, Stdin: data})
	return err
}

// SetClock implements OS. date is used rather than a guest agent's
// set-time, which also runs hwclock: that waits for the RTC's next second.
func (LinuxOS) SetClock(ctx context.Context, r Runner, t time.Time) error {
	arg := fmt.Sprintf("@%d.%09d", t.Unix(), t.Nanosecond())
	_, err := run(ctx, r, backend.ExecRequest{Path: "date", Args: []string{"-u", "-s", arg}})
	return err
}

// TypeText implements OS with xdotool. xdotool maps a spare keycode to a
// character it cannot find, types it and maps the keycode back at once,
// and a busy application that looks the keycode up late gets nothing; so
// the characters are mapped first, for good, with xmodmap, and xdotool
// finds them in place.
func (LinuxOS) TypeText(ctx context.Context, r Runner, text string) error {
	res, err := run(ctx, r, backend.ExecRequest{Path: "xmodmap", Args: []string{"-pk"}})
	if err != nil {
		return err
	}
	assign, err := keymapAdditions(string(res.Stdout), text)
	if err != nil {
		return err
	}
	if len(assign) > 0 {
		if _, err := run(ctx, r, backend.ExecRequest{Path: "xmodmap", Args: assign}); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond) // applications refresh their keymaps
	}
	_, err = run(ctx, r, backend.ExecRequest{Path: "xdotool", Args: []string{"type", "--delay", "20", "--", text}})
	return err
}

// keymapAdditions reads `xmodmap -pk` (lines "KEYCODE  0xVALUE (name)
// ...") and returns the xmodmap arguments that map text's non-ASCII
// characters missing from it onto free keycodes.
func keymapAdditions(table, text string) ([]string, error) {
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
	for _, c := range text {
		if c < 0x80 {
			continue
		}
		ks := keysymOf(c)
		if mapped[ks] {
			continue
		}
		if len(free) == 0 {
			return nil, api.Invalid("text", "too many different non-ASCII characters for the guest's keyboard map")
		}
		assign = append(assign, "-e", fmt.Sprintf("keycode %s = 0x%x 0x%x", free[0], ks, ks))
		free = free[1:]
		mapped[ks] = true
	}
	return assign, nil
}

// keysymOf is the X keysym xdotool uses for a character: Latin-1 maps to
// itself, the rest to the Unicode keysym range.
func keysymOf(c rune) uint64 {
	if c <= 0xff {
		return uint64(c)
	}
	return 0x01000000 | uint64(c)
}

// Cursor implements OS: the guest's X server says where the pointer is.
func (LinuxOS) Cursor(ctx context.Context, r Runner) (int, int, error) {
	res, err := run(ctx, r, backend.ExecRequest{Path: "xdotool", Args: []string{"getmouselocation", "--shell"}})
	if err != nil {
		return 0, 0, err
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

// ClipboardGet implements OS with the image's helper.
func (l LinuxOS) ClipboardGet(ctx context.Context, r Runner) (string, error) {
	res, err := l.helper(ctx, r, HelperClipboardGet, nil)
	if err != nil {
		return "", err
	}
	return string(res.Stdout), nil
}

// ClipboardSet implements OS with the image's helper, the text on its
// standard input.
func (l LinuxOS) ClipboardSet(ctx context.Context, r Runner, text string) error {
	_, err := l.helper(ctx, r, HelperClipboardSet, []byte(text))
	return err
}

// IsAbs implements OS.
func (LinuxOS) IsAbs(p string) bool { return strings.HasPrefix(p, "/") }

// globScript lists the regular files matching its first argument. The
// pattern is passed as an argument and expanded unquoted with field
// splitting off: the shell globs it but never runs it.
const globScript = `IFS=; for f in $1; do if [ -f "$f" ]; then printf '%s\n' "$f"; fi; done`

// Glob implements OS with the POSIX shell's globbing.
func (l LinuxOS) Glob(ctx context.Context, r Runner, pattern string) ([]string, error) {
	if !l.IsAbs(pattern) {
		return nil, fmt.Errorf("%q is not an absolute path in the guest", pattern)
	}
	res, err := run(ctx, r, backend.ExecRequest{Path: "/bin/sh", Args: []string{"-c", globScript, "sh", pattern}})
	if err != nil {
		return nil, err
	}
	var files []string
	for _, f := range strings.Split(string(res.Stdout), "\n") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files, nil
}

// ProcessRunning implements OS with pgrep.
func (LinuxOS) ProcessRunning(ctx context.Context, r Runner, name string) error {
	res, err := r.Exec(ctx, backend.ExecRequest{Path: "pgrep", Args: []string{"-x", "--", name}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("no process %q runs in the guest", name)
	}
	return nil
}

// Listening implements OS: bash opens /dev/tcp/HOST/PORT itself; the port
// is a number, not text.
func (LinuxOS) Listening(ctx context.Context, r Runner, port int) error {
	res, err := r.Exec(ctx, backend.ExecRequest{Path: "bash", Args: []string{"-c", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d", port)}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("nothing listens on port %d in the guest", port)
	}
	return nil
}

// Probes implements OS.
func (LinuxOS) Probes() Probes { return linuxProbes{} }

type linuxProbes struct{}

func (linuxProbes) Text(stdout []byte) string   { return string(stdout) }
func (linuxProbes) TempPath(name string) string { return path.Join("/tmp", name) }
func (linuxProbes) HomePath(name string) string { return path.Join("/home/agent", name) }

// TypedWrite quotes text for the POSIX shell.
func (linuxProbes) TypedWrite(text, p string) string {
	return "echo '" + strings.ReplaceAll(text, "'", `'\''`) + "' > " + p
}
func (linuxProbes) ReadFile(p string) backend.ExecRequest {
	return backend.ExecRequest{Path: "cat", Args: []string{p}}
}
func (linuxProbes) Touch(p string) backend.ExecRequest {
	return backend.ExecRequest{Path: "touch", Args: []string{p}}
}
func (linuxProbes) Exists(p string) backend.ExecRequest {
	return backend.ExecRequest{Path: "test", Args: []string{"-e", p}}
}
func (linuxProbes) Sync() backend.ExecRequest     { return backend.ExecRequest{Path: "sync"} }
func (linuxProbes) Hostname() backend.ExecRequest { return backend.ExecRequest{Path: "hostname"} }
func (linuxProbes) IDs() backend.ExecRequest {
	return backend.ExecRequest{Path: "cat", Args: []string{"/etc/machine-id", "/proc/sys/kernel/random/boot_id"}}
}

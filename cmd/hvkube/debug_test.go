//go:build linux

package main

import (
	"bytes"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
)

// TestDebugOnDesktop boots the linux-desktop image with boot.sh, which
// waits for it with `hvkube debug wait-ready`, and runs the image's
// self-test and the other debug commands against the real guest.
func TestDebugOnDesktop(t *testing.T) {
	qemutest.RequireImage(t, "linux-desktop")
	if testing.Short() {
		t.Skip("boots a VM")
	}
	home, _ := os.UserHomeDir()
	cache := os.Getenv("HVKUBE_CACHE_DIR")
	if cache == "" {
		cache = filepath.Join(home, ".cache", "hvkube")
	}
	dir := filepath.Join(cache, "images", "linux-desktop", "current")
	out := t.TempDir()
	script := `set -e
"$HVKUBE_BIN" debug selftest "$1/selftest"
"$HVKUBE_BIN" debug exec --env PATH=/bin:/usr/bin -- sh -c 'echo guest; echo oops >&2'
"$HVKUBE_BIN" debug screenshot "$1/screen.png"
"$HVKUBE_BIN" debug input --move 10,12 --action '{"action":"cursor_position"}'
"$HVKUBE_BIN" debug qmp query-status
`
	cmd := exec.Command("../../images/linux-desktop/boot.sh", dir, "bash", "-c", script, "debug", out)
	accel := os.Getenv("HVKUBE_BOOT_ACCEL")
	if accel == "" {
		accel = "tcg" // a /dev/kvm that opens may still fail to run the guest
	}
	cmd.Env = append(os.Environ(), "HVKUBE_BIN="+binary, "HVKUBE_BOOT_ACCEL="+accel, "HVKUBE_BOOT_TIMEOUT=300")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("boot.sh: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	got := stdout.String()
	for _, want := range []string{
		"guest agent answered after", "desktop ready after",
		"ok   abs move to 1279,799: X reports 1279,799",
		"ok   typed 'echo hi > /tmp/t'",
		"all checks passed",
		"guest\n", "screen.png: 1280x800", "10,12\n", `"status": "running"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if !strings.Contains(stderr.String(), "oops") {
		t.Errorf("the guest's stderr is not on stderr: %q", stderr.String())
	}
	for _, name := range []string{"selftest/desktop.png", "selftest/typed.png", "screen.png"} {
		f, err := os.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() != 1280 {
			t.Errorf("%s: %v %v", name, img.Bounds(), err)
		}
	}
}

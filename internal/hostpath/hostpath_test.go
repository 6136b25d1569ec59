package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

func TestCheck(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "images")
	other := filepath.Join(base, "images-other") // a sibling sharing the prefix
	outside := filepath.Join(base, "secret")
	for _, d := range []string{root, filepath.Join(root, "linux"), other, outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "linux", "disk.qcow2"), nil, 0o600)
	os.WriteFile(filepath.Join(outside, "shadow"), nil, 0o600)
	// A link inside the root that leads out of it, and a link outside it
	// that leads in.
	os.Symlink(outside, filepath.Join(root, "escape"))
	os.Symlink(filepath.Join(outside, "shadow"), filepath.Join(root, "linux", "kernel"))
	os.Symlink(filepath.Join(root, "linux"), filepath.Join(base, "shortcut"))
	os.Symlink(filepath.Join(base, "nowhere"), filepath.Join(root, "dangling"))
	// The root itself reached through a link.
	os.Symlink(root, filepath.Join(base, "root-link"))

	roots, err := NewRoots(filepath.Join(base, "root-link"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		ok   bool
	}{
		{filepath.Join(root, "linux", "disk.qcow2"), true},
		{filepath.Join(root, "linux"), true},
		{root, true},
		{filepath.Join(root, "linux", "not-built-yet.qcow2"), true},
		{filepath.Join(base, "shortcut", "disk.qcow2"), true},
		{filepath.Join(root, "linux", "..", "..", "secret", "shadow"), false},
		{filepath.Join(root, "escape", "shadow"), false},
		{filepath.Join(root, "escape", "missing"), false},
		{filepath.Join(root, "linux", "kernel"), false},
		{filepath.Join(root, "dangling"), false},
		{filepath.Join(other, "x"), false},
		{filepath.Join(outside, "shadow"), false},
		{"/etc/shadow", false},
		{"relative/disk.qcow2", false},
		{`C:\workflows`, false},
	}
	for _, tt := range tests {
		err := roots.Check("spec.qemu.disk", tt.path)
		if (err == nil) != tt.ok {
			t.Errorf("Check(%q) = %v, want ok=%v", tt.path, err, tt.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, api.ErrInvalid) || api.FieldOf(err) != "spec.qemu.disk" {
				t.Errorf("Check(%q): %v is not a field error for spec.qemu.disk", tt.path, err)
			}
			if filepath.IsAbs(tt.path) && !strings.Contains(err.Error(), root) && !strings.Contains(err.Error(), "symbolic link") {
				t.Errorf("Check(%q): %q does not name the allowed roots", tt.path, err)
			}
		}
	}
	if err := (Roots{}).Check("f", filepath.Join(root, "linux")); err == nil || !strings.Contains(err.Error(), "(none)") {
		t.Errorf("no roots: %v", err)
	}
}

// TestNative: only a path in this host's own syntax is checked against
// its roots; a path of the other OS's is for a host of that kind.
func TestNative(t *testing.T) {
	posix := []string{"/srv/workflows", "/"}
	windows := []string{`C:\workflows`, `c:/workflows`, `\\server\share\x`}
	native, foreign := posix, windows
	if runtime.GOOS == "windows" {
		native, foreign = windows, posix
	}
	for _, p := range native {
		if !Native(p) {
			t.Errorf("Native(%q) = false on %s", p, runtime.GOOS)
		}
	}
	for _, p := range foreign {
		if Native(p) {
			t.Errorf("Native(%q) = true on %s", p, runtime.GOOS)
		}
	}
}

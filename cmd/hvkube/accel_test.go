//go:build linux

package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDebugAccel: hvkube debug accel prints the backend's choice, kvm or
// tcg, and its reason; with no such QEMU it fails naming it.
func TestDebugAccel(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		if os.Getenv("HVKUBE_REQUIRE_QEMU") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	out, err := runCommand(newDebugAccelCmd())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; last != "kvm" && last != "tcg" || len(lines) < 2 {
		t.Errorf("output %q: want a reason, then kvm or tcg", out)
	}
	if _, err := runCommand(newDebugAccelCmd(), "--qemu", "no-such-qemu"); err == nil || !strings.Contains(err.Error(), "no-such-qemu") {
		t.Errorf("a missing QEMU: %v", err)
	}
}

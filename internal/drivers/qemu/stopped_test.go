//go:build linux

package qemu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/drivers/qemu/qga"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
)

// TestWaitAgentGuestStopped boots a guest that stops for good (a boot
// sector that triple-faults, in a QEMU that neither reboots nor exits):
// waiting for its agent fails at once, naming the run state, instead of
// waiting out the boot timeout.
func TestWaitAgentGuestStopped(t *testing.T) {
	bin := requireQEMU(t)
	dir, err := os.MkdirTemp("", "hvkube-stopped-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// cli; xor ax,ax; mov ds,ax; lidt [idt]; int3; hlt; jmp $-1; then
	// idt, a zero-limit table: the int3 cannot be delivered and the CPU
	// shuts down.
	code := []byte{0xfa, 0x31, 0xc0, 0x8e, 0xd8, 0x0f, 0x01, 0x1e, 0x0e, 0x7c, 0xcc, 0xf4, 0xeb, 0xfd}
	sector := make([]byte, 512)
	copy(sector, code)
	sector[510], sector[511] = 0x55, 0xaa
	if err := os.WriteFile(filepath.Join(dir, "boot.img"), sector, 0o600); err != nil {
		t.Fatal(err)
	}
	const name = "hvkube-test-stopped"
	cmd := exec.Command(bin, "-name", name, "-machine", "pc", "-accel", "tcg", "-m", "16M",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-no-shutdown", "-S",
		"-drive", "format=raw,file=boot.img,if=ide", "-qmp", "unix:qmp.sock,server=on,wait=off")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() { cmd.Process.Kill(); <-exited }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mon *qmp.Monitor
	for mon == nil {
		if mon, err = qmp.Dial(ctx, filepath.Join(dir, "qmp.sock")); err != nil {
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	p := &proc{pid: cmd.Process.Pid, name: name, dir: dir, mon: mon, exited: exited}
	defer mon.Close()
	if err := mon.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	g := newGuest(qga.New(filepath.Join(dir, "qga.sock")), image{})
	err = g.waitAgent(ctx, p)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "shutdown") {
		t.Fatalf("waitAgent = %v (after the test's deadline: %v), want the guest stopped in shutdown", err, ctx.Err() != nil)
	}
	if !p.alive() {
		t.Error("QEMU exited; the test wants it kept in the shutdown state")
	}
}

//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/testmount"
)

// TestTokenFileModeIsChecked: a token file others may read is refused at
// start, with the fix in the message, as ssh does for keys.
func TestTokenFileModeIsChecked(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600)
	os.Chmod(tokenFile, 0o644)
	cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--token-file", tokenFile, "--backend", "none")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "chmod 600 "+tokenFile) || !strings.Contains(string(out), "0644") {
		t.Fatalf("err %v, output %s", err, out)
	}
}

// TestReadOnlyDatabaseNamesFileAndCause: a data directory on a read-only
// file system stops the server at start with the file and the cause.
func TestReadOnlyDatabaseNamesFileAndCause(t *testing.T) {
	dir := testmount.Tmpfs(t, "8m")
	st, err := store.Open(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	testmount.ReadOnly(t, dir)
	cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--backend", "none")
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("serve did not stop on a read-only data directory")
	}
	db := filepath.Join(dir, store.DBFile)
	if err == nil || !strings.Contains(string(out), db) || !strings.Contains(string(out), "read-only file system") {
		t.Fatalf("err %v, output %s", err, out)
	}
}

// TestSIGTERMWithSlowClients: clients stuck sending a request do not hold
// the server past its grace period, and it exits 0.
func TestSIGTERMWithSlowClients(t *testing.T) {
	p := startServe(t, t.TempDir(), nil, "--backend", "none", "--shutdown-grace", "1s")
	for _, head := range []string{
		// a body that never finishes
		"POST /api/v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{\"apiVersion\"",
		// headers that never finish
		"GET /api/v1/sandboxes HTTP/1.1\r\nHost: 127.",
		// a watch
		"GET /api/v1/sandboxes?watch=true HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
	} {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, head)
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("serve exited with %v after SIGTERM:\n%s", p.err, p.logs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10s of SIGTERM with a 1s grace period")
	}
	t.Logf("stopped %s after SIGTERM", time.Since(start).Round(10*time.Millisecond))
}

// qemusOf lists the pids of the QEMU processes whose command line names
// dir: the VMs of a server whose data directory it is.
func qemusOf(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), "qemu-system") || !strings.Contains(string(b), dir+"/") {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestNoLeakedVMsAfterServerKill is the sequence that used to leave a
// QEMU running for good: a template and a sandbox up (so a spare QEMU
// runs too), SIGKILL of the server, a restart, deletion of the sandbox
// and the template. No QEMU of the data directory may be left. The VMs
// must not see the server's token in their environment either.
func TestNoLeakedVMsAfterServerKill(t *testing.T) {
	qemutest.RequireImage(t, "linux-desktop")
	dir := t.TempDir()
	env := []string{"HVKUBE_TOKEN=s3cret"}
	p := startServe(t, dir, env)
	run := func(p *proc, args ...string) string {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"--server", p.url()}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("hvkube %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(p, "apply", "-f", "../../examples/template.yaml")
	run(p, "wait", "template", "linux-desktop", "--for", "phase=Ready", "--timeout", "10m")
	run(p, "apply", "-f", "../../examples/sandbox.yaml")
	run(p, "wait", "sandbox", "browser-agent-1", "--for", "phase=Running", "--timeout", "5m")
	// The first clone is followed by a spare for the next one.
	var pids []int
	for i := 0; i < 600 && len(pids) < 2; i++ {
		time.Sleep(100 * time.Millisecond)
		pids = qemusOf(dir)
	}
	if len(pids) < 2 {
		t.Fatalf("want the sandbox's QEMU and a spare, found %v", pids)
	}
	for _, pid := range pids {
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(environ), "s3cret") || strings.Contains(string(environ), "HVKUBE_TOKEN") {
			t.Fatalf("QEMU %d has the server's token in its environment", pid)
		}
	}

	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p2 := startServe(t, dir, env)
	run(p2, "delete", "sandbox", "browser-agent-1")
	run(p2, "delete", "template", "linux-desktop")
	for i := 0; ; i++ {
		left := qemusOf(dir)
		if len(left) == 0 {
			break
		}
		if i > 300 {
			t.Fatalf("QEMU processes left after deleting everything: %v\n%s", left, p2.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

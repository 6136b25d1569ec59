//go:build linux

package qga

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Tests in this file talk to a real qemu-ga running on the host in
// unix-listen mode: the same agent and protocol as in a guest, minus the VM.
// They are skipped when qemu-ga is not installed. Commands that would touch
// the host (shutdown, clock, freeze, suspend, users) are blocked.

var blockedRPCs = []string{
	"guest-shutdown", "guest-set-time", "guest-suspend-disk", "guest-suspend-ram",
	"guest-suspend-hybrid", "guest-fsfreeze-freeze", "guest-fsfreeze-freeze-list",
	"guest-fsfreeze-thaw", "guest-fstrim", "guest-set-vcpus", "guest-set-user-password",
	"guest-set-memory-blocks", "guest-ssh-add-authorized-keys", "guest-ssh-remove-authorized-keys",
}

type agentProc struct {
	cmd  *exec.Cmd
	sock string
	dir  string
}

func startAgent(t *testing.T) *agentProc {
	t.Helper()
	bin, err := exec.LookPath("qemu-ga")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/qemu-ga"); serr != nil {
			t.Skipf("skipping real-agent test: qemu-ga not found: %v", err)
		}
		bin = "/usr/sbin/qemu-ga"
	}
	dir, err := os.MkdirTemp("", "qga")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	a := &agentProc{sock: filepath.Join(dir, "qga.sock"), dir: dir}
	a.cmd = exec.Command(bin, "-m", "unix-listen", "-p", a.sock, "-t", dir,
		"-f", filepath.Join(dir, "qga.pid"), "-b", strings.Join(blockedRPCs, ","))
	var out bytes.Buffer
	a.cmd.Stdout, a.cmd.Stderr = &out, &out
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("start qemu-ga: %v", err)
	}
	exited := make(chan struct{})
	go func() { a.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("qemu-ga output:\n%s", out.String())
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if listening(a.sock) {
			break
		}
		select {
		case <-exited:
			t.Fatalf("qemu-ga exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("qemu-ga socket did not appear")
		}
	}
	return a
}

// listening reports whether a unix socket at path accepts connections:
// qemu-ga binds its socket (the file appears) a moment before it listens,
// and a connection in between is refused. /proc/net/unix marks a
// listening socket with the __SO_ACCEPTCON flag (00010000); reading it
// does not take the agent's one client slot as a trial dial would.
func listening(path string) bool {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		_, err := os.Stat(path)
		return err == nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && f[7] == path && f[3] == "00010000" {
			return true
		}
	}
	return false
}

// openFDs counts the agent's open descriptors, to see that handles are
// closed.
func (a *agentProc) openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(a.cmd.Process.Pid), "fd"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestAgentInfoAndErrors(t *testing.T) {
	a := startAgent(t)
	c := New(a.sock)
	defer c.Close()
	ctx := testCtx(t)

	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Version == "" || !info.Enabled("guest-exec") || !info.Enabled("guest-sync-delimited") {
		t.Errorf("info = %+v", info)
	}
	if info.Enabled("guest-set-time") {
		t.Fatal("guest-set-time is enabled: refusing to go on against a host agent")
	}
	// A disabled command is a CommandNotFound agent error. (Blocked here, so
	// the host clock is not touched.)
	err = c.SetTime(ctx, time.Now())
	var ae *Error
	if !errors.As(err, &ae) || ae.Class != "CommandNotFound" {
		t.Errorf("disabled command = %v, want CommandNotFound", err)
	}
	if _, err := c.Exec(ctx, ExecRequest{Path: "/nonexistent/program"}); !errors.As(err, &ae) {
		t.Errorf("exec of a missing program = %v, want an agent error", err)
	}
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Time(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAgentExec(t *testing.T) {
	a := startAgent(t)
	c := New(a.sock)
	defer c.Close()
	binary := make([]byte, 70000)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	tests := []struct {
		name       string
		req        ExecRequest
		wantOut    []byte
		wantErr    string
		wantCode   int
		wantSignal int
	}{
		{
			name:     "output and exit code",
			req:      ExecRequest{Path: "sh", Args: []string{"-c", "echo hi; echo err >&2; exit 3"}, CaptureOutput: true},
			wantOut:  []byte("hi\n"),
			wantErr:  "err\n",
			wantCode: 3,
		},
		{
			name:    "stdin to stdout, binary",
			req:     ExecRequest{Path: "cat", Input: binary, CaptureOutput: true},
			wantOut: binary,
		},
		{
			name:    "environment",
			req:     ExecRequest{Path: "/bin/sh", Args: []string{"-c", "echo $FOO:$DISPLAY"}, Env: []string{"FOO=bar", "DISPLAY=:0"}, CaptureOutput: true},
			wantOut: []byte("bar::0\n"),
		},
		{
			name:       "signal",
			req:        ExecRequest{Path: "sh", Args: []string{"-c", "kill -9 $$"}, CaptureOutput: true},
			wantSignal: 9,
		},
		{
			name:    "slower than the first polls",
			req:     ExecRequest{Path: "sh", Args: []string{"-c", "sleep 0.3; echo done"}, CaptureOutput: true},
			wantOut: []byte("done\n"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := c.Exec(testCtx(t), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Exited || res.ExitCode != tt.wantCode || res.Signal != tt.wantSignal {
				t.Errorf("result = exited %v code %d signal %d, want code %d signal %d", res.Exited, res.ExitCode, res.Signal, tt.wantCode, tt.wantSignal)
			}
			if !bytes.Equal(res.Stdout, tt.wantOut) {
				t.Errorf("stdout = %d bytes %.40q, want %d bytes %.40q", len(res.Stdout), res.Stdout, len(tt.wantOut), tt.wantOut)
			}
			if string(res.Stderr) != tt.wantErr {
				t.Errorf("stderr = %q, want %q", res.Stderr, tt.wantErr)
			}
		})
	}
}

func TestAgentFiles(t *testing.T) {
	a := startAgent(t)
	c := New(a.sock, WithChunkSize(1000))
	defer c.Close()
	ctx := testCtx(t)
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	fds := a.openFDs(t)

	data := make([]byte, 10_500)
	for i := range data {
		data[i] = byte(i % 251)
	}
	path := filepath.Join(a.dir, "file.bin")
	if err := c.FileWrite(ctx, path, data); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(onDisk, data) {
		t.Fatalf("file on disk: %d bytes, %v", len(onDisk), err)
	}
	got, err := c.FileRead(ctx, path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("FileRead = %d bytes, %v", len(got), err)
	}
	// Overwrite with less: the file is truncated.
	if err := c.FileWrite(ctx, path, []byte("short")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.FileRead(ctx, path); err != nil || string(got) != "short" {
		t.Errorf("after overwrite: %q, %v", got, err)
	}
	empty := filepath.Join(a.dir, "empty")
	if err := c.FileWrite(ctx, empty, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := c.FileRead(ctx, empty); err != nil || got == nil || len(got) != 0 {
		t.Errorf("empty file: %q, %v", got, err)
	}
	var ae *Error
	if _, err := c.FileRead(ctx, filepath.Join(a.dir, "missing")); !errors.As(err, &ae) {
		t.Errorf("read of a missing file = %v, want an agent error", err)
	}
	if err := c.FileWrite(ctx, filepath.Join(a.dir, "no", "dir", "f"), data); !errors.As(err, &ae) {
		t.Errorf("write into a missing directory = %v, want an agent error", err)
	}
	if n := a.openFDs(t); n != fds {
		t.Errorf("agent has %d descriptors open, %d before: file handles leaked", n, fds)
	}
}

// TestAgentLateReply freezes the real agent (SIGSTOP, as when its VM is
// paused), lets requests time out, thaws it so that its replies arrive late,
// and checks that the client resynchronises past them.
func TestAgentLateReply(t *testing.T) {
	a := startAgent(t)
	c := New(a.sock)
	defer c.Close()
	if err := c.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	pid := a.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			syscall.Kill(pid, syscall.SIGCONT)
			thawed = true
		}
	}
	defer thaw()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.Info(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Info to a frozen agent = %v, want deadline exceeded", err)
	}
	// The next request's resync times out too, queued behind the first.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := c.ExecStart(ctx2, ExecRequest{Path: "true"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ExecStart to a frozen agent = %v, want deadline exceeded", err)
	}

	// Thawed, the agent answers the stale guest-info and guest-sync-delimited
	// first; the client must skip both.
	thaw()
	ctx = testCtx(t)
	res, err := c.Exec(ctx, ExecRequest{Path: "echo", Args: []string{"in sync"}, CaptureOutput: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "in sync\n" {
		t.Errorf("stdout = %q", res.Stdout)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAgentOneClientAtATime(t *testing.T) {
	a := startAgent(t)
	first := New(a.sock)
	defer first.Close()
	if err := first.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	second := New(a.sock)
	defer second.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := second.Ping(ctx); err == nil {
		t.Fatal("a second client got through while the first holds the connection")
	}
	first.Disconnect()
	if err := second.Ping(testCtx(t)); err != nil {
		t.Fatalf("second client after the first disconnected: %v", err)
	}
}

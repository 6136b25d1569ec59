//go:build linux

package qmp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/testlog"
)

// Tests in this file run a real QEMU (TCG is enough: the VM never boots an
// OS). They are skipped when qemu-system-x86_64 is not installed.

type qemuProc struct {
	cmd    *exec.Cmd
	dir    string
	sock   string
	exited chan struct{}   // closed when the process has exited
	out    *testlog.Buffer // QEMU's stdout and stderr
}

// startQEMU starts a paused (-S) QEMU with a QMP socket and the given extra
// arguments, and kills it when the test ends.
func startQEMU(t testing.TB, extra ...string) *qemuProc {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skipf("skipping real-QEMU test: qemu-system-x86_64 not found: %v", err)
	}
	// A short directory: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "qmp.sock")
	args := append([]string{
		"-nodefaults", "-display", "none", "-machine", "pc", "-m", "64", "-S", "-vga", "std",
		"-qmp", "unix:" + sock + ",server=on,wait=off",
	}, extra...)
	p := &qemuProc{cmd: exec.Command(bin, args...), dir: dir, sock: sock, exited: make(chan struct{}), out: &testlog.Buffer{}}
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("qemu output:\n%s", p.out.String())
		}
	})
	return p
}

// dial connects to the QEMU's monitor, retrying until its socket exists.
func (p *qemuProc) dial(t testing.TB) *Monitor {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := Dial(ctx, p.sock)
		cancel()
		if err == nil {
			t.Cleanup(func() { m.Close() })
			return m
		}
		select {
		case <-p.exited:
			t.Fatalf("qemu exited before its monitor answered: %v\n%s", err, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial qemu monitor: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestQEMUStatusStopCont(t *testing.T) {
	p := startQEMU(t)
	m := p.dial(t)
	ctx := testCtx(t)
	if v := m.Version(); !v.AtLeast(2, 12) {
		t.Errorf("version %v", v)
	}
	sub := m.Subscribe("STOP", "RESUME")
	defer sub.Cancel()

	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != StatePrelaunch || st.Running {
		t.Errorf("initial status = %+v, want prelaunch", st)
	}
	steps := []struct {
		name  string
		do    func(context.Context) error
		state RunState
		event string
	}{
		{"cont", m.Cont, StateRunning, "RESUME"},
		{"stop", m.Stop, StatePaused, "STOP"},
		{"cont again", m.Cont, StateRunning, "RESUME"},
	}
	for _, s := range steps {
		if err := s.do(ctx); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != s.state || st.Running != (s.state == StateRunning) {
			t.Errorf("%s: status = %+v, want %s", s.name, st, s.state)
		}
		select {
		case ev := <-sub.C:
			if ev.Name != s.event || ev.Timestamp.IsZero() {
				t.Errorf("%s: event %+v, want %s with a timestamp", s.name, ev, s.event)
			}
		case <-ctx.Done():
			t.Fatalf("%s: no %s event", s.name, s.event)
		}
	}
}

func TestQEMUScreendumpPPM(t *testing.T) {
	p := startQEMU(t)
	m := p.dial(t)
	ctx := testCtx(t)
	for _, state := range []string{"prelaunch", "running"} {
		if state == "running" {
			if err := m.Cont(ctx); err != nil {
				t.Fatal(err)
			}
		}
		file := filepath.Join(p.dir, state+".ppm")
		if err := m.ScreendumpPPM(ctx, file); err != nil {
			t.Fatalf("%s: %v", state, err)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(data, []byte("P6\n")) {
			t.Errorf("%s: header %q", state, data[:min(len(data), 16)])
		}
		img, err := display.DecodePPM(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: decode screendump: %v", state, err)
		}
		// Standard VGA before the firmware sets a mode.
		if b := img.Bounds(); b.Dx() < 320 || b.Dy() < 200 {
			t.Errorf("%s: screen %v", state, b)
		}
	}

	err := m.ScreendumpPPM(ctx, filepath.Join(p.dir, "no", "such", "dir.ppm"))
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "GenericError" {
		t.Errorf("screendump to a missing directory = %v, want a GenericError", err)
	}
}

func TestQEMUInput(t *testing.T) {
	p := startQEMU(t, "-device", "qemu-xhci", "-device", "usb-tablet")
	m := p.dial(t)
	ctx := testCtx(t)

	mice, err := m.QueryMice(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(mice, func(mi MouseInfo) bool { return mi.Absolute }) {
		t.Errorf("no absolute pointer among %+v", mice)
	}

	// QEMU refuses input while the VM is not running.
	err = m.InputSendEvent(ctx, AbsMove(0, 0))
	var qe *Error
	if !errors.As(err, &qe) || !strings.Contains(qe.Desc, "not running") {
		t.Errorf("input while prelaunch = %v, want a VM not running error", err)
	}

	if err := m.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	x, y := PixelToAbs(640, 400, 1280, 800)
	batches := [][]InputEvent{
		AbsMove(x, y),
		AbsMove(0, 0),
		AbsMove(AbsMax, AbsMax),
		append(AbsMove(100, 200), ButtonDown(ButtonLeft)),
		{ButtonUp(ButtonLeft)},
		{ButtonDown(ButtonRight)}, {ButtonUp(ButtonRight)},
		{ButtonDown(ButtonMiddle)}, {ButtonUp(ButtonMiddle)},
		{ButtonDown(ButtonWheelUp)}, {ButtonUp(ButtonWheelUp)},
		{ButtonDown(ButtonWheelDown)}, {ButtonUp(ButtonWheelDown)},
		{ButtonDown(ButtonWheelLeft)}, {ButtonUp(ButtonWheelLeft)},
		{ButtonDown(ButtonWheelRight)}, {ButtonUp(ButtonWheelRight)},
	}
	for i, b := range batches {
		if err := m.InputSendEvent(ctx, b); err != nil {
			t.Errorf("batch %d: %v", i, err)
		}
	}

	// Every key the display package can produce is a QKeyCode this QEMU
	// accepts.
	qcodes := map[string]bool{}
	names := display.KeyNames()
	for c := byte('!'); c <= '~'; c++ {
		names = append(names, string(c))
	}
	for _, n := range names {
		k, err := display.ParseKeyCombo(n)
		if err != nil {
			t.Fatalf("ParseKeyCombo(%q): %v", n, err)
		}
		for _, q := range append(slices.Clone(k.Modifiers), k.Key) {
			qcodes[q] = true
		}
	}
	delete(qcodes, "power") // would power the VM down
	delete(qcodes, "sleep")
	delete(qcodes, "wake")
	for q := range qcodes {
		if err := m.InputSendEvent(ctx, []InputEvent{KeyDown(q)}); err != nil {
			t.Errorf("key %q down: %v", q, err)
		}
		if err := m.InputSendEvent(ctx, []InputEvent{KeyUp(q)}); err != nil {
			t.Errorf("key %q up: %v", q, err)
		}
	}

	// A key QEMU 7.2 does not know is refused by QEMU itself.
	if !m.Version().AtLeast(8, 0) {
		err := m.InputSendEvent(ctx, []InputEvent{KeyDown("f13")})
		if !errors.As(err, &qe) {
			t.Errorf("unknown qcode = %v, want a QMP error", err)
		}
	}
}

func TestQEMUConcurrentCommands(t *testing.T) {
	p := startQEMU(t, "-device", "qemu-xhci", "-device", "usb-tablet")
	m := p.dial(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				if g%2 == 0 {
					st, err := m.Status(testCtx(t))
					if err != nil || st.Status != StatePrelaunch {
						t.Errorf("status = %+v, %v", st, err)
						return
					}
				} else {
					mice, err := m.QueryMice(testCtx(t))
					if err != nil || len(mice) == 0 {
						t.Errorf("mice = %+v, %v", mice, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestQEMUOneClientAtATime(t *testing.T) {
	p := startQEMU(t)
	m := p.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if m2, err := Dial(ctx, p.sock); err == nil {
		m2.Close()
		t.Fatal("second Dial succeeded while the first monitor is connected")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Dial = %v, want it to wait until its deadline", err)
	}
	m.Close()
	m3 := p.dial(t)
	if _, err := m3.Status(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestQEMUQuit(t *testing.T) {
	p := startQEMU(t)
	m := p.dial(t)
	sub := m.Subscribe("SHUTDOWN")
	if err := m.Quit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
	default:
		t.Fatal("Done open after Quit")
	}
	if err := m.Err(); !errors.Is(err, io.EOF) {
		t.Errorf("Err() = %v, want io.EOF", err)
	}
	if ev, ok := <-sub.C; !ok || ev.Name != "SHUTDOWN" {
		t.Errorf("event %+v, %v; want SHUTDOWN", ev, ok)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("qemu still running 10s after quit")
	}
}

func TestQEMUKilled(t *testing.T) {
	p := startQEMU(t)
	m := p.dial(t)
	p.cmd.Process.Kill()
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done open 10s after qemu was killed")
	}
	if err := m.Cont(testCtx(t)); !errors.Is(err, io.EOF) {
		t.Errorf("call after kill = %v, want io.EOF", err)
	}
}

func TestQEMUPeerPID(t *testing.T) {
	p := startQEMU(t)
	m := p.dial(t)
	pid, err := m.PeerPID()
	if err != nil {
		t.Fatal(err)
	}
	if pid != p.cmd.Process.Pid {
		t.Errorf("PeerPID() = %d, want %d", pid, p.cmd.Process.Pid)
	}
}

// TestQEMUMigrateThroughFD saves a VM's state through a pipe passed with
// SendFD, then restores it into a second QEMU started with -S -incoming
// defer from a file passed the same way.
func TestQEMUMigrateThroughFD(t *testing.T) {
	tests := []struct {
		name       string
		pauseFirst bool
	}{
		{"saved paused", true},   // how a template is saved: the restored VM is paused too
		{"saved running", false}, // restored paused because of -S; it would run without
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testMigrateThroughFD(t, tt.pauseFirst) })
	}
}

func testMigrateThroughFD(t *testing.T, pauseFirst bool) {
	src := startQEMU(t)
	m := src.dial(t)
	ctx := testCtx(t)

	if err := m.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	if pauseFirst {
		if err := m.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.MigrateSetCapabilities(ctx, map[string]bool{"events": true}); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateSetParameters(ctx, map[string]any{"max-bandwidth": int64(8) << 30}); err != nil {
		t.Fatal(err)
	}
	events := m.Subscribe("MIGRATION")
	defer events.Cancel()

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := m.SendFD(ctx, "save", w); err != nil {
		t.Fatal(err)
	}
	w.Close() // QEMU holds its own copy
	stateFile := filepath.Join(src.dir, "state")
	copied := make(chan error, 1)
	go func() {
		f, err := os.Create(stateFile)
		if err != nil {
			copied <- err
			return
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		copied <- err
	}()

	if err := m.Migrate(ctx, "fd:save"); err != nil {
		t.Fatal(err)
	}
	info, err := m.WaitMigration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != MigrationCompleted || info.RAM == nil || info.RAM.Total == 0 {
		t.Errorf("final migration info = %+v", info)
	}
	if err := <-copied; err != nil {
		t.Fatalf("copy state: %v", err)
	}
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != StatePostMigrate {
		t.Errorf("source status after migration = %s, want postmigrate", st.Status)
	}
	var statuses []string
	for len(events.C) > 0 {
		ev := <-events.C
		statuses = append(statuses, string(ev.Data))
	}
	if len(statuses) == 0 || !strings.Contains(statuses[len(statuses)-1], "completed") {
		t.Errorf("MIGRATION events = %v, want them to end with completed", statuses)
	}
	fi, err := os.Stat(stateFile)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("state file: %v, %v", fi, err)
	}

	// Restore into a fresh QEMU.
	dst := startQEMU(t, "-incoming", "defer")
	md := dst.dial(t)
	st, err = md.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != StateInMigrate {
		t.Errorf("destination status before restore = %s, want inmigrate", st.Status)
	}
	f, err := os.Open(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := md.SendFD(ctx, "load", f); err != nil {
		t.Fatal(err)
	}
	if err := md.MigrateIncoming(ctx, "fd:load"); err != nil {
		t.Fatal(err)
	}
	if _, err := md.WaitMigration(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = md.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != StatePaused {
		t.Errorf("destination status after restore = %s, want paused", st.Status)
	}
	if err := md.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := md.Status(ctx); err != nil || st.Status != StateRunning {
		t.Errorf("after cont: %+v, %v", st, err)
	}
}

func TestQEMUCloseFD(t *testing.T) {
	p := startQEMU(t)
	m := p.dial(t)
	ctx := testCtx(t)
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := m.SendFD(ctx, "spare", f); err != nil {
		t.Fatal(err)
	}
	if err := m.CloseFD(ctx, "spare"); err != nil {
		t.Fatal(err)
	}
	var qe *Error
	if err := m.CloseFD(ctx, "spare"); !errors.As(err, &qe) {
		t.Errorf("closing an unknown fd name = %v, want a QMP error", err)
	}
}

func TestQEMUMigrateFailure(t *testing.T) {
	p := startQEMU(t)
	m := p.dial(t)
	ctx := testCtx(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SendFD(ctx, "broken", w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r.Close() // nobody reads: QEMU's writes fail with EPIPE
	if err := m.Migrate(ctx, "fd:broken"); err != nil {
		t.Fatal(err)
	}
	_, err = m.WaitMigration(ctx)
	if !errors.Is(err, ErrMigrationFailed) {
		t.Fatalf("WaitMigration = %v, want ErrMigrationFailed", err)
	}
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status == StatePostMigrate {
		t.Errorf("status after a failed migration = %s", st.Status)
	}
}

// BenchmarkQEMUScreendumpPPM measures a screendump of the 640x480 VGA
// console to a file and decoding it.
func BenchmarkQEMUScreendumpPPM(b *testing.B) {
	p := startQEMU(b)
	m := p.dial(b)
	ctx := context.Background()
	file := filepath.Join(p.dir, "bench.ppm")
	for b.Loop() {
		if err := m.ScreendumpPPM(ctx, file); err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(file)
		if err != nil {
			b.Fatal(err)
		}
		_, err = display.DecodePPM(f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQEMUQueryStatus measures one QMP round trip.
func BenchmarkQEMUQueryStatus(b *testing.B) {
	p := startQEMU(b)
	m := p.dial(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := m.Status(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

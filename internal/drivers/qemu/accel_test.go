//go:build linux

package qemu

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
)

// requireQEMU returns the path of qemu-system-x86_64, skipping when it is
// not installed unless HVKUBE_REQUIRE_QEMU is set.
func requireQEMU(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		if os.Getenv("HVKUBE_REQUIRE_QEMU") != "" {
			t.Fatalf("qemu-system-x86_64 is not installed: %v", err)
		}
		t.Skipf("qemu-system-x86_64 is not installed: %v", err)
	}
	return p
}

// kvmOpens reports whether /dev/kvm opens read-write here, which decides
// what probeAccel can answer.
func kvmOpens() bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestProbeBootSector(t *testing.T) {
	s := bootSector()
	if got, want := len(s), 512; got != want {
		t.Fatalf("len = %d, want %d", got, want)
	}
	if got, want := hex.EncodeToString(s[510:]), "55aa"; got != want {
		t.Errorf("signature = %s, want %s", got, want)
	}
	// cli; xor ax,ax; mov ds,ax; cld; mov si,0x7c17; mov dx,0x3f8;
	// next: lodsb; test al,al; jz done; out dx,al; jmp next;
	// done: hlt; jmp done; then the marker.
	const wantCode = "fa31c08ed8fcbe177cbaf803ac84c07403eeebf8f4ebfd"
	code, _ := hex.DecodeString(wantCode)
	if got := hex.EncodeToString(s[:len(code)]); got != wantCode {
		t.Errorf("code = %s, want %s", got, wantCode)
	}
	msg := s[len(code):]
	if !bytes.HasPrefix(msg, []byte(probeMarker+"\x00")) {
		t.Errorf("the code is not followed by the NUL-terminated marker: %q", msg[:len(probeMarker)+1])
	}
	if got, want := int(binary.LittleEndian.Uint16(s[7:9])), 0x7c00+len(code); got != want {
		t.Errorf("mov si points at %#x, want the marker at %#x", got, want)
	}
	for i := len(code) + len(probeMarker); i < 510; i++ {
		if s[i] != 0 {
			t.Fatalf("byte %d = %#x, want 0", i, s[i])
		}
	}
}

// probeLeftovers lists what a probe left under tmp: files, and probe
// processes whose working directory was there.
func probeLeftovers(t *testing.T, tmp string) []string {
	t.Helper()
	var left []string
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		left = append(left, filepath.Join(tmp, e.Name()))
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if !bytes.Contains(cmdline, []byte("\x00hvkube-accel-probe\x00")) {
			continue
		}
		cwd, _ := os.Readlink(filepath.Join("/proc", p.Name(), "cwd"))
		if strings.HasPrefix(cwd, tmp+string(filepath.Separator)) {
			left = append(left, "process "+strconv.Itoa(pid))
		}
	}
	return left
}

func TestRunProbe(t *testing.T) {
	bin := requireQEMU(t)
	tests := []struct {
		name    string
		accel   string
		wantErr string // "" for success
	}{
		// TCG proves that the boot sector runs and the marker is seen,
		// on any host.
		{"the guest runs under tcg", "tcg", ""},
		{"qemu refuses the accelerator", "hvkube-no-such-accel", "exited before its guest printed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp) // where runProbe makes its directory
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// A generous wait: a loaded host may be slow to boot even
			// this; runProbe's result, not its speed, is under test.
			took, err := runProbe(ctx, bin, tt.accel, 30*time.Second, discardLogger())
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("runProbe: %v", err)
			case tt.wantErr == "" && took <= 0:
				t.Errorf("took = %v, want > 0", took)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.accel):
				t.Errorf("err = %v, want QEMU's own words, which name %q", err, tt.accel)
			}
			if left := probeLeftovers(t, tmp); len(left) > 0 {
				t.Errorf("the probe left %v", left)
			}
		})
	}
}

func TestProbeAccel(t *testing.T) {
	bin := requireQEMU(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	accel, reason := probeAccel(context.Background(), bin, discardLogger())
	t.Logf("accel %s: %s", accel, reason)
	if !kvmOpens() {
		if accel != "tcg" || !strings.HasPrefix(reason, "no usable /dev/kvm: ") {
			t.Errorf("without /dev/kvm: got (%q, %q), want tcg and a reason naming /dev/kvm", accel, reason)
		}
		return
	}
	switch {
	case accel == "kvm" && strings.HasPrefix(reason, "a probe VM ran under KVM in "):
	case accel == "tcg" && strings.HasPrefix(reason, "/dev/kvm opens but a probe VM could not run under KVM: "):
	case accel == "tcg" && strings.HasPrefix(reason, "/dev/kvm opens but a probe VM took "):
	default:
		t.Errorf("got (%q, %q), want kvm after a probe VM ran or tcg with why it did not", accel, reason)
	}
	if left := probeLeftovers(t, tmp); len(left) > 0 {
		t.Errorf("the probe left %v", left)
	}
}

func TestNewAccel(t *testing.T) {
	requireQEMU(t)
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skipf("qemu-img is not installed: %v", err)
	}
	tests := []struct {
		name       string
		accel      string
		wantAccel  string // "" for either
		wantReason string // a prefix
	}{
		{"tcg by configuration", "tcg", "tcg", "set by configuration"},
		{"kvm by configuration is not probed", "kvm", "kvm", "set by configuration"},
		{"auto without /dev/kvm", "", "tcg", "no usable /dev/kvm: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.accel == "" && kvmOpens() {
				tt.wantAccel, tt.wantReason = "", ""
			}
			dir := t.TempDir()
			b, err := New(context.Background(), Config{
				Dir: filepath.Join(dir, "data"), ImageDir: dir, RunDir: filepath.Join(dir, "run"), ShmDir: filepath.Join(dir, "shm"),
				Accel: tt.accel, Logger: discardLogger(),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if tt.wantAccel != "" && b.Accel() != tt.wantAccel {
				t.Errorf("Accel() = %q, want %q", b.Accel(), tt.wantAccel)
			}
			if b.Accel() != "kvm" && b.Accel() != "tcg" {
				t.Errorf("Accel() = %q, want kvm or tcg", b.Accel())
			}
			if b.AccelReason() == "" || !strings.HasPrefix(b.AccelReason(), tt.wantReason) {
				t.Errorf("AccelReason() = %q, want one starting with %q", b.AccelReason(), tt.wantReason)
			}
		})
	}
}

func TestKVMTooSlow(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		kvm, tcg time.Duration
		tcgErr   error
		slow     bool
	}{
		{"faster than tcg", 40 * ms, 110 * ms, nil, false},
		{"a little slower than tcg", 600 * ms, 110 * ms, nil, false},
		{"seconds slower than tcg", 3150 * ms, 110 * ms, nil, true},
		{"tcg failed", 3150 * ms, 0, errors.New("exit status 1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, slow := kvmTooSlow(tt.kvm, tt.tcg, tt.tcgErr)
			if slow != tt.slow {
				t.Fatalf("slow = %v (%q), want %v", slow, reason, tt.slow)
			}
			if slow && !strings.Contains(reason, "3.15s under KVM and 110ms under TCG") {
				t.Errorf("reason = %q, want both times", reason)
			}
		})
	}
}

func TestProbeSummarize(t *testing.T) {
	tests := []struct {
		name, output, want string
	}{
		{"empty", "", ""},
		{"one line", "qemu-system-x86_64: -accel kvm: failed to initialize kvm: Permission denied\n",
			"qemu-system-x86_64: -accel kvm: failed to initialize kvm: Permission denied"},
		{"the error before a register dump", "KVM: entry failed, hardware error 0x80000021\n\nIf you're running a guest on an Intel machine\nEAX=00000000 EBX=00000000\nESI=00000000 EDI=00000000\n",
			"KVM: entry failed, hardware error 0x80000021; If you're running a guest on an Intel machine; EAX=00000000 EBX=00000000"},
		{"long", strings.Repeat("x", 500), strings.Repeat("x", 400) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarize(tt.output); got != tt.want {
				t.Errorf("summarize() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRefuseKVM: a KVM that passed the probe and then stopped a guest
// with an internal error is refused for the VMs started after, and for
// the next backends on the host (until it reboots) without a probe; one
// the configuration asked for is kept.
func TestRefuseKVM(t *testing.T) {
	record := filepath.Join(t.TempDir(), "cache", "kvm-refused.json")
	probed := &Backend{cfg: Config{KVMRecord: record}, log: discardLogger(), accelName: "kvm", accelProbed: true}
	if !probed.refuseKVM("template t1's guest") {
		t.Fatal("refuseKVM of a probed kvm = false, want true")
	}
	if got := probed.Accel(); got != "tcg" {
		t.Errorf("Accel after refuseKVM = %q, want tcg", got)
	}
	if got := probed.AccelReason(); !strings.Contains(got, "template t1's guest") || !strings.Contains(got, "internal error") {
		t.Errorf("AccelReason = %q, want it to name the guest and the internal error", got)
	}
	if probed.refuseKVM("template t2's guest") {
		t.Error("refuseKVM of tcg = true, want false")
	}
	r, ok := readKVMRefusal(record)
	if !ok || r.BootID != bootID() || !strings.Contains(r.Reason, "t1") {
		t.Fatalf("record = %+v, %v; want this boot's refusal naming t1", r, ok)
	}
	if kvmOpens() {
		bin := requireQEMU(t)
		accel, reason := chooseAccel(context.Background(), bin, record, discardLogger())
		if accel != "tcg" || !strings.Contains(reason, "remove it to probe KVM again") || !strings.Contains(reason, record) {
			t.Errorf("chooseAccel with a record = %q, %q; want tcg, naming the record", accel, reason)
		}
	}

	configured := &Backend{cfg: Config{KVMRecord: "-"}, log: discardLogger(), accelName: "kvm"}
	if configured.refuseKVM("template t1's guest") || configured.Accel() != "kvm" {
		t.Errorf("refuseKVM of a configured kvm turned it to %s, want kvm kept", configured.Accel())
	}

	for name, content := range map[string]string{
		"an earlier boot": `{"bootID":"00000000-0000-0000-0000-000000000000","at":"2026-01-01T00:00:00Z","reason":"x"}`,
		"no reason":       `{"bootID":"` + bootID() + `","at":"2026-01-01T00:00:00Z"}`,
		"cut short":       `{"bootID":"` + bootID(),
	} {
		if err := os.WriteFile(record, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, ok := readKVMRefusal(record); ok {
			t.Errorf("a record of %s holds, want it ignored", name)
		}
	}
}

func TestInternalError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("template t: guest agent: %w: qemu says: …", stoppedError{qmp.StateInternalError}), true},
		{stoppedError{qmp.StateShutdown}, false},
		{stoppedError{qmp.StateGuestPanicked}, false},
		{errors.New("the guest stopped: qemu reports internal-error"), false},
		{nil, false},
	} {
		if got := internalError(tc.err); got != tc.want {
			t.Errorf("internalError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestBuildTemplateKVMFallback builds a template where /dev/kvm opens,
// with kvm taken as if the probe had chosen it: on a host whose KVM stops
// the desktop's kernel with an internal error, the build starts again
// under TCG and succeeds, and the backend uses TCG from then on. Where
// KVM runs the desktop there is nothing to fall back from.
func TestBuildTemplateKVMFallback(t *testing.T) {
	if !kvmOpens() {
		t.Skip("/dev/kvm does not open here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	record := filepath.Join(t.TempDir(), "kvm-refused.json")
	b, err := New(ctx, Config{Dir: t.TempDir(), ImageDir: requireImage(t), Accel: "kvm", KVMRecord: record, NoSpares: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.accelProbed = true
	var steps []string
	_, err = b.BuildTemplate(ctx, backend.TemplateSpec{ID: "kvm-fallback", Image: api.QEMUImage{Image: "linux-desktop"}}, func(s string) { steps = append(steps, s) })
	if err != nil {
		t.Fatalf("BuildTemplate: %v\nsteps: %q", err, steps)
	}
	meta, err := b.loadTemplate("kvm-fallback")
	if err != nil {
		t.Fatal(err)
	}
	if meta.Accel == "kvm" {
		t.Skip("KVM runs the desktop here: nothing to fall back from")
	}
	joined := strings.Join(steps, "\n")
	if !strings.Contains(joined, "building again under TCG") || !strings.Contains(joined, "cold-booting kvm-fallback (tcg") {
		t.Errorf("steps = %q, want the fallback said and a cold boot under tcg", steps)
	}
	if got := b.Accel(); got != "tcg" {
		t.Errorf("Accel after the fallback = %q, want tcg", got)
	}
	if _, ok := readKVMRefusal(record); !ok {
		t.Error("no refusal recorded for the next backends")
	}
}

// TestPlainVMKVMFallback is TestBuildTemplateKVMFallback for a plain VM:
// its boot starts again under TCG, and the guest answers.
func TestPlainVMKVMFallback(t *testing.T) {
	if !kvmOpens() {
		t.Skip("/dev/kvm does not open here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b, err := New(ctx, Config{Dir: t.TempDir(), ImageDir: requireImage(t), Accel: "kvm", KVMRecord: "-", NoSpares: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.accelProbed = true
	v, err := b.NewPlainVM(api.QEMUImage{Image: "linux-desktop"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if v.m.Accel == "kvm" {
		t.Skip("KVM runs the desktop here: nothing to fall back from")
	}
	if b.Accel() != "tcg" {
		t.Errorf("Accel after the fallback = %q, want tcg", b.Accel())
	}
	if committed := reservedMB(b); committed != v.m.MemoryMB {
		t.Errorf("%d MB reserved after the fallback; want the one VM's %d MB", committed, v.m.MemoryMB)
	}
	res, err := v.Exec(ctx, backend.ExecRequest{Path: "/bin/true"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in the plain VM after the fallback: %v, %+v", err, res)
	}
}

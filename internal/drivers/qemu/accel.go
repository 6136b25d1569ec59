package qemu

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// A /dev/kvm that opens does not prove that KVM can run a guest: nested or
// paravirtual KVM may fail at the first VM entry. So the backend decides
// by running a tiny VM under KVM and watching it print.

const (
	// probeTimeout bounds the whole probe (under KVM, then under TCG),
	// QEMU's starts and ends included.
	probeTimeout = 2*probeWait + 2*time.Second
	// probeWait is how long the probe VM has to print probeMarker.
	probeWait = 3 * time.Second
	// probeMarker is what the probe's boot sector writes to its serial
	// port.
	probeMarker = "HVKUBE-PROBE-OK\n"
)

// probeAccel chooses the accelerator for the QEMU at binary: kvm when a
// probe VM runs under KVM, else tcg; reason says why, in words for the log
// and for Backend.AccelReason. It blocks for at most probeTimeout (less if
// ctx ends) and never fails: whatever goes wrong is a reason to use tcg.
func probeAccel(ctx context.Context, binary string, log *slog.Logger) (accel, reason string) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "tcg", "no usable /dev/kvm: " + err.Error()
	}
	f.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	took, err := runProbe(ctx, binary, "kvm", probeWait, log)
	if err != nil {
		reason = "/dev/kvm opens but a probe VM could not run under KVM: " + err.Error()
		log.Warn("KVM is not usable; using TCG, which is much slower", "reason", reason)
		return "tcg", reason
	}
	// The same probe under TCG is the yardstick: a KVM that takes far
	// longer than software emulation to run a boot sector emulates what it
	// should run, and such a KVM has been seen to stop a real guest's
	// kernel with an emulation failure.
	tcgTook, err := runProbe(ctx, binary, "tcg", probeWait, log)
	if reason, slow := kvmTooSlow(took, tcgTook, err); slow {
		log.Warn("KVM is not usable; using TCG, which is much slower", "reason", reason)
		return "tcg", reason
	}
	return "kvm", fmt.Sprintf("a probe VM ran under KVM in %s", took.Round(time.Millisecond))
}

// ProbeAccel is the backend's choice of accelerator for the QEMU at binary
// ("" for qemu-system-x86_64 on PATH), as New makes it when not told: kvm
// when a probe VM runs under KVM, else tcg, and why. Tools that start
// QEMU themselves (boot.sh, through hvkube debug accel) decide the same
// way, rather than by /dev/kvm alone.
func ProbeAccel(ctx context.Context, binary string, log *slog.Logger) (accel, reason string, err error) {
	if binary == "" {
		binary = "qemu-system-x86_64"
	}
	p, err := exec.LookPath(binary)
	if err != nil {
		return "", "", fmt.Errorf("%s not found (install qemu-system-x86): %w", binary, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	accel, reason = chooseAccel(ctx, p, DefaultKVMRecord(), log)
	return accel, reason, nil
}

// chooseAccel is probeAccel after a look at record: tcg at once when it
// says KVM stopped a guest on this host since its last boot (see
// refuseKVM). A /dev/kvm that does not open is said first.
func chooseAccel(ctx context.Context, binary, record string, log *slog.Logger) (accel, reason string) {
	if _, err := os.Stat("/dev/kvm"); err == nil && record != "-" {
		if r, ok := readKVMRefusal(record); ok {
			reason = fmt.Sprintf("%s (recorded %s in %s; remove it to probe KVM again)", r.Reason, r.At.Format(time.RFC3339), record)
			log.Warn("KVM is not usable; using TCG, which is much slower", "reason", reason)
			return "tcg", reason
		}
	}
	return probeAccel(ctx, binary, log)
}

// DefaultKVMRecord is where a backend records a KVM that stopped a guest:
// kvm-refused.json in the directory above DefaultImageDir.
func DefaultKVMRecord() string {
	return filepath.Join(filepath.Dir(DefaultImageDir()), "kvm-refused.json")
}

// kvmRefusal is the record of a KVM that stopped a guest. It holds until
// the host reboots (BootID changes): a host's KVM does not mend itself,
// and a new kernel or a new machine under the same disk may run it.
type kvmRefusal struct {
	BootID string    `json:"bootID"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// bootID names the host's current boot ("" where the kernel does not say).
func bootID() string {
	return strings.TrimSpace(readAll("/proc/sys/kernel/random/boot_id"))
}

// readKVMRefusal reads the record at path; ok is false when there is none,
// it cannot be read, or it is of an earlier boot.
func readKVMRefusal(path string) (r kvmRefusal, ok bool) {
	if readJSON(path, &r) != nil {
		return kvmRefusal{}, false
	}
	id := bootID()
	return r, id != "" && r.BootID == id && r.Reason != ""
}

// recordKVMRefusal writes the record of reason at path, whole or not at all.
func recordKVMRefusal(path, reason string) error {
	id := bootID()
	if id == "" {
		return errors.New("the host's boot id is unknown")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writeJSON(path, kvmRefusal{BootID: id, At: time.Now().UTC(), Reason: reason})
}

// probeSlack is how much longer than under TCG the probe may take under a
// KVM that is used: QEMU's start and a loaded host's noise.
const probeSlack = time.Second

// kvmTooSlow judges a KVM whose probe took kvm against the same probe under
// TCG (tcg, or tcgErr if that failed): too slow when it took more than
// probeSlack longer. A failed TCG probe says nothing against KVM.
func kvmTooSlow(kvm, tcg time.Duration, tcgErr error) (reason string, slow bool) {
	if tcgErr != nil || kvm <= tcg+probeSlack {
		return "", false
	}
	return fmt.Sprintf("/dev/kvm opens but a probe VM took %s under KVM and %s under TCG: this KVM emulates rather than runs the guest",
		kvm.Round(time.Millisecond), tcg.Round(time.Millisecond)), true
}

// runProbe boots bootSector in a QEMU using accel and waits up to wait for
// its marker on the serial port; it returns how long that took from QEMU's
// start. The error says what happened instead (QEMU exited, or the guest
// printed nothing) with the start of QEMU's output. The probe VM is killed
// and its files removed before runProbe returns, whatever the outcome.
func runProbe(ctx context.Context, binary, accel string, wait time.Duration, log *slog.Logger) (time.Duration, error) {
	dir, err := os.MkdirTemp("", "hvkube-accel-probe-")
	if err != nil {
		return 0, fmt.Errorf("probe: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "boot.img"), bootSector(), 0o600); err != nil {
		return 0, fmt.Errorf("probe: %w", err)
	}
	out, err := os.Create(filepath.Join(dir, "qemu.log"))
	if err != nil {
		return 0, fmt.Errorf("probe: %w", err)
	}
	defer out.Close()

	args := probeArgs(accel)
	cmd := exec.CommandContext(ctx, binary, args...)
	// The files are named relative to the probe's own directory, so no
	// path needs escaping for QEMU's option syntax.
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("probe: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	took, reaped, runErr := probeOutcome(ctx, filepath.Join(dir, "serial.log"), start, wait, exited)
	if !reaped {
		cmd.Process.Kill()
		<-exited
	}
	output := readAll(filepath.Join(dir, "qemu.log"))
	log.Debug("accelerator probe", "accel", accel, "args", args, "ok", runErr == nil, "output", output)
	if runErr != nil {
		if s := summarize(output); s != "" {
			return 0, fmt.Errorf("%w: %s", runErr, s)
		}
		return 0, runErr
	}
	return took, nil
}

// probeOutcome polls serial until it holds probeMarker, QEMU exits (its
// Wait result arrives on exited), wait passes or ctx ends. reaped reports
// whether it took the result from exited.
func probeOutcome(ctx context.Context, serial string, start time.Time, wait time.Duration, exited <-chan error) (took time.Duration, reaped bool, err error) {
	seen := func() bool { return bytes.Contains(readAllBytes(serial), []byte(probeMarker)) }
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			if seen() {
				return time.Since(start), true, nil
			}
			if err == nil {
				err = errors.New("exit status 0")
			}
			return 0, true, fmt.Errorf("the probe VM exited before its guest printed: %w", err)
		case <-ctx.Done():
			return 0, false, fmt.Errorf("probe: %w", ctx.Err())
		case <-deadline.C:
			if seen() {
				return time.Since(start), false, nil
			}
			return 0, false, fmt.Errorf("the probe VM's guest printed nothing within %s", wait)
		case <-tick.C:
			if seen() {
				return time.Since(start), false, nil
			}
		}
	}
}

// probeArgs is the probe VM's command line: a PC with 16 MB, no devices
// but the chipset's IDE disk (boot.img) and a serial port written to
// serial.log, both in QEMU's working directory. SeaBIOS boots the disk's
// boot sector, so guest code really runs under accel before the marker
// appears.
func probeArgs(accel string) []string {
	return []string{
		"-name", "hvkube-accel-probe",
		"-machine", "pc",
		"-accel", accel,
		"-m", "16M",
		"-nodefaults", "-no-user-config",
		"-display", "none",
		"-no-reboot",
		"-drive", "format=raw,file=boot.img,if=ide",
		"-serial", "file:serial.log",
	}
}

// bootSector returns a 512-byte MBR boot sector that writes probeMarker to
// the first serial port (I/O port 0x3f8) and halts for good. The BIOS loads
// it at 0000:7c00 and jumps to it in real mode.
func bootSector() []byte {
	const load = 0x7c00
	code := []byte{
		0xfa,       // cli
		0x31, 0xc0, // xor ax, ax
		0x8e, 0xd8, // mov ds, ax
		0xfc,             // cld
		0xbe, 0x00, 0x00, // mov si, marker (set below)
		0xba, 0xf8, 0x03, // mov dx, 0x3f8
		0xac,       // next: lodsb
		0x84, 0xc0, // test al, al
		0x74, 0x03, // jz done
		0xee,       // out dx, al
		0xeb, 0xf8, // jmp next
		0xf4,       // done: hlt
		0xeb, 0xfd, // jmp done
	}
	binary.LittleEndian.PutUint16(code[7:], uint16(load+len(code)))
	s := make([]byte, 512)
	n := copy(s, code)
	copy(s[n:], probeMarker) // the zeros after it end the string
	s[510], s[511] = 0x55, 0xaa
	return s
}

// summarize shortens QEMU's output for a reason: its first lines, where
// QEMU puts its error (a failed KVM entry is followed by a register dump).
func summarize(output string) string {
	var lines []string
	for _, l := range strings.Split(output, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
		if len(lines) == 3 {
			break
		}
	}
	s := strings.Join(lines, "; ")
	if len(s) > 400 {
		s = strings.ToValidUTF8(s[:400], "") + "…"
	}
	return s
}

func readAllBytes(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

func readAll(path string) string { return string(readAllBytes(path)) }

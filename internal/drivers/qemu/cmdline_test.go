package qemu

import (
	"slices"
	"strings"
	"testing"
)

func TestMachineArgs(t *testing.T) {
	base := machine{
		Name: "hvkube-sandbox:a:1", Machine: "q35", Accel: "tcg", CPUs: 1, MemoryMB: 512,
		Kernel: "/img/vmlinux", Initrd: "/img/initrd.img", Append: "quiet",
		Disk: "/data/sandboxes/a/disk.qcow2", QMPSocket: "/run/x/qmp.sock", QGASocket: "/run/x/qga.sock",
		VNCSocket: "/run/x/vnc.sock", PIDFile: "/data/sandboxes/a/pid", SerialLog: "/data/sandboxes/a/serial.log",
		TBSizeMB: 64,
	}
	tests := []struct {
		name    string
		change  func(m *machine)
		want    []string // consecutive arguments that must appear
		notWant []string
	}{
		{"boot", nil,
			[]string{"-drive", "if=none,id=disk0,format=qcow2,cache=writeback,file=/data/sandboxes/a/disk.qcow2"},
			[]string{"-incoming", "-add-fd"}},
		{"no NIC without a network", nil, []string{"-nic", "none"}, []string{"-netdev"}},
		{"a NIC on the stream socket with the image's MAC", func(m *machine) {
			m.NetSocket, m.Network = "/run/x/net.sock", &imageNetwork{MAC: "52:54:00:aa:bb:cc"}
		},
			[]string{"-netdev", "stream,id=net0,server=on,addr.type=unix,addr.path=/run/x/net.sock",
				"-device", "virtio-net-pci,netdev=net0,mac=52:54:00:aa:bb:cc"},
			[]string{"-nic"}},
		{"a NIC with the guest network's MAC when the image names none", func(m *machine) {
			m.NetSocket, m.Network = "/run/x/net.sock", &imageNetwork{}
		},
			[]string{"-device", "virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56"}, []string{"-nic"}},
		{"tcg cache size", nil, []string{"-accel", "tcg,tb-size=64"}, nil},
		{"ram", nil, []string{"-object", "memory-backend-ram,id=ram0,size=512M"}, nil},
		{"clone maps the template's RAM privately", func(m *machine) { m.MemFile, m.Incoming = "/t/ram", true },
			[]string{"-object", "memory-backend-file,id=ram0,size=512M,mem-path=/t/ram,share=off"}, nil},
		{"template RAM is shared", func(m *machine) { m.MemFile, m.MemShared = "/t/ram", true },
			[]string{"-object", "memory-backend-file,id=ram0,size=512M,mem-path=/t/ram,share=on"}, nil},
		{"incoming", func(m *machine) { m.Incoming = true }, []string{"-incoming", "defer"}, nil},
		{"disk passed as fds", func(m *machine) { m.DiskFDs = true },
			[]string{"-add-fd", "fd=3,set=1,opaque=disk-rw", "-add-fd", "fd=4,set=1,opaque=disk-ro", "-append", "quiet",
				"-drive", "if=none,id=disk0,format=qcow2,cache=writeback,file=/dev/fdset/1,file.locking=off"},
			[]string{"if=none,id=disk0,format=qcow2,cache=writeback,file=/data/sandboxes/a/disk.qcow2"}},
		{"commas in paths are escaped", func(m *machine) { m.Disk = "/d/a,b.qcow2" },
			[]string{"-drive", "if=none,id=disk0,format=qcow2,cache=writeback,file=/d/a,,b.qcow2"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base
			if tt.change != nil {
				tt.change(&m)
			}
			args := m.args()
			if !containsRun(args, tt.want) {
				t.Errorf("args lack %q:\n%s", tt.want, strings.Join(args, " "))
			}
			for _, a := range tt.notWant {
				if slices.Contains(args, a) {
					t.Errorf("args have %q:\n%s", a, strings.Join(args, " "))
				}
			}
		})
	}
}

func containsRun(args, run []string) bool {
	for i := 0; i+len(run) <= len(args); i++ {
		if slices.Equal(args[i:i+len(run)], run) {
			return true
		}
	}
	return false
}

// TestPaceAcrossDevices: an event of one device waits deviceGap after the
// other's, and none waits after its own device's.
func TestPaceAcrossDevices(t *testing.T) {
	var p pace
	if d := p.next(false); d != 0 {
		t.Errorf("the first pointer event waits %v", d)
	}
	if d := p.next(false); d != 0 {
		t.Errorf("a pointer event after a pointer event waits %v", d)
	}
	if d := p.next(true); d <= deviceGap/2 || d > deviceGap {
		t.Errorf("a key right after a pointer event waits %v, want about %v", d, deviceGap)
	}
	if d := p.next(true); d != 0 {
		t.Errorf("a key after a key waits %v", d)
	}
	// The pointer waits from the time the key goes out, after its wait.
	if d := p.next(false); d <= deviceGap || d > 2*deviceGap {
		t.Errorf("a pointer event right after the key waits %v, want the key's wait and a gap", d)
	}
}

package qemu

import (
	"fmt"
	"strconv"
	"strings"
)

// machine is everything that shapes one QEMU command line. It is pure data
// so that the command lines hvkube runs can be golden-tested.
type machine struct {
	Name     string // -name, also how a process is recognised as ours
	Machine  string // q35 or pc
	Accel    string // kvm or tcg
	CPUs     int
	MemoryMB int
	// MemFile, when set, backs guest RAM with this file: shared (written
	// back) when MemShared, else mapped privately (copy on write) so that
	// clones share the template's clean pages.
	MemFile   string
	MemShared bool
	Kernel    string
	Initrd    string
	Append    string
	Disk      string // qcow2 overlay
	// DiskFDs passes the disk as two open files (read-write and read-only,
	// the child's fds 3 and 4) in an fd set instead of by path, so that
	// the file can be renamed while QEMU runs: QEMU reopens its disk when
	// a migration starts or ends, and reopens by the name it was given.
	DiskFDs bool
	// Incoming waits for the state to load (migrate-incoming) instead of
	// booting.
	Incoming bool

	// NetSocket, when set, gives the VM a virtio NIC, as Network (the
	// image's declaration) says, whose frames QEMU serves on this unix
	// socket as a stream server; the backend's guest network connects to
	// it (network.go). Without it the VM has no NIC. A snapshot and every
	// VM that loads it must have the same devices.
	NetSocket string
	Network   *imageNetwork

	QMPSocket string
	QGASocket string
	VNCSocket string
	PIDFile   string
	SerialLog string
	TBSizeMB  int // TCG translation cache; small keeps idle VMs small
}

// memBackendID names the RAM block. Every start of a VM uses the same id,
// so that state saved from one kind of backing loads into another.
const memBackendID = "ram0"

// args returns QEMU's arguments (without the program name). Values are
// passed as separate arguments, never through a shell; the few that go
// into QEMU's comma-separated option syntax are escaped by opt().
func (m machine) args() []string {
	accel := m.Accel
	if accel == "tcg" && m.TBSizeMB > 0 {
		accel += ",tb-size=" + strconv.Itoa(m.TBSizeMB)
	}
	mem := fmt.Sprintf("memory-backend-ram,id=%s,size=%dM", memBackendID, m.MemoryMB)
	if m.MemFile != "" {
		share := "off"
		if m.MemShared {
			share = "on"
		}
		mem = fmt.Sprintf("memory-backend-file,id=%s,size=%dM,mem-path=%s,share=%s", memBackendID, m.MemoryMB, opt(m.MemFile), share)
	}
	a := []string{
		"-name", m.Name,
		"-machine", m.Machine + ",memory-backend=" + memBackendID,
		"-accel", accel,
		"-smp", strconv.Itoa(m.CPUs),
		"-m", strconv.Itoa(m.MemoryMB) + "M",
		"-object", mem,
		"-nodefaults", "-no-user-config",
		"-kernel", m.Kernel,
	}
	if m.Initrd != "" {
		a = append(a, "-initrd", m.Initrd)
	}
	drive := "if=none,id=disk0,format=qcow2,cache=writeback,file=" + opt(m.Disk)
	if m.DiskFDs {
		a = append(a, "-add-fd", "fd=3,set=1,opaque=disk-rw", "-add-fd", "fd=4,set=1,opaque=disk-ro")
		// QEMU locks an image with OFD locks on the file it opens, and
		// lets go of them by closing it; but a file of an fd set stays
		// open in the set, so the read-write file's locks outlive a
		// migration's switch to the read-only one, and the VM cannot
		// take its disk back after it (cont: Failed to get "write"
		// lock). The overlay is this VM's alone; its backing files,
		// opened by path, are still locked.
		drive = "if=none,id=disk0,format=qcow2,cache=writeback,file=/dev/fdset/1,file.locking=off"
	}
	a = append(a,
		"-append", m.Append,
		"-drive", drive,
		"-device", "virtio-blk-pci,drive=disk0",
		"-vga", "std",
		"-device", "qemu-xhci,id=xhci",
		"-device", "usb-tablet,bus=xhci.0",
		"-device", "virtio-serial",
		"-chardev", "socket,id=qga0,path="+opt(m.QGASocket)+",server=on,wait=off",
		"-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
		"-device", "virtio-rng-pci",
		"-device", "vmgenid,guid=auto",
	)
	if m.NetSocket != "" {
		a = append(a,
			"-netdev", "stream,id=net0,server=on,addr.type=unix,addr.path="+opt(m.NetSocket),
			"-device", "virtio-net-pci,netdev=net0,mac="+opt(m.Network.mac()),
		)
	} else {
		a = append(a, "-nic", "none")
	}
	a = append(a,
		"-serial", "file:"+m.SerialLog,
		"-display", "none",
		"-vnc", "unix:"+opt(m.VNCSocket),
		"-qmp", "unix:"+opt(m.QMPSocket)+",server=on,wait=off",
		"-pidfile", m.PIDFile,
	)
	if m.Incoming {
		a = append(a, "-incoming", "defer")
	}
	return a
}

// opt escapes a value for QEMU's comma-separated option syntax, where a
// literal comma is written twice.
func opt(v string) string { return strings.ReplaceAll(v, ",", ",,") }

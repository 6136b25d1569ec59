#!/bin/bash
# boot.sh DIR [COMMAND [ARG...]]
#
# Cold-boots the linux-desktop image in DIR (as printed by build.sh) on a
# throw-away overlay disk, with the devices listed in DIR/image.json, and
# waits until the guest agent answers and hvkube-ready succeeds, printing the
# elapsed times. The QMP, guest-agent and VNC sockets and the serial log are
# in a temporary directory.
#
# With COMMAND, runs it once the desktop is ready, with HVKUBE_IMAGE_DIR,
# HVKUBE_VM_DIR, QMP_SOCKET, QGA_SOCKET, VNC_SOCKET and SERIAL_LOG in its
# environment, then stops the VM and exits with COMMAND's status. Without,
# keeps the VM running until interrupted (Ctrl-C).
#
# The waiting is done by `hvkube debug wait-ready`; the hvkube binary is
# $HVKUBE_BIN, else bin/hvkube of this repository, else hvkube on PATH
# (make build, or go build -o bin/hvkube ./cmd/hvkube), and COMMAND finds
# its path in HVKUBE_BIN too:
#
#   boot.sh DIR bin/hvkube debug selftest /tmp/selftest
#
# Variables: HVKUBE_BOOT_MEMORY_MB, HVKUBE_BOOT_CPUS (default: image.json),
# HVKUBE_BOOT_MACHINE (q35), HVKUBE_BOOT_TIMEOUT (180 s),
# HVKUBE_BOOT_ACCEL (kvm or tcg; default what `hvkube debug accel` says:
# kvm only when a probe VM runs under KVM, as the QEMU backend decides),
# HVKUBE_BOOT_QEMU_ARGS (extra QEMU arguments, split on blanks),
# HVKUBE_BOOT_NET=user (a virtio NIC on QEMU's user-mode network, whose
# addresses are those of hvkube's: the guest is 10.0.2.15, the host
# 10.0.2.2; default: no NIC), HVKUBE_BOOT_FORWARD="HOSTPORT:GUESTPORT ..."
# (with HVKUBE_BOOT_NET=user: 127.0.0.1:HOSTPORT on the host reaches the
# guest's GUESTPORT, connecting from 10.0.2.2 as hvkube does),
# HVKUBE_BOOT_KEEP=1 (keep the temporary directory).
set -euo pipefail

here=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
die() {
	printf 'boot.sh: %s\n' "$*" >&2
	exit 1
}
[[ $# -ge 1 ]] || die "usage: boot.sh IMAGE_DIR [COMMAND [ARG...]]"
dir=$(readlink -f "$1")
shift
[[ -f $dir/image.json ]] || die "$dir/image.json not found (run build.sh first)"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
hvkube=${HVKUBE_BIN:-}
if [[ -z $hvkube ]]; then
	if [[ -x $here/../../bin/hvkube ]]; then
		hvkube=$(readlink -f "$here/../../bin/hvkube")
	else
		hvkube=$(command -v hvkube) ||
			die "the hvkube binary is not found: build it (make build, or go build -o bin/hvkube ./cmd/hvkube in the repository) or set HVKUBE_BIN"
	fi
fi
[[ -x $hvkube ]] || die "$hvkube is not an executable"
"$hvkube" debug wait-ready --help >/dev/null 2>&1 ||
	die "$hvkube has no 'debug wait-ready' (built before it had): rebuild it (make build, or go build -o bin/hvkube ./cmd/hvkube)"
timeout=${HVKUBE_BOOT_TIMEOUT:-180}
[[ $timeout =~ ^[0-9]+$ ]] || die "HVKUBE_BOOT_TIMEOUT=$timeout: want a number of seconds"

# json_value KEY: a number or string value from image.json (flat keys only).
json_value() {
	sed -n "s/^  \"$1\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}\$/\1/p" "$dir/image.json" | head -n1
}
cmdline=$(json_value kernelCmdline)
memory=${HVKUBE_BOOT_MEMORY_MB:-$(json_value memoryMB)}
cpus=${HVKUBE_BOOT_CPUS:-$(json_value cpus)}
machine=${HVKUBE_BOOT_MACHINE:-q35}
extra=()
read -r -a extra <<<"${HVKUBE_BOOT_QEMU_ARGS:-}"
nic=(-nic none)
case ${HVKUBE_BOOT_NET:-none} in
none) [[ -z ${HVKUBE_BOOT_FORWARD:-} ]] || die "HVKUBE_BOOT_FORWARD needs HVKUBE_BOOT_NET=user" ;;
user)
	# The MAC the guest looks for (image.json's network block).
	mac=$(sed -n 's/^    "mac": "\([0-9a-f:]*\)",\{0,1\}$/\1/p' "$dir/image.json" | head -n1)
	net="user,model=virtio-net-pci,mac=${mac:-52:54:00:12:34:56}"
	for fwd in ${HVKUBE_BOOT_FORWARD:-}; do
		[[ $fwd =~ ^([0-9]+):([0-9]+)$ ]] || die "HVKUBE_BOOT_FORWARD: '$fwd' is not HOSTPORT:GUESTPORT"
		net+=",hostfwd=tcp:127.0.0.1:${BASH_REMATCH[1]}-:${BASH_REMATCH[2]}" # to 10.0.2.15
	done
	nic=(-nic "$net")
	;;
*) die "HVKUBE_BOOT_NET=$HVKUBE_BOOT_NET: want none or user" ;;
esac

accel=${HVKUBE_BOOT_ACCEL:-}
if [[ -z $accel ]]; then
	# A /dev/kvm that opens may not run a guest: ask the backend's probe.
	accel=$("$hvkube" debug accel 2>/dev/null) || accel=tcg
fi
case $accel in
kvm) accel=(-accel kvm -cpu host) ;;
tcg) accel=(-accel tcg) ;;
*) die "HVKUBE_BOOT_ACCEL=$accel: want kvm or tcg" ;;
esac
if [[ $machine == pc* ]]; then
	usb=(-device piix3-usb-uhci -device usb-tablet)
else
	usb=(-device qemu-xhci -device usb-tablet)
fi

run=$(mktemp -d "${TMPDIR:-/tmp}/hvkube-boot.XXXXXX")
qpid=
cleanup() {
	local status=$?
	trap - EXIT INT TERM
	if [[ -n $qpid ]] && kill -0 "$qpid" 2>/dev/null; then
		kill "$qpid" 2>/dev/null || true
		wait "$qpid" 2>/dev/null || true
	fi
	if ((status != 0)); then
		echo "boot.sh: last lines of the serial log:" >&2
		tail -n 20 "$run/serial.log" >&2 2>/dev/null || true
		tail -n 5 "$run/qemu.log" >&2 2>/dev/null || true
	fi
	if [[ ${HVKUBE_BOOT_KEEP:-0} == 1 ]]; then
		echo "boot.sh: kept $run" >&2
	else
		rm -rf "$run"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

qemu-img create -q -f qcow2 -F qcow2 -b "$dir/disk.qcow2" "$run/disk.qcow2"

start=$(date +%s.%N)
# setsid: QEMU keeps running in its own session, not in the terminal's
# process group; its stderr goes to a log.
setsid qemu-system-x86_64 \
	-name hvkube-boot "${accel[@]}" \
	-machine "$machine" -m "$memory" -smp "$cpus" \
	-nodefaults -no-user-config \
	-kernel "$dir/$(json_value kernel)" -initrd "$dir/initrd.img" -append "$cmdline" \
	-drive "if=none,id=disk0,format=qcow2,file=$run/disk.qcow2" \
	-device virtio-blk-pci,drive=disk0 \
	-vga std \
	"${usb[@]}" \
	-device virtio-serial \
	-chardev "socket,id=qga0,path=$run/qga.sock,server=on,wait=off" \
	-device virtserialport,chardev=qga0,name=org.qemu.guest_agent.0 \
	-device virtio-rng-pci \
	-device vmgenid,guid=auto \
	"${nic[@]}" \
	-serial "file:$run/serial.log" \
	-display none -vnc "unix:$run/vnc.sock" \
	-qmp "unix:$run/qmp.sock,server=on,wait=off" \
	"${extra[@]}" \
	</dev/null >"$run/qemu.log" 2>&1 &
qpid=$!

echo "booting $dir (machine $machine, ${memory} MB, $cpus vCPU, ${accel[1]}, NIC ${nic[1]}) in $run"
"$hvkube" debug wait-ready --qga "$run/qga.sock" --since "$start" --timeout "${timeout}s" --pid "$qpid"

export HVKUBE_IMAGE_DIR=$dir HVKUBE_VM_DIR=$run QMP_SOCKET=$run/qmp.sock QGA_SOCKET=$run/qga.sock \
	VNC_SOCKET=$run/vnc.sock SERIAL_LOG=$run/serial.log HVKUBE_BIN=$hvkube
if [[ $# -gt 0 ]]; then
	status=0
	"$@" || status=$?
	exit "$status"
fi
echo "QMP $QMP_SOCKET, guest agent $QGA_SOCKET, VNC $VNC_SOCKET; Ctrl-C stops the VM"
wait "$qpid"

#!/bin/bash
# Builds the linux-desktop guest template: a small Debian system that boots
# (QEMU -kernel/-initrd) straight into an X desktop (JWM + xterm) with
# qemu-guest-agent, from Debian packages only. JWM is the window manager:
# openbox would add about 140 MB of dependencies (image loaders, and
# python3, which the image has by now for its pyautogui module).
#
# Usage: build.sh [FLAVOR]   (as root; see README.md for the variables)
#
# FLAVOR is linux-desktop (the default) or the name of a directory beside
# this one holding a flavor.sh: the same system plus that flavor's packages
# and files (images/browser-desktop: Chromium, drivable over CDP and
# WebDriver, a file manager and a text editor, the browser open when the
# desktop is ready).
#
# The result is cached outside the source tree, keyed by a hash of this
# script, the files it installs and the configuration:
#   $HVKUBE_CACHE_DIR/images/FLAVOR/<hash>/
#       disk.qcow2 vmlinux vmlinuz initrd.img image.json
#   $HVKUBE_CACHE_DIR/images/FLAVOR/current -> <hash>
# When that directory exists already, it is printed at once. The last line on
# stdout is always the image directory.
set -euo pipefail

self=$(readlink -f "${BASH_SOURCE[0]}")
here=$(dirname "$self")
steps=9

die() {
	printf 'build.sh: %s\n' "$*" >&2
	exit 1
}

# --- flavor ---------------------------------------------------------------------
# A flavor's flavor.sh (sourced here) may set:
#   flavor_packages=(...)   packages installed on top of the base ones
#   flavor_memory_mb=N      the recommended guest memory (default 512)
#   flavor_resolution=WxH   the screen (default 1280x800)
#   flavor_disk_size=SIZE   the root filesystem's size (default 4G)
#   flavor_user=NAME        the desktop's user (default agent), uid 1000
#   flavor_password=WORD    that user's password, and sudo for it (default:
#                           no password, no sudo)
#   flavor_json='  "key": ...,'  image.json members describing the window
#                           the desktop starts with (instead of "terminal")
#   flavor_helpers=(NAME=PATH ...)  helper commands added to image.json's
#                           "helpers"
#   flavor_inputs=(...)     files of other images' directories that the
#                           flavor installs (paths under images/): part of
#                           the image's hash, as its own files are
# and define flavor_install, run in step 6 after the base configuration with
# $root (the guest root), $flavor_dir and the in_root helper at hand.
name=${1:-linux-desktop}
[[ $# -le 1 ]] || die "usage: build.sh [FLAVOR]"
[[ $name =~ ^[a-z][a-z0-9-]{0,40}$ ]] || die "bad flavor '$name'"
flavor_dir=
flavor_packages=()
flavor_helpers=()
flavor_inputs=()
flavor_memory_mb=512
flavor_resolution=1280x800
flavor_disk_size=4G
flavor_user=agent
flavor_password=
flavor_json=
if [[ $name != linux-desktop ]]; then
	flavor_dir=$(readlink -f "$here/../$name")
	[[ -f $flavor_dir/flavor.sh ]] || die "unknown flavor '$name' (no $flavor_dir/flavor.sh)"
	# shellcheck source=/dev/null
	. "$flavor_dir/flavor.sh"
	declare -F flavor_install >/dev/null || die "$flavor_dir/flavor.sh defines no flavor_install"
fi

# --- configuration ------------------------------------------------------------
suite=${HVKUBE_DEBIAN_SUITE:-bookworm}
mirror=${HVKUBE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${HVKUBE_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
resolution=${HVKUBE_RESOLUTION:-$flavor_resolution}
disk_size=${HVKUBE_DISK_SIZE:-$flavor_disk_size}
memory_mb=${HVKUBE_MEMORY_MB:-$flavor_memory_mb}
cpus=${HVKUBE_CPUS:-1}
cache_root=${HVKUBE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hvkube}
images_dir=$cache_root/images/$name
# Shared by every flavor: the package cache and the build lock.
base_dir=$cache_root/images/linux-desktop
verbose=${HVKUBE_BUILD_VERBOSE:-0}

# Fixed properties of the image (documented in README.md and image.json).
guest_user=$flavor_user
guest_uid=1000
x_display=:0
x_authority=/home/$guest_user/.Xauthority
guest_hostname=$name
terminal_font="DejaVu Sans Mono"
terminal_font_size=11
terminal_geometry=100x30+40+40
# Where that terminal lands on the screen (measured with xwininfo in the
# guest for this font and geometry): its client area, and a point inside.
terminal_client_area='{"x": 43, "y": 64, "width": 904, "height": 544}'
terminal_click_point='[495, 336]'
# image.json's description of that first window (a flavor that starts with
# another window replaces it with its flavor_json).
terminal_json='  "terminal": {
    "geometry": "'$terminal_geometry'",
    "font": "'"$terminal_font $terminal_font_size"'",
    "clientArea": '$terminal_client_area',
    "clickPoint": '$terminal_click_point'
  },'
# The guest's network when the sandbox has a NIC: a user-mode network of its
# own with slirp's addresses. hvkube-init configures it statically at boot
# (no DHCP), so a clone of a template snapshot resumes with it up.
net_mac=52:54:00:12:34:56
net_address=10.0.2.15
net_prefix=24
net_gateway=10.0.2.2
net_dns=10.0.2.3
kernel_cmdline="console=ttyS0 root=/dev/vda rootfstype=ext4 rw init=/sbin/hvkube-init quiet loglevel=3 i8042.noaux 8250.nr_uarts=1"

# Kernel modules: the initrd loads what mounting the root disk needs, the
# root filesystem carries those plus what the desktop uses (dependencies are
# added automatically).
initrd_modules=(virtio_pci virtio_blk crc32c_generic ext4)
rootfs_modules=(
	bochs evdev usbhid hid_generic xhci_pci uhci_hcd ehci_pci
	virtio_console virtio_rng virtio_balloon virtio_input virtio_net
	9pnet_virtio 9p virtiofs
)

# Guest packages on top of debootstrap's minbase (no recommends). python3
# (also as `python`) for agents that drive the desktop with Python (the
# image's pyautogui module, see guest/pyautogui.py); wmctrl, xdg-utils and
# file (xdg-open needs `file` for a file's type) for desktop-automation
# clients.
packages=(
	udev kmod procps iproute2 util-linux-extra
	qemu-guest-agent
	xserver-xorg-core xserver-xorg-input-libinput xauth
	jwm xterm fonts-dejavu-core
	xdotool xclip x11-xserver-utils x11-utils xcvt
	python3 python-is-python3 wmctrl xdg-utils file
)
# The helper commands in image.json (name=path), then the flavor's.
helpers=(
	ready=/usr/local/bin/hvkube-ready
	resolution=/usr/local/bin/hvkube-resolution
	clipboardSet=/usr/local/bin/hvkube-clipboard-set
	clipboardGet=/usr/local/bin/hvkube-clipboard-get
	identity=/usr/local/bin/hvkube-identity
)

step() {
	printf 'step %d/%d: %s\n' "$1" "$steps" "$2"
}

[[ $resolution =~ ^[1-9][0-9]{2,4}x[1-9][0-9]{2,4}$ ]] ||
	die "HVKUBE_RESOLUTION=$resolution: want WIDTHxHEIGHT"
[[ $disk_size =~ ^[1-9][0-9]*[MG]$ ]] || die "HVKUBE_DISK_SIZE=$disk_size: want e.g. 4G or 2048M"
[[ $memory_mb =~ ^[1-9][0-9]*$ ]] || die "HVKUBE_MEMORY_MB=$memory_mb: want a number"
[[ $cpus =~ ^[1-9][0-9]*$ ]] || die "HVKUBE_CPUS=$cpus: want a number"
[[ $suite =~ ^[a-z]+$ ]] || die "HVKUBE_DEBIAN_SUITE=$suite: want a suite name"
[[ $guest_user =~ ^[a-z][a-z0-9-]{0,30}$ ]] || die "flavor_user=$guest_user: want a user name"
[[ $flavor_password != *[$':\n']* ]] || die "flavor_password: no colon or newline"
[[ $(uname -m) == x86_64 ]] || die "this builds an amd64 guest and needs an x86_64 host"

# --- input hash ------------------------------------------------------------------
# Everything that changes the image: this script, the files it puts into the
# image, and the configuration. (Package versions are whatever the mirror
# serves at build time; README.md says how to force a rebuild.)
input_hash() {
	local f
	(
		cd "$here"
		for f in build.sh initrd-init guest/*; do
			[[ -f $f ]] || continue # e.g. a __pycache__ left by py_compile
			printf '%s %s\n' "$f" "$(sha256sum <"$f" | cut -d' ' -f1)"
		done
		for f in "${flavor_inputs[@]}"; do
			printf 'input %s %s\n' "$f" "$(sha256sum <"$here/../$f" | cut -d' ' -f1)"
		done
		if [[ -n $flavor_dir ]]; then
			cd "$flavor_dir"
			find . -type f ! -name README.md -print0 | LC_ALL=C sort -z |
				while IFS= read -r -d '' f; do
					printf 'flavor %s %s\n' "$f" "$(sha256sum <"$f" | cut -d' ' -f1)"
				done
		fi
		printf 'flavor=%s\nsuite=%s\nresolution=%s\ndisk=%s\nmemory=%s\ncpus=%s\narch=amd64\n' \
			"$name" "$suite" "$resolution" "$disk_size" "$memory_mb" "$cpus"
	) | sha256sum | cut -c1-16
}
hash=$(input_hash)
out_dir=$images_dir/$hash

point_current() {
	ln -sfn "$hash" "$images_dir/.current.tmp"
	mv -T "$images_dir/.current.tmp" "$images_dir/current"
}

if [[ -f $out_dir/image.json ]]; then
	point_current 2>/dev/null || true
	printf '%s\n' "$out_dir"
	exit 0
fi

((EUID == 0)) || die "building needs root (debootstrap, chroot); the cached image $out_dir does not exist"

# --- host dependencies -------------------------------------------------------------
if [[ ${HVKUBE_BUILD_IN_NS:-} != 1 ]]; then
	step 1 "host dependencies"
	missing=()
	command -v debootstrap >/dev/null || missing+=(debootstrap)
	command -v qemu-img >/dev/null || missing+=(qemu-utils)
	command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
	command -v cpio >/dev/null || missing+=(cpio)
	command -v gzip >/dev/null || missing+=(gzip)
	command -v xz >/dev/null || missing+=(xz-utils)
	command -v zstd >/dev/null || missing+=(zstd)
	command -v unshare >/dev/null || missing+=(util-linux)
	[[ -r /usr/share/keyrings/debian-archive-keyring.gpg ]] || missing+=(debian-archive-keyring)
	if ((${#missing[@]})); then
		echo "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		# Another apt run may hold the lock for a while: wait for it.
		apt-get -o DPkg::Lock::Timeout=900 -qq update >&2
		apt-get -o DPkg::Lock::Timeout=900 -y -qq install --no-install-recommends "${missing[@]}" >&2
	fi
	# mkfs.ext4 -d (populate from a directory) needs e2fsprogs 1.43 or newer.
	usage=$(mkfs.ext4 2>&1 || true)
	[[ $usage == *"[-d root-directory]"* ]] || die "mkfs.ext4 does not support -d (e2fsprogs >= 1.43 needed)"

	# Continue in a private mount namespace: the mounts the chroot needs
	# vanish with this process, however it ends.
	if unshare --mount --propagation private true 2>/dev/null; then
		HVKUBE_BUILD_IN_NS=1 exec unshare --mount --propagation private "$self" "$@"
	fi
fi

# --- build -------------------------------------------------------------------------
mkdir -p "$images_dir" "$base_dir"
exec 9>"$base_dir/.build.lock"
flock 9 # one build at a time; the builder before us may have built our hash
if [[ -f $out_dir/image.json ]]; then
	point_current
	printf '%s\n' "$out_dir"
	exit 0
fi

# Work directories of interrupted builds (we hold the lock, so nobody uses
# them). --one-file-system: never follow a mount left behind into the host.
for d in "$images_dir"/.build-*; do
	[[ -d $d ]] || continue
	umount -R "$d/rootfs" 2>/dev/null || true
	rm -rf --one-file-system "$d"
done

work=$(mktemp -d "$images_dir/.build-$hash.XXXXXX")
root=$work/rootfs
out=$work/out
log=$work/build.log
deb_cache=$base_dir/.cache/debs
mkdir -p "$root" "$out" "$deb_cache/partial"

cleanup() {
	local status=$?
	trap - EXIT
	umount -R "$root/var/cache/apt/archives" 2>/dev/null || true
	umount -R "$root/proc" 2>/dev/null || true
	umount -R "$root/sys" 2>/dev/null || true
	if ((status != 0)) && [[ -f $log ]]; then
		echo "build.sh: build failed; last lines of $log:" >&2
		tail -n 40 "$log" >&2
	fi
	rm -rf --one-file-system "$work"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# run CMD...: run a noisy command, its output in the build log (and on
# stderr with HVKUBE_BUILD_VERBOSE=1).
run() {
	if [[ $verbose == 1 ]]; then
		"$@" 2>&1 | tee -a "$log" >&2
	else
		"$@" >>"$log" 2>&1
	fi
}
# in_root CMD...: run CMD in the guest root with a clean environment.
in_root() {
	run env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
		DEBIAN_FRONTEND=noninteractive chroot "$root" "$@"
}

# mount_build: what apt needs in the build root (undone by umount_build,
# and by cleanup).
mount_build() {
	mount -t proc proc "$root/proc"
	mount -t sysfs -o ro sysfs "$root/sys"
	# Packages go to (and come from) the cache shared by builds.
	mount --bind "$deb_cache" "$root/var/cache/apt/archives"
}
umount_build() {
	umount "$root/var/cache/apt/archives"
	umount "$root/sys"
	umount "$root/proc"
}

# package_layer: steps 2 and 3, debootstrap and every package. Their
# result is kept as one layer (a tarball of the root) keyed by the package
# lists and this function's text, so that a change to the configuration
# or the files of an image does not download and unpack its packages
# again. (Package versions are the mirror's when the layer was made:
# HVKUBE_REBUILD_PACKAGES=1 makes it anew.)
package_layer() {
	step 2 "debootstrap $suite (minbase)"
	run debootstrap --variant=minbase --arch=amd64 --cache-dir="$deb_cache" \
		"$suite" "$root" "$mirror"

	step 3 "guest packages"
	{
		echo "deb $mirror $suite main"
		if [[ $suite != sid && $suite != unstable ]]; then
			echo "deb $mirror $suite-updates main"
			echo "deb $security_mirror $suite-security main"
		fi
	} >"$root/etc/apt/sources.list"
	cat >"$root/etc/apt/apt.conf.d/90hvkube" <<-'EOF'
	APT::Install-Recommends "false";
	APT::Install-Suggests "false";
	Acquire::Languages "none";
	EOF
	# No documentation, manual pages or translations (copyright files stay).
	cat >"$root/etc/dpkg/dpkg.cfg.d/90hvkube-nodoc" <<-'EOF'
	path-exclude=/usr/share/doc/*
	path-include=/usr/share/doc/*/copyright
	path-exclude=/usr/share/man/*
	path-exclude=/usr/share/info/*
	path-exclude=/usr/share/locale/*
	path-exclude=/usr/share/lintian/*
	path-exclude=/usr/share/bug/*
	path-exclude=/usr/share/menu/*
	# X runs on a dumb framebuffer without OpenGL: Mesa's drivers and the LLVM
	# and Z3 libraries behind them (about 160 MB) are never loaded.
	path-exclude=/usr/lib/x86_64-linux-gnu/dri/*
	path-exclude=/usr/lib/x86_64-linux-gnu/libLLVM-*
	path-exclude=/usr/lib/x86_64-linux-gnu/libz3.so*
	# cpp is there only for xrdb (x11-xserver-utils); xrdb -nocpp still works.
	path-exclude=/usr/lib/gcc/*/cc1
	EOF
	# Nothing may start services inside the build root.
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 0755 "$root/usr/sbin/policy-rc.d"
	mount_build
	in_root apt-get -q update
	in_root apt-get -q -y dist-upgrade
	in_root apt-get -q -y install "${packages[@]}" "${flavor_packages[@]}"
}
layer_dir=$base_dir/.cache/layers
# layer_key FLAVOR_PACKAGE...: the key of the layer of the base packages
# and those.
layer_key() {
	{
		declare -f package_layer
		printf '%s\n' "$suite" "${packages[@]}" -- "$@"
	} | sha256sum | cut -c1-16
}
layer_key=$(layer_key "${flavor_packages[@]}")
layer=$layer_dir/$name-$layer_key.tar.zst
# A flavor's packages go on top of the base image's layer when there is
# one (make builds the base image first): no second debootstrap.
base_layer=$layer_dir/linux-desktop-$(layer_key).tar.zst
# untar_layer LAYER: unpack a layer into the build root, then bring its
# packages up to the mirror's (security updates since it was made). A
# layer is run as root (in the chroot): only root's own is taken.
untar_layer() {
	[[ -O $1 && ! -L $1 ]] || die "$1: a layer not owned by root; remove it"
	run tar -x --zstd --numeric-owner -p --xattrs --xattrs-include='*' -f "$1" -C "$root"
	mount_build
	in_root apt-get -q update
	in_root apt-get -q -y dist-upgrade
}
if [[ -f $layer && ${HVKUBE_REBUILD_PACKAGES:-0} != 1 ]]; then
	step 3 "guest packages (the cached layer $layer_key)"
	untar_layer "$layer"
else
	if ((${#flavor_packages[@]})) && [[ -f $base_layer && ${HVKUBE_REBUILD_PACKAGES:-0} != 1 ]]; then
		step 3 "guest packages (on the base image's layer $(basename "$base_layer" .tar.zst))"
		untar_layer "$base_layer"
		in_root apt-get -q -y install "${packages[@]}" "${flavor_packages[@]}"
	else
		package_layer
	fi
	step 3 "guest packages: keeping the layer $layer_key"
	install -d -m 0700 "$layer_dir"
	umount_build # nothing of the host in the layer
	run tar -c -I 'zstd -1 -T0' --numeric-owner --xattrs --xattrs-include='*' -f "$layer.part" -C "$root" .
	mv -f "$layer.part" "$layer"
	mount_build
	# One layer per image: the ones of earlier package lists go.
	for f in "$layer_dir/$name"-*.tar.zst; do
		[[ $f == "$layer" ]] || rm -f -- "$f"
	done
fi

step 4 "kernel and modules"
kernel_pkg=$(chroot "$root" apt-cache depends linux-image-amd64 |
	awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
[[ -n $kernel_pkg ]] || die "cannot find the kernel package behind linux-image-amd64"
# Downloaded only (into the shared cache): the kernel is unpacked outside
# the package database, and just the modules the guest uses are kept.
in_root apt-get -q -y install --download-only "$kernel_pkg" busybox-static
deb_file() { # PACKAGE -> path of the candidate version's .deb in the cache
	local ver
	ver=$(chroot "$root" apt-cache show --no-all-versions "$1" | awk '$1 == "Version:" { print $2; exit }')
	printf '%s/%s_%s_amd64.deb\n' "$deb_cache" "$1" "${ver//:/%3a}"
}
kdir=$root/tmp/kernel
mkdir -p "$kdir" "$work/busybox"
dpkg-deb -x "$(deb_file "$kernel_pkg")" "$kdir"
dpkg-deb -x "$(deb_file busybox-static)" "$work/busybox"
kver=$(basename "$(find "$kdir/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n1)")
[[ -n $kver ]] || die "no modules directory in $kernel_pkg"
cp "$kdir/boot/vmlinuz-$kver" "$out/vmlinuz"
# The bzImage decompresses itself at boot, which takes about three seconds
# under emulation. QEMU boots the ELF kernel inside it directly instead
# (through its PVH entry point), so keep that uncompressed copy as well.
kernel_file=vmlinuz
if grep -qx 'CONFIG_PVH=y' "$kdir/boot/config-$kver"; then
	xz_at=$(LC_ALL=C grep -obUaP -m1 '\xfd7zXZ\x00' "$out/vmlinuz" | head -n1 | cut -d: -f1 || true)
	if [[ -n $xz_at ]] &&
		xz -dc --single-stream < <(tail -c +$((xz_at + 1)) "$out/vmlinuz" 2>/dev/null) >"$out/vmlinux" 2>/dev/null &&
		[[ $(head -c 4 "$out/vmlinux" | od -An -c | tr -d ' ') == 177ELF ]]; then
		kernel_file=vmlinux
	else
		rm -f "$out/vmlinux"
		echo "build.sh: no xz-compressed ELF kernel in the bzImage; booting vmlinuz" >&2
	fi
fi
in_root depmod -b /tmp/kernel "$kver"

# module_files MODULE...: the .ko files (relative to lib/modules/KVER) of
# the modules and everything they depend on, dependencies first.
module_files() {
	chroot "$root" modprobe -d /tmp/kernel -S "$kver" --show-depends -a "$@" |
		awk '$1 == "insmod" { print $2 }' |
		sed "s|^/tmp/kernel/lib/modules/$kver/||" | awk '!seen[$0]++'
}
mapfile -t initrd_files < <(module_files "${initrd_modules[@]}")
mapfile -t rootfs_files < <(module_files "${initrd_modules[@]}" "${rootfs_modules[@]}")
((${#initrd_files[@]} && ${#rootfs_files[@]})) || die "module dependency resolution failed"
mdir=$root/lib/modules/$kver
mkdir -p "$mdir"
for f in "${rootfs_files[@]}"; do
	install -D -m 0644 "$kdir/lib/modules/$kver/$f" "$mdir/$f"
done
cp "$kdir/lib/modules/$kver"/modules.{builtin,builtin.modinfo,order} "$mdir/"
in_root depmod "$kver"

step 5 "initrd"
ird=$work/initrd
mkdir -p "$ird/bin" "$ird/dev" "$ird/lib/modules"
install -m 0755 "$work/busybox/bin/busybox" "$ird/bin/busybox"
install -m 0755 "$here/initrd-init" "$ird/init"
for f in "${initrd_files[@]}"; do
	install -D -m 0644 "$kdir/lib/modules/$kver/$f" "$ird/lib/modules/$f"
done
printf '%s\n' "${initrd_files[@]}" >"$ird/lib/modules/load.list"
mknod -m 0600 "$ird/dev/console" c 5 1
(cd "$ird" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -9 >"$out/initrd.img"
rm -rf "$kdir"

step 6 "guest configuration"
in_root useradd --create-home --uid "$guest_uid" --user-group --shell /bin/bash "$guest_user"
if [[ -n $flavor_password ]]; then
	# A password, and sudo with it (as OSWorld's image has: tasks run
	# `echo PASSWORD | sudo -S …`).
	chroot "$root" test -x /usr/bin/sudo || die "flavor_password needs the sudo package"
	printf '%s:%s\n' "$guest_user" "$flavor_password" | in_root chpasswd
	in_root usermod -aG sudo "$guest_user"
fi
g=$here/guest
install -m 0755 "$g/init" "$root/sbin/hvkube-init"
ln -sfn hvkube-init "$root/sbin/init"
for cmd in shutdown poweroff reboot halt; do
	install -m 0755 "$g/shutdown" "$root/sbin/$cmd"
done
install -d "$root/usr/local/lib/hvkube" "$root/etc/hvkube" "$root/etc/X11/xorg.conf.d" "$root/etc/jwm"
install -m 0755 "$g/session" "$root/usr/local/lib/hvkube/session"
install -m 0755 "$g/terminal" "$root/usr/local/lib/hvkube/terminal"
install -m 0644 "$g/x-env.sh" "$root/usr/local/lib/hvkube/x-env.sh"
install -m 0644 "$g/session-env.bash" "$root/usr/local/lib/hvkube/session-env.bash"
# Every interactive bash (Debian's /etc/profile reads bash.bashrc for login
# shells too) loads the session variables of the desktop's claim.
printf '\n# hvkube: the session variables of a claim (/run/hvkube/env)\n[ -r /usr/local/lib/hvkube/session-env.bash ] && . /usr/local/lib/hvkube/session-env.bash\n' >>"$root/etc/bash.bashrc"
for cmd in hvkube-ready hvkube-resolution hvkube-clipboard-set hvkube-clipboard-get hvkube-identity; do
	install -m 0755 "$g/$cmd" "$root/usr/local/bin/$cmd"
done
install -m 0644 "$g/jwmrc" "$root/etc/jwm/system.jwmrc"
in_root jwm -p # parse the configuration, fail the build on an error
# pyautogui for every user of python3: where Debian's python3 looks for
# locally installed modules (/usr/local/lib/python3.X/dist-packages),
# compiled here rather than on the first import under emulation.
py_dir=$(chroot "$root" python3 -c 'import sys; print("/usr/local/lib/python3.%d/dist-packages" % sys.version_info[1])')
install -D -m 0644 "$g/pyautogui.py" "$root$py_dir/pyautogui/__init__.py"
in_root python3 -m compileall -q "$py_dir/pyautogui"
install -m 0644 "$g/xorg.conf" "$root/etc/X11/xorg.conf.d/10-hvkube.conf"
# Values shared by init, the session and the helpers (plain assignments).
cat >"$root/etc/hvkube/image.conf" <<EOF
HVKUBE_IMAGE=$name
HVKUBE_IMAGE_HASH=$hash
HVKUBE_RESOLUTION=$resolution
HVKUBE_USER=$guest_user
HVKUBE_DISPLAY=$x_display
HVKUBE_XAUTHORITY=$x_authority
HVKUBE_TERMINAL_FONT='$terminal_font'
HVKUBE_TERMINAL_FONT_SIZE=$terminal_font_size
HVKUBE_TERMINAL_GEOMETRY=$terminal_geometry
HVKUBE_NET_MAC=$net_mac
HVKUBE_NET_ADDRESS=$net_address
HVKUBE_NET_PREFIX=$net_prefix
HVKUBE_NET_GATEWAY=$net_gateway
HVKUBE_NET_DNS=$net_dns
EOF
printf '%s\n' "$guest_hostname" >"$root/etc/hostname"
cat >"$root/etc/hosts" <<EOF
127.0.0.1	localhost
127.0.1.1	$guest_hostname
::1		localhost ip6-localhost ip6-loopback
EOF
printf '/dev/vda\t/\text4\trw,noatime\t0\t1\n' >"$root/etc/fstab"
if [[ -n $flavor_dir ]]; then
	flavor_install
fi
helpers+=("${flavor_helpers[@]}")
helpers_json=
for h in "${helpers[@]}"; do
	[[ -z $helpers_json ]] || helpers_json+=$',\n'
	helpers_json+="    \"${h%%=*}\": \"${h#*=}\""
done
# Empty: hvkube-init writes one on first boot, hvkube-identity in each clone.
: >"$root/etc/machine-id"

step 7 "trim"
in_root apt-get -q -y autoclean # drop superseded packages from the cache
umount_build
rm -f "$root/usr/sbin/policy-rc.d"
# debootstrap copied the build host's resolv.conf for apt; hvkube-init
# writes the guest's when it brings the NIC up. Without one there is no
# name server.
rm -f "$root/etc/resolv.conf"
: >"$root/etc/resolv.conf"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
	"$root"/var/cache/apt/archives/*.deb "$root"/var/cache/debconf/*-old \
	"$root"/var/lib/dpkg/*-old "$root"/var/log/* "$root"/tmp/* \
	"$root"/usr/share/man "$root"/usr/share/info "$root"/usr/share/locale \
	"$root"/usr/share/lintian "$root"/usr/share/bug "$root"/usr/share/menu
# Documentation that debootstrap unpacked before the exclusions existed.
find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
rootfs_bytes=$(du -sbx "$root" | cut -f1)

step 8 "disk image"
# mkfs.ext4 -d fills the filesystem from the directory: no mount, no loop
# device. Initialising inode tables and journal here spares every guest the
# background ext4lazyinit writes; the zeros cost nothing in the qcow2.
truncate -s "$disk_size" "$work/disk.raw"
run mkfs.ext4 -q -F -L hvkube-root -m 1 -d "$root" \
	-E lazy_itable_init=0,lazy_journal_init=0 "$work/disk.raw"
run qemu-img convert -f raw -O qcow2 "$work/disk.raw" "$out/disk.qcow2"
rm -f "$work/disk.raw"

step 9 "metadata"
size_of() { stat -c %s "$1"; }
disk_virtual=$(qemu-img info --output=json "$out/disk.qcow2" | awk -F'[:,]' '/"virtual-size"/ { gsub(/ /, "", $2); print $2; exit }')
cat >"$out/image.json" <<EOF
{
  "name": "$name",
  "hash": "$hash",
  "arch": "amd64",
  "debianSuite": "$suite",
  "kernelVersion": "$kver",
  "kernel": "$kernel_file",
  "kernelBzImage": "vmlinuz",
  "initrd": "initrd.img",
  "disk": "disk.qcow2",
  "diskFormat": "qcow2",
  "kernelCmdline": "$kernel_cmdline",
  "resolution": "$resolution",
  "memoryMB": $memory_mb,
  "cpus": $cpus,
  "machine": "q35",
  "qemuArgs": [
    "-machine", "q35", "-m", "$memory_mb", "-smp", "$cpus",
    "-nodefaults", "-no-user-config",
    "-kernel", "@DIR@/$kernel_file", "-initrd", "@DIR@/initrd.img",
    "-append", "$kernel_cmdline",
    "-drive", "if=none,id=disk0,format=qcow2,file=@DISK@",
    "-device", "virtio-blk-pci,drive=disk0",
    "-vga", "std",
    "-device", "qemu-xhci", "-device", "usb-tablet",
    "-device", "virtio-serial",
    "-chardev", "socket,id=qga0,path=@QGA_SOCKET@,server=on,wait=off",
    "-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
    "-device", "virtio-rng-pci",
    "-device", "vmgenid,guid=auto",
    "-nic", "none",
    "-serial", "file:@SERIAL_LOG@",
    "-display", "none", "-vnc", "unix:@VNC_SOCKET@",
    "-qmp", "unix:@QMP_SOCKET@,server=on,wait=off"
  ],
  "network": {
    "model": "virtio-net-pci",
    "mac": "$net_mac",
    "address": "$net_address",
    "prefixLength": $net_prefix,
    "gateway": "$net_gateway",
    "dns": "$net_dns"
  },
  "guestAgentPort": "org.qemu.guest_agent.0",
  "guestUser": "$guest_user",
  "guestUid": $guest_uid,
  "display": {
    "DISPLAY": "$x_display",
    "XAUTHORITY": "$x_authority"
  },
${flavor_json:-$terminal_json}
  "helpers": {
$helpers_json
  },
  "buildTime": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "sizes": {
    "diskBytes": $(size_of "$out/disk.qcow2"),
    "diskVirtualBytes": $disk_virtual,
    "rootfsBytes": $rootfs_bytes,
    "kernelBytes": $(size_of "$out/$kernel_file"),
    "kernelBzImageBytes": $(size_of "$out/vmlinuz"),
    "initrdBytes": $(size_of "$out/initrd.img")
  }
}
EOF
mv -T "$out" "$out_dir"
point_current
printf '%s\n' "$out_dir"

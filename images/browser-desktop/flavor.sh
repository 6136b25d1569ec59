# browser-desktop: the linux-desktop system plus Firefox ESR, a file manager
# (PCManFM) and a text editor (L3afpad), with Firefox open on a local start
# page when the desktop is ready, so that clones of a template snapshot
# start with the browser on screen. Sourced by ../linux-desktop/build.sh
# (build.sh browser-desktop); see README.md.
#
# PCManFM and L3afpad are the lightest GTK file manager and editor in
# Debian: they add about 5 MB over Firefox's own GTK 3 (Mousepad would add
# 12 MB, a Qt editor such as FeatherPad all of Qt). dbus-daemon gives the
# session a bus, which Firefox uses to open a window in the running
# instance when it is started again (the tray's Browser button).

flavor_packages=(firefox-esr pcmanfm l3afpad dbus-daemon dbus-bin)
# The guest with Firefox on its start page uses about 400 MB of 1536 MB (see
# README.md); 512 MB is too little for real pages.
flavor_memory_mb=1536

# The start page (file://, nothing from the network) and its title once it
# has painted (the readiness check waits for that title).
browser_start_page=file:///usr/local/share/hvkube/start.html
browser_start_title="hvkube browser desktop"
# How long the session waits for Firefox's start page and for it to settle
# (a cold start under emulation takes one to three minutes, depending on the
# host's load): with the boot before it, within the QEMU backend's 5-minute
# limit on a cold boot.
browser_timeout=270
# How long it waits at most, after the start page shows, for Firefox to
# finish its start-up work (CPU mostly idle) before the desktop is ready.
browser_settle=30

flavor_install() {
	local g=$flavor_dir/guest profile=/home/$guest_user/.mozilla/firefox/hvkube
	install -m 0755 "$g/session" "$root/usr/local/lib/hvkube/session"
	install -m 0755 "$g/browser" "$root/usr/local/lib/hvkube/browser"
	install -m 0644 "$g/jwmrc" "$root/etc/jwm/system.jwmrc"
	in_root jwm -p
	install -d "$root/usr/local/share/hvkube"
	install -m 0644 "$g/start.html" "$root/usr/local/share/hvkube/start.html"
	# Policies (first-run pages, default-browser check, telemetry, updates,
	# studies) for every profile; preferences in the desktop's profile.
	install -d "$root/usr/lib/firefox-esr/distribution"
	install -m 0644 "$g/policies.json" "$root/usr/lib/firefox-esr/distribution/policies.json"
	install -d -m 0700 -o "$guest_uid" -g "$guest_uid" \
		"$root/home/$guest_user/.mozilla" "$root/home/$guest_user/.mozilla/firefox" "$root$profile"
	install -m 0644 -o "$guest_uid" -g "$guest_uid" "$g/user.js" "$root$profile/user.js"
	# Start Firefox once here (headless, natively): it creates the profile's
	# databases, registers its built-in add-ons and fills its startup cache,
	# work the guest would otherwise do under emulation on its first start.
	# Not essential: on failure the guest starts from the bare profile.
	install -d -m 1777 "$root/dev/shm"
	if ! in_root timeout 300 setpriv --reuid="$guest_uid" --regid="$guest_uid" --init-groups \
		env HOME="/home/$guest_user" USER="$guest_user" LANG=C.UTF-8 MOZ_CRASHREPORTER_DISABLE=1 \
		firefox-esr --headless --profile "$profile" --screenshot /tmp/firefox-warmup.png "$browser_start_page"; then
		echo "build.sh: could not start Firefox in the build root; the profile is made on the guest's first start" >&2
		rm -rf "$root$profile"
		install -d -m 0700 -o "$guest_uid" -g "$guest_uid" "$root$profile"
		install -m 0644 -o "$guest_uid" -g "$guest_uid" "$g/user.js" "$root$profile/user.js"
	fi
	rm -rf "$root$profile"/{lock,.parentlock,sessionstore-backups,crashes,minidumps,datareporting,saved-telemetry-pings} \
		"$root/tmp/firefox-warmup.png" "$root"/dev/shm/*
	cat >>"$root/etc/hvkube/image.conf" <<CONF
HVKUBE_BROWSER_PROFILE=$profile
HVKUBE_BROWSER_START_PAGE=$browser_start_page
HVKUBE_BROWSER_START_TITLE='$browser_start_title'
HVKUBE_BROWSER_TIMEOUT=$browser_timeout
HVKUBE_BROWSER_SETTLE=$browser_settle
HVKUBE_READY_WAIT=10
CONF
	local ff_version
	ff_version=$(chroot "$root" dpkg-query -W -f '${Version}' firefox-esr)
	flavor_json='  "browser": {
    "command": "/usr/local/lib/hvkube/browser",
    "windowClass": "firefox-esr",
    "startPage": "'$browser_start_page'",
    "startTitle": "'$browser_start_title'",
    "firefoxVersion": "'$ff_version'"
  },
  "apps": ["firefox-esr", "pcmanfm", "l3afpad", "xterm"],'
}

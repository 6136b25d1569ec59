# browser-desktop: the linux-desktop system plus Chromium, a file manager
# (PCManFM) and a text editor (L3afpad), with Chromium open on a local start
# page when the desktop is ready, so that clones of a template snapshot
# start with the browser on screen. Sourced by ../linux-desktop/build.sh
# (build.sh browser-desktop); see README.md.
#
# The browser is Chromium because automation clients drive it as it is:
# Playwright (connectOverCDP) and Puppeteer speak its DevTools protocol
# (CDP), Selenium speaks WebDriver to chromedriver, which attaches to the
# running browser (goog:chromeOptions debuggerAddress). Debian has no
# geckodriver, and Playwright cannot drive a stock Firefox.
#
# Chromium listens for CDP on 127.0.0.1 only (a headful Chromium ignores
# --remote-debugging-address) and chromedriver on localhost; hvkube reaches
# guest ports on the NIC's address (from the user-mode network's gateway),
# so socat relays both ports from the NIC's address to localhost (services/).
#
# PCManFM and L3afpad are the lightest GTK file manager and editor in
# Debian (Mousepad would add 12 MB, a Qt editor such as FeatherPad all of
# Qt). dbus-daemon gives the session a bus (Chromium and GTK log errors and
# lose a few desktop features without one).
#
# Chromium's sandbox stays on: Debian's kernel lets an unprivileged user
# create user namespaces, which the sandbox needs (no setuid helper).
#
# Accessibility: at-spi2-core (the accessibility bus, started on demand
# through the session bus, and its registry), the ATK bridge that Chromium
# and GTK 3 load (libatk-adaptor), gail for GTK 2 (libgail-common: PCManFM
# loads both as GTK modules, see guest/gtkrc), and pyatspi (python3-pyatspi,
# with the GObject bindings of libatspi that hvkube-accessibility uses to
# print the tree as XML in OSWorld's format).

flavor_packages=(
	chromium chromium-driver socat pcmanfm l3afpad dbus-daemon dbus-bin
	at-spi2-core libatk-adaptor libgail-common python3-pyatspi
)
# image.json's helpers beyond the base image's.
flavor_helpers=(accessibility=/usr/local/bin/hvkube-accessibility)
# The guest with Chromium on its start page uses about 400 MB of 1536 MB
# (see README.md); 512 MB is too little for real pages.
flavor_memory_mb=1536

# The start page (file://, nothing from the network) and its title once it
# has painted (the readiness check waits for that title).
browser_start_page=file:///usr/local/share/hvkube/start.html
browser_start_title="hvkube browser desktop"
# A profile of its own, not ~/.config/chromium: Chrome 136 and later ignore
# --remote-debugging-port on the default profile directory.
browser_profile_dir=.config/hvkube-browser # in the desktop user's home
# WM_CLASS class of Chromium's windows (the instance part names the profile).
browser_window_class=Chromium
# Automation ports, on 127.0.0.1 in the guest and relayed from the NIC.
cdp_port=9222
webdriver_port=9515
# How long the session waits for the start page and for the browser to
# settle: with the boot before it, within the QEMU backend's 5-minute limit
# on a cold boot under emulation.
browser_timeout=270
# How long it waits at most, after the start page shows, for the browser to
# finish its start-up work (CPU mostly idle) before the desktop is ready.
browser_settle=30

flavor_install() {
	local g=$flavor_dir/guest svc browser_profile=/home/$guest_user/$browser_profile_dir
	install -m 0755 "$g/session" "$root/usr/local/lib/hvkube/session"
	install -m 0755 "$g/browser" "$root/usr/local/lib/hvkube/browser"
	install -m 0644 "$g/jwmrc" "$root/etc/jwm/system.jwmrc"
	in_root jwm -p
	install -d "$root/usr/local/share/hvkube"
	install -m 0644 "$g/start.html" "$root/usr/local/share/hvkube/start.html"
	install -m 0755 "$g/hvkube-accessibility" "$root/usr/local/bin/hvkube-accessibility"
	# xdg-open: web pages, PDF and images in the running Chromium, text in
	# L3afpad, directories in PCManFM.
	install -D -m 0644 "$g/hvkube-browser.desktop" \
		"$root/usr/local/share/applications/hvkube-browser.desktop"
	install -D -m 0644 "$g/mimeapps.list" "$root/etc/xdg/mimeapps.list"
	install -D -m 0644 "$g/gtkrc" "$root/etc/gtk-2.0/gtkrc"
	# Policies for every profile: no sign-in, sync, metrics, password
	# manager, translation or safe-browsing lookups (see policies.json).
	install -d "$root/etc/chromium/policies/managed"
	install -m 0644 "$g/policies.json" "$root/etc/chromium/policies/managed/hvkube.json"
	# chromedriver and the relays, run by hvkube-init as the desktop user.
	install -d "$root/etc/hvkube/services"
	for svc in "$g"/services/*; do
		install -m 0755 "$svc" "$root/etc/hvkube/services/${svc##*/}"
	done
	cat >>"$root/etc/hvkube/image.conf" <<CONF
HVKUBE_BROWSER_PROFILE=$browser_profile
HVKUBE_BROWSER_START_PAGE=$browser_start_page
HVKUBE_BROWSER_START_TITLE='$browser_start_title'
HVKUBE_BROWSER_TIMEOUT=$browser_timeout
HVKUBE_BROWSER_SETTLE=$browser_settle
HVKUBE_CDP_PORT=$cdp_port
HVKUBE_WEBDRIVER_PORT=$webdriver_port
HVKUBE_READY_WAIT=10
CONF
	install -d -m 0700 -o "$guest_uid" -g "$guest_uid" \
		"$root/home/$guest_user/.config" "$root$browser_profile"
	# Start Chromium once here (headless, natively, with the guest's flags):
	# it creates the profile's databases and preferences, work the guest
	# would otherwise do under emulation on its first start. Not essential:
	# on failure the guest starts from an empty profile.
	install -d -m 1777 "$root/dev/shm"
	if ! in_root timeout 300 setpriv --reuid="$guest_uid" --regid="$guest_uid" --init-groups \
		env HOME="/home/$guest_user" USER="$guest_user" LANG=C.UTF-8 \
		/usr/local/lib/hvkube/browser --prepare; then
		echo "build.sh: could not start Chromium in the build root; the profile is made on the guest's first start" >&2
		rm -rf "$root$browser_profile"
		install -d -m 0700 -o "$guest_uid" -g "$guest_uid" "$root$browser_profile"
	fi
	# Nothing of that run's process may look alive in the guest.
	rm -rf "$root$browser_profile"/{Singleton*,DevToolsActivePort,'Crash Reports',Crashpad} \
		"$root"/dev/shm/* "$root"/tmp/.org.chromium.* "$root"/tmp/.com.google.*
	local version
	version=$(chroot "$root" dpkg-query -W -f '${Version}' chromium)
	flavor_json='  "browser": {
    "command": "/usr/local/lib/hvkube/browser",
    "binary": "/usr/lib/chromium/chromium",
    "windowClass": "'$browser_window_class'",
    "profile": "'$browser_profile'",
    "startPage": "'$browser_start_page'",
    "startTitle": "'$browser_start_title'",
    "chromiumVersion": "'$version'"
  },
  "automation": {"cdp": '$cdp_port', "webdriver": '$webdriver_port'},
  "apps": ["chromium", "chromedriver", "pcmanfm", "l3afpad", "xterm"],'
}

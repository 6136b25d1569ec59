# Sourced by the hvkube-* helpers (bash): a fixed PATH, and the session's X
# display and authority file unless the caller set them (guest-exec callers
# may pass their own environment, or none).
# shellcheck source=/dev/null
. /etc/hvkube/image.conf
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LANG=${LANG:-C.UTF-8}
export DISPLAY=${DISPLAY:-$HVKUBE_DISPLAY}
export XAUTHORITY=${XAUTHORITY:-$HVKUBE_XAUTHORITY}

die() {
	printf '%s: %s\n' "${0##*/}" "$*" >&2
	exit 1
}

# x_answers: true when the X server answers within 5 s.
x_answers() {
	timeout 5 xdotool getdisplaygeometry >/dev/null 2>&1
}

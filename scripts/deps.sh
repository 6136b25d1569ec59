#!/usr/bin/env bash
# Installs what building, running and testing hvkube needs on Debian
# bookworm, skipping what is already there: QEMU, the image build tools,
# Chromium for the browser tests, Node.js and npm for the dashboard (make web
# installs its npm packages) and the Go modules. Uses sudo when not root.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  qemu-system-x86   # the VM backend
  qemu-utils        # qemu-img: overlays and image conversion
  qemu-guest-agent  # the guest agent protocol tests talk to a real one on the host
  debootstrap       # guest image build
  e2fsprogs         # mkfs.ext4 -d: guest disk without loop devices
  chromium          # headless browser tests: what a web page can do to the server
  ffmpeg            # output.screenRecording: agents' screens to video
  python3-selenium  # examples/selenium: the selenium agent's example and its test
  python3-httpx     # sdk/python: the Python SDK's one dependency
  python3-pytest    # sdk/python: its tests
  curl unzip ca-certificates
)
# The dashboard's build (npm, esbuild) and browser tests (playwright-core)
# need Node.js 18 or newer: bookworm's, unless one is installed already.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo_cmd=sudo
  fi
  echo "deps: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

GO=$(scripts/ensure-go.sh)
"$GO" mod download

#!/usr/bin/env bash
# Prints the path of a Go toolchain new enough to build hvkube, installing
# one first if needed. A Go >= 1.21 already on PATH is used as is: it fetches
# the exact toolchain go.mod asks for through the module proxy by itself.
# Without one, the toolchain is downloaded from the Go module proxy (the
# golang.org/toolchain module) into the hvkube cache.
set -euo pipefail

want=1.26.8
cache="${HVKUBE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hvkube}"

usable() {
  local v
  v=$("$1" env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  local major=${v%%.*} rest=${v#*.}
  local minor=${rest%%.*}
  [ "$major" -gt 1 ] || { [ "$major" -eq 1 ] && [ "${minor%%[!0-9]*}" -ge 21 ]; }
}

for cand in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go "$cache/go/bin/go"; do
  if [ -n "$cand" ] && [ -x "$cand" ] && usable "$cand"; then
    echo "$cand"
    exit 0
  fi
done

case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "ensure-go: unsupported CPU $(uname -m)" >&2; exit 1 ;;
esac
proxy="${GOPROXY:-https://proxy.golang.org}"
proxy="${proxy%%,*}"
[ "$proxy" = direct ] && proxy=https://proxy.golang.org
zip="v0.0.1-go${want}.linux-${arch}.zip"
echo "ensure-go: installing Go ${want} from ${proxy} into ${cache}/go" >&2
for tool in curl unzip; do
  if ! command -v "$tool" >/dev/null; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd=sudo
    $sudo_cmd apt-get update -qq >&2
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >&2
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL --retry 3 -o "$tmp/go.zip" "${proxy}/golang.org/toolchain/@v/${zip}"
unzip -q "$tmp/go.zip" -d "$tmp/x"
mkdir -p "$cache"
rm -rf "$cache/go"
mv "$tmp/x/golang.org/toolchain@v0.0.1-go${want}.linux-${arch}" "$cache/go"
echo "$cache/go/bin/go"

#!/bin/sh
# build.sh builds kube-apiserver and etcd from the Go module proxy, once, into
# the user's cache, and prints the directory that holds them. The directory is
# keyed by a hash of this module and the Go version, so a change to either
# builds again and an unchanged one builds nothing.
#
#   KUBE_ASSETS=$(hack/kube/build.sh)
set -eu
GO=${GO:-go}
here=$(cd "$(dirname "$0")" && pwd)
cache=${HVKUBE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hvkube}
key=$( (cat "$here/go.mod" "$here/go.sum" "$here/etcd/main.go"; "$GO" version) | sha256sum | cut -c1-16)
dir=$cache/kube/$key
if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ]; then
	echo "$dir"
	exit 0
fi
mkdir -p "$cache/kube"
tmp=$(mktemp -d "$cache/kube/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building kube-apiserver and etcd into $dir (once; about 20 CPU-minutes)" >&2
cd "$here"
CGO_ENABLED=0 "$GO" build -trimpath -ldflags=-s -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
CGO_ENABLED=0 "$GO" build -trimpath -ldflags=-s -o "$tmp/etcd" ./etcd
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"

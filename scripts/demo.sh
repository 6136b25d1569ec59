#!/usr/bin/env bash
# The demo: a short tour of hvkube against a running server
# (HVKUBE_SERVER, default http://127.0.0.1:8080). Screenshots go to
# $HVKUBE_DEMO_DIR (default: a temp directory).
set -euo pipefail
cd "$(dirname "$0")/.."
hv=bin/hvkube
out="${HVKUBE_DEMO_DIR:-${TMPDIR:-/tmp}/hvkube-demo}"
mkdir -p "$out"

step() { printf '\n\033[1m$ hvkube %s\033[0m\n' "$*"; "$hv" "$@"; }

# A desktop template: the first build cold-boots the image once and takes
# its snapshot (under software emulation that is about 20-40 s).
step apply -f examples/template.yaml
step wait template linux-desktop --for phase=Ready --timeout 15m

# A desktop of its own, cloned from the snapshot in well under a second.
step apply -f examples/sandbox.yaml
step wait sandbox browser-agent-1 --for phase=Running --timeout 5m
step get sandboxes -o wide
step screen browser-agent-1 --save "$out/desktop.png"

# Type into the terminal on the desktop, then look again.
step input browser-agent-1 --click 400,300 --type "echo hello from hvkube > /tmp/hello" --key Return
sleep 1
step exec browser-agent-1 -- cat /tmp/hello
step screen browser-agent-1 --save "$out/after-typing.png"
step pause browser-agent-1
step resume browser-agent-1

# The rest of the resources.
step apply -f examples/
step get pools
step get agents -o wide
step scale browser-workers --replicas 3
step get pools
step delete agent book-flight-task-123
step get events
printf '\nScreenshots: %s\n' "$out"

#!/usr/bin/env bash
# The demo: a short tour of hvkube against a running server
# (HVKUBE_SERVER, default http://127.0.0.1:8080).
set -euo pipefail
cd "$(dirname "$0")/.."
hv=bin/hvkube

step() { printf '\n\033[1m$ hvkube %s\033[0m\n' "$*"; "$hv" "$@"; }

step apply -f examples/
step get templates
step get pools
step get agents -o wide
step scale browser-workers --replicas 3
step get pools
step delete agent book-flight-task-123
step get events

#!/usr/bin/env bash
# The demo: a short tour of hvkube against a running server
# (HVKUBE_SERVER, default http://127.0.0.1:8080): a desktop of its own, then
# a pool of two desktops that five workflow agents share. Screenshots and
# artifacts go to $HVKUBE_DEMO_DIR (default: a temp directory).
set -euo pipefail
cd "$(dirname "$0")/.."
hv="${HVKUBE_BIN:-bin/hvkube}"
server="${HVKUBE_SERVER:-http://127.0.0.1:8080}"
out="${HVKUBE_DEMO_DIR:-${TMPDIR:-/tmp}/hvkube-demo}"
mkdir -p "$out"

# The API token for curl: HVKUBE_TOKEN, else, for a server on this machine,
# the token file in the server's default data directory (the CLI finds it
# the same way).
token="${HVKUBE_TOKEN-}"
if [ -z "${HVKUBE_TOKEN+set}" ]; then
  case "$server" in
    http://127.*|http://localhost[:/]*|http://localhost|http://\[::1\]*)
      token_file="${HVKUBE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/hvkube}/token"
      if [ -r "$token_file" ]; then token=$(tr -d '[:space:]' <"$token_file"); fi
      ;;
  esac
fi

step() { printf '\n\033[1m$ hvkube %s\033[0m\n' "$*"; "$hv" "$@"; }

# A desktop template: the first build cold-boots the image once and takes
# its snapshot (under software emulation that is about 20-40 s).
step apply -f examples/template.yaml
step wait template linux-desktop --for phase=Ready --timeout 15m

# A desktop of its own, cloned from the snapshot in well under a second.
step apply -f examples/sandbox.yaml
step wait sandbox browser-agent-1 --for phase=Running --timeout 5m
step screen browser-agent-1 --save "$out/desktop.png"
step exec browser-agent-1 -- hostname

# A pool of two warm desktops, and five agents that share them: each clicks
# into the terminal, types a command writing its city to a file, checks the
# file and keeps it as an artifact. The pool resets a desktop after each.
step apply -f examples/demo-pool.yaml
step wait pool demo --for condition=Ready --timeout 5m
step get pools
cities=(Lisbon Nairobi Osaka Quito Tromso)
agents=()
: > "$out/agents.yaml"
for i in "${!cities[@]}"; do
  city=${cities[$i]}
  name="write-$(echo "$city" | tr '[:upper:]' '[:lower:]')"
  agents+=("$name")
  sed -e "s/name: write-city/name: $name/" -e "s/Lisbon/$city/g" examples/workflow-agent.yaml >>"$out/agents.yaml"
  echo --- >>"$out/agents.yaml"
done
printf '\n\033[1m$ hvkube get agents -w   (in the background while they run)\033[0m\n'
"$hv" get agents -w &
watcher=$!
trap 'kill $watcher 2>/dev/null || true' EXIT
step apply -f "$out/agents.yaml"
"$hv" wait agent "${agents[@]}" --for phase=Completed --timeout 10m -q >/dev/null
sleep 0.5
kill $watcher 2>/dev/null || true
wait $watcher 2>/dev/null || true

step get agents -o wide
printf '\n\033[1mResults\033[0m\n'
for a in "${agents[@]}"; do
  curl -fsS ${token:+-H "Authorization: Bearer $token"} -o "$out/$a-result.txt" "$server/api/v1/agents/$a/files/artifacts/result.txt"
  printf '%-15s artifacts/result.txt: %s\n' "$a" "$(cat "$out/$a-result.txt")"
done
step agent result "${agents[0]}"
# A pool's desktop shows its last agent's claim for up to three seconds
# after the agent ends (the next claim's write is its release;
# docs/agents.md): list them once released.
for _ in $(seq 50); do
  "$hv" get sandboxes -l pool=demo -o json | grep -q '"currentAgent"' || break
  sleep 0.1
done
step get sandboxes
printf '\nScreenshots and artifacts: %s\n' "$out"

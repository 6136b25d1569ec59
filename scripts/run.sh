#!/usr/bin/env bash
# Starts the hvkube server on the embedded defaults, runs the demo against
# it, and keeps the server in the foreground until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=bin/hvkube
addr="${HVKUBE_ADDR:-127.0.0.1:8080}"
export HVKUBE_SERVER="http://${addr}"

if curl -fsS "${HVKUBE_SERVER}/healthz" >/dev/null 2>&1; then
  echo "run: a server already answers at ${HVKUBE_SERVER}; stop it first (or set HVKUBE_ADDR to another address)" >&2
  exit 1
fi

# The server's default data directory, named here so that the token it
# creates there on its first start can be read back.
data_dir="${HVKUBE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/hvkube}"
log="${TMPDIR:-/tmp}/hvkube-serve.log"
"$bin" serve --addr "$addr" --data-dir "$data_dir" >"$log" 2>&1 &
server=$!
# On the way out the server says which desktops it leaves running (the
# next start takes them back); repeat that here, where it is seen.
stop_server() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  grep -hE '^hvkube: [0-9]+ desktops? keeps? running' "$log" 2>/dev/null | tail -n 1 >&2 || true
}
trap stop_server EXIT
trap 'exit 130' INT TERM

for _ in $(seq 1 100); do
  curl -fsS "${HVKUBE_SERVER}/readyz" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { echo "run: the server did not start:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.1
done
# The token: the one given in HVKUBE_TOKEN, else the one the server keeps
# in its data directory. The demo and the CLI below use it.
if [ -z "${HVKUBE_TOKEN-}" ]; then
  [ -r "${data_dir}/token" ] || { echo "run: the server left no token in ${data_dir}/token:" >&2; cat "$log" >&2; exit 1; }
  HVKUBE_TOKEN=$(tr -d '[:space:]' <"${data_dir}/token")
fi
export HVKUBE_TOKEN
dashboard="${HVKUBE_SERVER}/#token=${HVKUBE_TOKEN}"

echo "hvkube server running at ${HVKUBE_SERVER} (log: ${log})"
echo "    To open the dashboard, copy and paste this URL into a browser:"
echo "        ${dashboard}"

scripts/demo.sh

echo
echo "The server keeps running at ${HVKUBE_SERVER}; try 'bin/hvkube get sandboxes'."
echo "    Dashboard: ${dashboard}"
echo "Press Ctrl-C to stop it; its desktops keep running for the next start ('make stop' stops them)."
wait "$server"

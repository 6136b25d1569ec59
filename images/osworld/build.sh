#!/bin/bash
# Builds the osworld guest image: ../linux-desktop/build.sh with this
# flavor (flavor.sh, guest/). Same variables and output layout, under
# $HVKUBE_CACHE_DIR/images/osworld/. See README.md.
set -euo pipefail
here=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
[[ $# -eq 0 ]] || { echo "usage: build.sh (as root)" >&2; exit 1; }
exec "$here/../linux-desktop/build.sh" osworld

"""Runs an OSWorld runner script with hvkube registered as a provider:

    python3 -m hvkube.osworld_run [--as NAME] RUNNER.py [ARG...]

``RUNNER.py`` (OSWorld's run.py, scripts/python/run_multienv.py, or your
own) runs unchanged, as ``python3 RUNNER.py ARG...`` would, from its own
directory's point of view (its directory first on sys.path), and every
``DesktopEnv(provider_name=NAME)`` it makes takes its desktop from hvkube:
NAME is ``hvkube`` unless ``--as`` (or HVKUBE_OSWORLD_PROVIDER) names
another, for runners that accept only OSWorld's own provider names
(``--as docker`` with ``--provider_name docker``). The pool is
``path_to_vm`` or HVKUBE_OSWORLD_POOL; the server and token are
HVKUBE_SERVER and HVKUBE_TOKEN.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import sys


def main(argv: list[str]) -> int:
    name = None
    if argv[:1] == ["--as"] and len(argv) > 1:
        name, argv = argv[1], argv[2:]
    elif argv and argv[0].startswith("--as="):
        name, argv = argv[0][len("--as="):], argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    script = os.path.abspath(argv[0])
    if not os.path.isfile(script):
        print(f"hvkube.osworld_run: {argv[0]}: no such file", file=sys.stderr)
        return 2
    # As python3 RUNNER.py would: its directory first on the path, and its
    # arguments.
    sys.path.insert(0, os.path.dirname(script))
    from .osworld import register
    try:
        register(name)
    except ImportError as e:
        print(f"hvkube.osworld_run: OSWorld's desktop_env cannot be imported ({e}): run from OSWorld's "
              "directory, or put it on PYTHONPATH", file=sys.stderr)
        return 2
    # The registration lives in this process and in the ones it forks:
    # a runner's worker processes (run_multienv.py's) are forked, not
    # spawned, so that they have it too.
    if "fork" in multiprocessing.get_all_start_methods():
        multiprocessing.set_start_method("fork", force=True)
    sys.argv = argv
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

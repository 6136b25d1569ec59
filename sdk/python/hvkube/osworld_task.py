"""Runs one OSWorld task on an hvkube sandbox with OSWorld's own code, and
says whether its evaluator passed it:

    python3 -m hvkube.osworld_task --osworld DIR [--sandbox NAME] [--steps FILE]
        [--cache DIR] [--pass SCORE] TASK.json

OSWorld's DesktopEnv (from DIR, a checkout of OSWorld with the modules its
evaluators import) sets the task up (its SetupController), runs the steps
of --steps (OSWorld actions: pyautogui code, or WAIT, DONE, FAIL; a JSON
list), then evaluates it with the task's own evaluator (postconfig,
getters, metrics): hvkube does not re-implement OSWorld's metrics. The
sandbox is NAME, else HVKUBE_SANDBOX: the one an Agent runs on, which is
what ``hvkube import osworld --evaluator osworld`` makes of a task (a
custom Agent whose host command is this), with the Agent's own token
(HVKUBE_SERVER, HVKUBE_TOKEN).

Prints ``{"task": ID, "score": S, "passed": BOOL}`` and exits 0 when the
score is at least --pass (default 1), 1 when it is not, 2 when the task
could not be set up or evaluated (the error on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m hvkube.osworld_task", description=__doc__.splitlines()[0])
    ap.add_argument("task", help="the OSWorld task file (evaluation_examples/examples/DOMAIN/ID.json)")
    ap.add_argument("--osworld", required=True, help="OSWorld's directory")
    ap.add_argument("--sandbox", default=os.environ.get("HVKUBE_SANDBOX"), help="the sandbox (HVKUBE_SANDBOX)")
    ap.add_argument("--steps", help="a JSON list of OSWorld actions that do the task")
    ap.add_argument("--cache", default=None, help="OSWorld's cache directory (default: DIR/cache)")
    ap.add_argument("--pass", dest="pass_score", type=float, default=1.0, help="the least score that passes")
    args = ap.parse_args(argv)
    if not args.sandbox:
        ap.error("--sandbox: name the sandbox (or run as an Agent, which sets HVKUBE_SANDBOX)")
    try:
        with open(args.task, encoding="utf-8") as f:
            task: dict[str, Any] = json.load(f)
        steps: list[Any] = ["DONE"]
        if args.steps:
            with open(args.steps, encoding="utf-8") as f:
                steps = json.load(f)
            if not isinstance(steps, list) or not all(isinstance(s, (str, dict)) for s in steps):
                ap.error("--steps: want a JSON list of OSWorld actions (strings, or computer_13 objects)")
    except (OSError, ValueError) as e:
        print(f"hvkube.osworld_task: {e}", file=sys.stderr)
        return 2

    osworld = os.path.abspath(args.osworld)
    cache = args.cache or os.path.join(osworld, "cache")
    if not args.cache and not os.access(osworld if not os.path.exists(cache) else cache, os.W_OK):
        # An Agent's host command may run as a user that cannot write
        # there: its own directory (HOME) then.
        cache = os.path.join(os.environ.get("HOME") or ".", "osworld-cache")
    cache = os.path.abspath(cache)
    sys.path.insert(0, osworld)
    # The token goes to the client, and out of the environment of what
    # OSWorld's code starts.
    from ._client import Client
    from .osworld import register
    client = Client()
    os.environ.pop("HVKUBE_TOKEN", None)
    os.chdir(osworld)  # OSWorld reads its settings relative to its directory
    try:
        register(client=client)
        from desktop_env.desktop_env import DesktopEnv
    except ImportError as e:
        print(f"hvkube.osworld_task: OSWorld cannot be imported from {osworld}: {e}", file=sys.stderr)
        return 2

    env = None
    # OSWorld prints as it goes: that goes to stderr, so that stdout is the
    # result alone (an Agent's output).
    out, sys.stdout = sys.stdout, sys.stderr
    try:
        env = DesktopEnv(provider_name="hvkube", path_to_vm=f"sandbox/{args.sandbox}", action_space="pyautogui",
                         cache_dir=cache, require_a11y_tree=False, headless=True)
        env.reset(task_config=task)
        for action in steps:
            _, _, done, _ = env.step(action, 1.0)
            if done:
                break
        score = float(env.evaluate())
    except Exception as e:  # noqa: BLE001 - a task that cannot run is exit 2 with why
        print(f"hvkube.osworld_task: task {task.get('id')}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    finally:
        if env is not None:
            env.close()
        sys.stdout = out
    passed = score >= args.pass_score
    print(json.dumps({"task": task.get("id"), "score": score, "passed": passed}))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

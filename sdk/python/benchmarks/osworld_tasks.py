"""OSWorld's own tasks on hvkube, with a scripted agent: does each task's
setup succeed, and does its evaluator run?

    python3 osworld_tasks.py --osworld OSWORLD_DIR --pool osworld [--envs 3]
        [--domains os,chrome,...] [--cache DIR] [--out results.jsonl]

OSWorld's code does the work, unchanged: its DesktopEnv (with hvkube's
provider, registered by hvkube.osworld.register), its SetupController and
its evaluators, and its per-task runner lib_run_single.run_single_example,
with an agent that answers DONE at once (no model): setup, OSWorld's 60 s
wait, one step, its 20 s wait, then the evaluator (postconfig, getters,
metrics). Every task of evaluation_examples/test_all.json runs but those
that need a Google account or VS Code (--all runs them too), in --envs
environments at a time (each a DesktopEnv of its own with a sandbox of
the pool).

Each task's outcome is a line of --out (JSON): whether setup succeeded,
whether the evaluator ran without an error (errors OSWorld only logs count,
as they make the score meaningless), the score, the error and its cause
(network, a missing host module, a timeout, …). The summary, per domain,
is printed at the end (and with --summary alone, of an --out file).

Files the tasks download (from huggingface.co) are taken from --cache
(OSWorld's cache directory, cache/TASK_ID/FILE) when they are there;
OSWorld downloads what is missing.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import multiprocessing
import os
import queue as queue_mod
import random
import re
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GOOGLE = {"googledrive", "login"}


class ScriptedAgent:
    """An agent that ends every task at once: no model."""

    action_space = "pyautogui"

    def reset(self, *args: Any, **kwargs: Any) -> None:
        pass

    def predict(self, instruction: str, obs: Any) -> tuple[str, list[str]]:
        return "", ["DONE"]


class TaskTimeout(BaseException):
    """A task past its time. Not an Exception: OSWorld's getters catch
    those and try again, which kept a task running for an hour."""


# Causes of a failure, by what its message says (first match wins).
CAUSES = [
    ("network: huggingface.co", r"huggingface\.co"),
    ("network: google", r"google(apis)?\.com|drive\.google|pydrive"),
    ("network: another site", r"Max retries exceeded|NameResolution|Failed to resolve|ConnectionError|net::ERR_|chrome-error://|Failed to download https?://"),
    ("no proxy list (proxy task)", r"[Pp]roxy"),
    ("a host module is missing", r"No module named|is not installed on this host|\(stub\)"),
    ("playwright", r"playwright|connect_over_cdp|BrowserType"),
    ("timeout", r"[Tt]imed? ?out|TaskTimeout"),
    ("file not in the guest", r"File not found|FileNotFoundError|No such file"),
]


def cause(text: str) -> str:
    for name, pat in CAUSES:
        if re.search(pat, text or ""):
            return name
    return "other"


class ErrorLog(logging.Handler):
    """Keeps the errors OSWorld logs (it logs some failures and goes on)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.records.append(record.getMessage()[:500])
        except Exception:
            pass


def run_task(env: Any, example: dict[str, Any], result_dir: str, timeout: int) -> dict[str, Any]:
    import lib_run_single

    out: dict[str, Any] = {"setup": None, "evaluator": None, "score": None}
    phase = ["setup"]
    reset, evaluate = env.reset, env.evaluate
    errors = ErrorLog()
    logging.getLogger().addHandler(errors)

    def timed_reset(*args: Any, **kwargs: Any) -> Any:
        errors.records.clear()
        try:
            obs = reset(*args, **kwargs)
        finally:  # a failed setup's logged errors often hold its cause
            out["setup_logged_errors"] = list(errors.records)
        out["setup"] = "ok"
        phase[0] = "run"
        return obs

    def timed_evaluate(*args: Any, **kwargs: Any) -> Any:
        phase[0] = "evaluator"
        errors.records.clear()
        score = evaluate(*args, **kwargs)
        out["score"] = score
        # A file the task's agent should have made and did not, or a
        # sheet it should have added (the scripted agent does nothing), is
        # the task failing, not the evaluator: OSWorld logs it and scores 0.
        absent = [r for r in errors.records if any(a in r for a in ABSENT)]
        if absent:
            out["evaluator_notes"] = absent
        logged = [r for r in errors.records if "recording" not in r.lower() and r not in absent]
        out["evaluator"] = "error" if logged else "ok"
        if logged:
            out["evaluator_error"] = logged[0]
            out["evaluator_logged_errors"] = logged
        return score

    def alarm(signum: int, frame: Any) -> None:
        signal.alarm(30)  # again, should a bare except swallow this one
        raise TaskTimeout(f"the task took over {timeout}s (in its {phase[0]})")

    env.reset, env.evaluate = timed_reset, timed_evaluate
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout)
    start = time.monotonic()
    try:
        args = argparse.Namespace(sleep_after_execution=0.0, result_dir=os.path.dirname(result_dir))
        lib_run_single.run_single_example(ScriptedAgent(), env, example, 1, example["instruction"], args, result_dir, [])
    except BaseException as e:  # noqa: BLE001 - every failure of a task is its record
        if isinstance(e, KeyboardInterrupt):
            raise
        msg = f"{type(e).__name__}: {e}"[:1000]
        if phase[0] == "setup":
            out["setup"], out["setup_error"] = "error", msg
        elif phase[0] == "evaluator":
            out["evaluator"], out["evaluator_error"] = "error", msg
        else:
            out["run_error"] = msg
        out["traceback"] = traceback.format_exc(limit=8)[-2000:]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        env.reset, env.evaluate = reset, evaluate
        logging.getLogger().removeHandler(errors)
    out["seconds"] = round(time.monotonic() - start, 1)
    if out.get("setup_error") or out.get("evaluator_error") or out.get("run_error"):
        out["cause"] = failure_cause(out)
    return out


# How a page of an outside site that never loaded looks to OSWorld's
# Chrome getters: a tab still loading has no URL, or the page load times out.
NO_PAGE = r"active_tab_url is not a string|Could not find target tab|Failed to get the url of active tab|Page\.goto: Timeout"

# Hosts whose files OSWorld's cache holds (downloads), not sites a task opens.
FILE_HOSTS = ("huggingface.co", "drive.google.com", "docs.google.com")


def outside_sites(example: dict[str, Any]) -> list[str]:
    """The outside web sites a task opens or checks (its setup's tabs, its
    getters' pages), not the files it downloads ({"url", "path"} pairs,
    which OSWorld's cache serves)."""
    hosts: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if not (k == "url" and "path" in v):
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, str):
            for m in re.finditer(r"https?://([A-Za-z0-9.-]+)", v):
                h = m.group(1).lower()
                if h != "localhost" and not h.startswith("127.") and not h.endswith(FILE_HOSTS):
                    hosts.add(h)

    walk([example.get("config"), example.get("evaluator")])
    return sorted(hosts)


def failure_cause(r: dict[str, Any]) -> str:
    """The cause of a task's failure: its error's, else that of the errors
    OSWorld logged (where it often is: a page Chrome could not load). A
    task that opens outside sites and fails for a page that never came
    (DevTools had no URL for the tab, a page load or the task timed out)
    failed for the network: the guest cannot reach those sites here."""
    err = r.get("setup_error") or r.get("evaluator_error") or r.get("run_error") or ""
    logged = "\n".join(r.get("setup_logged_errors", []) + r.get("evaluator_logged_errors", []))
    c = cause(err)
    if c == "other":
        c = cause(logged)
    if r.get("sites") and (c in ("playwright", "timeout") or re.search(NO_PAGE, err + "\n" + logged)):
        return "network: another site"
    return c


def die_with(parent: int) -> None:
    """Ends this process when its parent has gone (a killed run leaves no
    worker holding a sandbox)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(2)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def worker(n: int, args: argparse.Namespace, queue: Any, results: Any, parent: int) -> None:
    die_with(parent)
    os.chdir(args.osworld)
    sys.path.insert(0, args.osworld)
    logging.basicConfig(level=logging.WARNING, format=f"env{n} %(levelname)s %(name)s: %(message)s")
    from hvkube.osworld import register
    register()
    from desktop_env.desktop_env import DesktopEnv

    env = None
    while True:
        item = queue.get()
        if item is None:
            break
        domain, task_id = item
        path = Path(args.osworld, "evaluation_examples", "examples", domain, f"{task_id}.json")
        example = json.loads(path.read_text())
        result_dir = os.path.join(args.results, domain, task_id)
        os.makedirs(result_dir, exist_ok=True)
        rec: dict[str, Any] = {"domain": domain, "id": task_id, "env": n, "sites": outside_sites(example)}
        try:
            if env is None:
                env = DesktopEnv(provider_name="hvkube", path_to_vm=args.pool, action_space="pyautogui",
                                 cache_dir=args.cache, screen_size=(1920, 1080), headless=True,
                                 require_a11y_tree=False, os_type="Ubuntu")
            rec.update(run_task(env, example, result_dir, args.task_timeout))
        except Exception as e:  # the environment itself failed
            rec.update(setup="error", setup_error=f"environment: {type(e).__name__}: {e}"[:1000])
            rec["cause"] = failure_cause(rec)
            if env is not None:
                try:
                    env.close()
                except Exception:
                    pass
            env = None
        results.put(rec)
    if env is not None:
        env.close()


def tasks(osworld: str, domains: set[str] | None, everything: bool) -> list[tuple[str, str]]:
    meta = json.loads(Path(osworld, "evaluation_examples", "test_all.json").read_text())
    out = []
    for domain, ids in meta.items():
        if domains and domain not in domains:
            continue
        for task_id in ids:
            ex = json.loads(Path(osworld, "evaluation_examples", "examples", domain, f"{task_id}.json").read_text())
            if not everything and excluded(domain, ex):
                continue
            out.append((domain, task_id))
    return out


def excluded(domain: str, example: dict[str, Any]) -> bool:
    """A task that needs a Google account or VS Code (the issue's target
    leaves them out)."""
    if domain == "vs_code" or "vscode" in [a.lower() for a in example.get("related_apps", [])]:
        return True
    return any(c.get("type") in GOOGLE for c in example.get("config", []))


ABSENT = ("Failed to get file.", "Failed to load sheet for sheet_idx")


def normalized(r: dict[str, Any]) -> dict[str, Any]:
    """r, with the errors the scripted agent causes itself not counted as
    the evaluator's (a task's output file that nobody made: lines of runs
    before that was told apart)."""
    logged = r.get("evaluator_logged_errors") or []
    if r.get("evaluator") == "error" and logged and all(any(a in e for a in ABSENT) for e in logged):
        r = dict(r, evaluator="ok", evaluator_notes=logged)
        r.pop("evaluator_error", None)
        r.pop("cause", None)
    elif r.get("cause"):  # causes told apart since the line was written
        r = dict(r, cause=failure_cause(r))
    return r


def summary(lines: list[dict[str, Any]]) -> str:
    lines = [normalized(r) for r in lines]
    by: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in lines:
        by[r["domain"]].append(r)
    rows = ["| domain | tasks | setup succeeded | evaluator ran | evaluator errors | causes of failures |",
            "|---|---:|---:|---:|---:|---|"]
    total = collections.Counter()
    for domain in sorted(by):
        rs = by[domain]
        ok = sum(r.get("setup") == "ok" for r in rs)
        ran = sum(r.get("evaluator") == "ok" for r in rs)
        err = sum(r.get("evaluator") == "error" for r in rs)
        causes = collections.Counter(r["cause"] for r in rs if r.get("cause"))
        total.update(tasks=len(rs), ok=ok, ran=ran, err=err)
        rows.append(f"| {domain} | {len(rs)} | {ok} | {ran} | {err} | "
                    + ", ".join(f"{c} {k}" for k, c in causes.most_common()) + " |")
    t = total
    rows.append(f"| **all** | {t['tasks']} | {t['ok']} ({pct(t['ok'], t['tasks'])}) | {t['ran']} ({pct(t['ran'], t['tasks'])}) | {t['err']} | |")
    # The tasks that failed for nothing but a file or site this host
    # cannot reach say nothing of the desktop.
    rs = [r for r in lines if not (r.get("cause") or "").startswith("network")]
    ok = sum(r.get("setup") == "ok" for r in rs)
    ran = sum(r.get("evaluator") == "ok" for r in rs)
    rows.append(f"\nWithout the {t['tasks'] - len(rs)} failures from the network: setup succeeded "
                f"{ok} of {len(rs)} ({pct(ok, len(rs))}), the evaluator ran {ran} of {len(rs)} ({pct(ran, len(rs))}).")
    return "\n".join(rows)


def pct(a: int, b: int) -> str:
    return f"{100 * a / b:.0f} %" if b else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--osworld", help="OSWorld's directory (a checkout of its repository)")
    ap.add_argument("--pool", default=os.environ.get("HVKUBE_OSWORLD_POOL", "osworld"), help="the hvkube pool")
    ap.add_argument("--envs", type=int, default=1, help="environments at a time (sandboxes of the pool)")
    ap.add_argument("--domains", default="", help="comma-separated domains (default: all)")
    ap.add_argument("--cache", default="cache", help="OSWorld's cache directory (downloaded task files)")
    ap.add_argument("--results", default="results-hvkube", help="where OSWorld's runner writes each task's files")
    ap.add_argument("--out", default="osworld-tasks.jsonl", help="one JSON line per task (appended)")
    ap.add_argument("--task-timeout", type=int, default=1200, help="seconds a task may take at most")
    ap.add_argument("--all", action="store_true", help="also the tasks that need a Google account or VS Code")
    ap.add_argument("--resume", action="store_true", help="skip the tasks --out has a line of")
    ap.add_argument("--start", type=int, default=1,
                    help="begin at this task of the order (1 = the first): a run split over sittings or hosts")
    ap.add_argument("--summary", action="store_true", help="print the summary of --out and stop")
    args = ap.parse_args()
    if args.summary:
        lines = [json.loads(l) for l in Path(args.out).read_text().splitlines() if l.strip()]
        if args.osworld:  # the sites of tasks whose lines were written without them
            for r in lines:
                f = Path(args.osworld, "evaluation_examples", "examples", r["domain"], f"{r['id']}.json")
                if "sites" not in r and f.is_file():
                    r["sites"] = outside_sites(json.loads(f.read_text()))
        print(summary(lines))
        return 0
    if not args.osworld or not Path(args.osworld, "desktop_env").is_dir():
        ap.error("--osworld: name OSWorld's directory (it has desktop_env/)")
    args.osworld = os.path.abspath(args.osworld)
    args.cache = os.path.abspath(args.cache)
    args.results = os.path.abspath(args.results)
    todo = tasks(args.osworld, set(filter(None, args.domains.split(","))) or None, args.all)
    # Domains mixed (the same order every run): environments start
    # different applications at a time, not four browsers at once.
    random.Random(0).shuffle(todo)
    if not 1 <= args.start <= len(todo):
        ap.error(f"--start: a task of the order, 1 to {len(todo)}")
    todo = todo[args.start - 1:]
    if args.resume and Path(args.out).exists():
        done = {(r["domain"], r["id"]) for r in map(json.loads, Path(args.out).read_text().splitlines()) if r}
        todo = [t for t in todo if t not in done]
    print(f"{len(todo)} tasks, {args.envs} environments, pool {args.pool}", file=sys.stderr)
    ctx = multiprocessing.get_context("spawn")
    queue, results = ctx.Queue(), ctx.Queue()
    for t in todo:
        queue.put(t)
    procs = [ctx.Process(target=worker, args=(n, args, queue, results, os.getpid()), daemon=True)
             for n in range(args.envs)]
    for _ in procs:
        queue.put(None)
    for p in procs:
        p.start()
    lines: list[dict[str, Any]] = []
    with open(args.out, "a") as f:
        while len(lines) < len(todo):
            try:
                r = results.get(timeout=60)
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs):
                    print("every environment has ended: stopping", file=sys.stderr)
                    break
                continue
            i = len(lines)
            lines.append(r)
            f.write(json.dumps(r) + "\n")
            f.flush()
            print(f"[{i + 1}/{len(todo)}] {r['domain']}/{r['id'][:8]} setup={r.get('setup')} "
                  f"evaluator={r.get('evaluator')} score={r.get('score')} {r.get('seconds')}s {r.get('cause', '')}",
                  file=sys.stderr)
    for p in procs:
        p.join(60)
    print(summary(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

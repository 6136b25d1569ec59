"""Benchmarks of the OSWorld provider and the SDK, against a running server.

    python3 sdk/python/benchmarks/osworld_bench.py --pool NAME [--runs 20]

1. A task's environment reset through the provider, as OSWorld's
   DesktopEnv does it: ``revert_to_snapshot`` (the reset, and the guest
   API's first answer), then the first PythonController request through
   the forwarder that runs in the guest (``POST /screen_size``).
2. The SDK's overhead: ``screenshot()`` and ``left_click()`` through the SDK
   beside the same request sent with httpx directly.

Prints p50/p95/max of each, as a Markdown table. The pool needs one free
sandbox; the server and token come from HVKUBE_SERVER and HVKUBE_TOKEN (or
the server's data directory), as the SDK's client takes them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hvkube import Client, Sandbox  # noqa: E402
from hvkube.osworld import HvkubeProvider  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def row(name: str, xs: list[float]) -> str:
    return f"| {name} | {len(xs)} | {fmt(pct(xs, 50))} | {fmt(pct(xs, 95))} | {fmt(max(xs))} |"


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", required=True, help="the pool whose sandbox the provider takes")
    ap.add_argument("--runs", type=int, default=20, help="resets to time (the SDK calls run 5x this)")
    args = ap.parse_args()

    client = Client()
    provider = HvkubeProvider(client=client)
    path = "pool/" + args.pool
    rows = []
    try:
        t = time.perf_counter()
        provider.start_emulator(path)
        start = time.perf_counter() - t
        host, port = provider.get_ip_address(path).split(":")[:2]
        guest = httpx.Client(base_url=f"http://{host}:{port}", timeout=60)

        def screen_size() -> None:
            r = guest.post("/screen_size")
            r.raise_for_status()
            assert r.json()["width"] > 0

        screen_size()
        revert, revert_answer = [], []
        for _ in range(args.runs):
            t = time.perf_counter()
            provider.revert_to_snapshot(path, "init_state")
            revert.append(time.perf_counter() - t)
            screen_size()
            revert_answer.append(time.perf_counter() - t)
        rows.append(row("provider revert_to_snapshot (reset, guest API answers GET /screenshot)", revert))
        rows.append(row("revert_to_snapshot + first PythonController request in the guest (POST /screen_size)", revert_answer))

        name = provider.sandbox_name
        sb = Sandbox.connect(name, client=client)
        raw = httpx.Client(base_url=client.server, headers=client._headers, timeout=60)
        n = args.runs * 5
        sdk_shot = [timed(sb.screenshot) for _ in range(n)]
        raw_shot = [timed(lambda: raw.get(f"/api/v1/sandboxes/{name}/screen").raise_for_status()) for _ in range(n)]
        sdk_click = [timed(lambda: sb.left_click(640, 400)) for _ in range(n)]
        raw_click = [timed(lambda: raw.post(f"/api/v1/sandboxes/{name}/input",
                                            json={"action": "left_click", "coordinate": [640, 400]}).raise_for_status())
                     for _ in range(n)]
        rows += [row("SDK screenshot() (PNG)", sdk_shot), row("httpx GET …/screen (PNG)", raw_shot),
                 row("SDK left_click(640, 400)", sdk_click), row("httpx POST …/input left_click", raw_click)]
        over_shot = statistics.median(sdk_shot) - statistics.median(raw_shot)
        over_click = statistics.median(sdk_click) - statistics.median(raw_click)
    finally:
        provider.stop_emulator(path)
    print(f"provider start_emulator (a sandbox of the pool taken, guest API answering): {fmt(start)}")
    print()
    print("| operation | runs | p50 | p95 | max |")
    print("|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    print()
    print(f"SDK overhead at p50: screenshot {fmt(abs(over_shot))} {'more' if over_shot >= 0 else 'less'}, "
          f"left_click {fmt(abs(over_click))} {'more' if over_click >= 0 else 'less'} than httpx alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())

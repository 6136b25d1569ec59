"""Benchmarks of the OSWorld provider and the SDK, against a running server.

    python3 sdk/python/benchmarks/osworld_bench.py --pool NAME [--runs 20] [--gap 5] [--cold-boot]

1. A task's environment reset through the provider, as OSWorld's
   DesktopEnv does it: ``revert_to_snapshot`` (the reset, and the guest
   API's first answer), then the first screenshot through the forwarder
   (``GET /screenshot``, OSWorld's first observation), and the first
   PythonController request that runs in the guest (``POST /screen_size``).
   Resets come --gap seconds apart, as tasks' do.
   With ``--cold-boot``, beside it a cold boot of the pool's template to a
   ready desktop (a copy of the template, built anew), what OSWorld's own
   providers pay for every task.
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
    ap.add_argument("--cold-boot", action="store_true", help="also time a cold boot of the pool's template (built anew)")
    ap.add_argument("--gap", type=float, default=5.0,
                    help="seconds between resets, the task's time (OSWorld's tasks take minutes; "
                         "with 0 each reset comes at once and may wait for the clean-up of the one before)")
    args = ap.parse_args()

    client = Client()
    provider = HvkubeProvider(client=client)
    path = "pool/" + args.pool
    rows = []
    try:
        t = time.perf_counter()
        provider.start_emulator(path)
        start = time.perf_counter() - t
        # An address alone (127.0.0.N, the guest server at 5000), or
        # 127.0.0.1:SERVER:...
        addr = provider.get_ip_address(path).split(":")
        host, port = addr[0], (addr[1] if len(addr) > 1 else "5000")
        guest = httpx.Client(base_url=f"http://{host}:{port}", timeout=60)

        def screen_size() -> None:
            r = guest.post("/screen_size")
            r.raise_for_status()
            assert r.json()["width"] > 0

        def screenshot() -> None:
            r = guest.get("/screenshot")
            r.raise_for_status()
            assert r.content[:8] == b"\x89PNG\r\n\x1a\n"

        screen_size()
        revert, revert_shot, revert_answer = [], [], []
        for _ in range(args.runs):
            time.sleep(args.gap)
            t = time.perf_counter()
            provider.revert_to_snapshot(path, "init_state")
            revert.append(time.perf_counter() - t)
            screenshot()
            revert_shot.append(time.perf_counter() - t)
            screen_size()
            revert_answer.append(time.perf_counter() - t)
        rows.append(row("provider revert_to_snapshot (reset, guest API answers GET /screenshot)", revert))
        rows.append(row("revert_to_snapshot + first screenshot through the forwarder (GET /screenshot)", revert_shot))
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
    if args.cold_boot:
        boot, build = cold_boot(client, args.pool)
        rows.append(f"| cold boot of the same template to a ready desktop (built anew) | 1 | {fmt(boot)} | {fmt(boot)} | {fmt(boot)} |")
        print(f"the template's whole build (boot, snapshot, saved): {fmt(build)}")
    print(f"provider start_emulator (a sandbox of the pool taken, guest API answering): {fmt(start)}")
    print(f"resets {args.gap:g} s apart")
    print()
    print("| operation | runs | p50 | p95 | max |")
    print("|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    print()
    print(f"SDK overhead at p50: screenshot {fmt(abs(over_shot))} {'more' if over_shot >= 0 else 'less'}, "
          f"left_click {fmt(abs(over_click))} {'more' if over_click >= 0 else 'less'} than httpx alone")
    return 0


def cold_boot(client: Client, pool: str) -> tuple[float, float]:
    """Builds a copy of pool's template anew (a cold boot to a ready
    desktop, then its snapshot): the boot's seconds as the server measured
    it, and the whole build's; the copy is deleted after."""
    ref = client.get("sandboxpools", pool)["spec"]["template"]["spec"].get("templateRef")
    if not ref:
        raise RuntimeError(f"pool {pool} names no template (templateRef)")
    spec = client.get("templates", ref)["spec"]
    name = "bench-cold-" + str(int(time.time()))
    client.create("templates", {"apiVersion": "hvkube/v1", "kind": "Template", "metadata": {"name": name}, "spec": spec})
    t = time.perf_counter()
    try:
        while True:
            st = client.get("templates", name).get("status", {})
            if st.get("phase") == "Ready":
                return float(st["snapshot"]["bootSeconds"]), time.perf_counter() - t
            if st.get("phase") == "Failed" or time.perf_counter() - t > 1800:
                raise RuntimeError(f"template {name}: {st.get('phase')} {st.get('message')}")
            time.sleep(0.5)
    finally:
        client.delete("templates", name)


if __name__ == "__main__":
    sys.exit(main())

"""Taking a sandbox of a pool for a script: Sandbox.create(pool=...)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hvkube import AsyncClient, AsyncSandbox, NotFound, Sandbox


def lease_agents(client) -> list[dict]:
    return client.list("agents", label_selector="hvkube.io/lease")


def wait_gone(client, resource: str, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.get(resource, name)
        except NotFound:
            return
        time.sleep(0.1)
    pytest.fail(f"{resource}/{name} still there after {timeout}s")


def test_pool_sandbox_is_held_by_a_lease_until_released(pool, server):
    client, _, _ = server
    with Sandbox.create(pool="sdk", client=client, wait=120, minutes=5) as sb:
        assert sb.name.startswith("sdk-") and sb.phase == "Running"
        agent = client.get("agents", sb.lease)
        assert agent["metadata"]["labels"]["hvkube.io/lease"] == "mcp"
        assert agent["spec"]["type"] == "mcp-agent"
        assert agent["spec"]["completion"]["type"] == "mcp-done"
        assert agent["spec"]["completion"]["timeoutMinutes"] == 5
        assert agent["status"]["sandbox"] == sb.name
        assert client.get("sandboxes", sb.name)["status"]["currentAgent"] == sb.lease
        assert sb.commands.run("touch /tmp/leased").exit_code == 0
        # The one sandbox is taken: another lease waits, gives up, and
        # leaves no agent behind.
        before = {a["metadata"]["name"] for a in lease_agents(client)}
        with pytest.raises(TimeoutError) as e:
            Sandbox.create(pool="sdk", client=client, wait=1.5)
        assert "sdk" in str(e.value)
        # Deleting waits for the agent's run finalizer, which its node
        # takes off at once: the agent goes within moments.
        for extra in {a["metadata"]["name"] for a in lease_agents(client)} - before:
            wait_gone(client, "agents", extra, timeout=30)
        assert {a["metadata"]["name"] for a in lease_agents(client)} == before
        lease, name = sb.lease, sb.name
    assert sb.lease is None
    wait_gone(client, "agents", lease)
    # The pool resets it (releasePolicy reset) and it is free again.
    with Sandbox.create(pool="sdk", client=client, wait=180) as again:
        assert again.name == name and again.lease != lease
        assert again.commands.run("test -e /tmp/leased").exit_code == 1


def test_lease_arguments(server):
    client, _, _ = server
    with pytest.raises(ValueError, match="template or pool"):
        Sandbox.create("desk", pool="sdk", client=client)
    with pytest.raises(ValueError, match="labels"):
        Sandbox.create(pool="sdk", labels={"a": "b"}, client=client)
    with pytest.raises(ValueError, match="minutes"):
        Sandbox.create("desk", minutes=5, client=client)
    with pytest.raises(NotFound) as e:
        Sandbox.create(pool="no-such-pool", client=client, wait=5)
    assert "no-such-pool" in e.value.message


def test_async_lease(pool, server):
    _, url, token = server

    async def main():
        async with AsyncClient(url, token) as client:
            async with await AsyncSandbox.create(pool="sdk", client=client, wait=180) as sb:
                lease = sb.lease
                assert (await client.get("agents", lease))["status"]["phase"] == "Running"
                assert (await sb.commands.run(["true"])).exit_code == 0
            with pytest.raises(NotFound):
                for _ in range(600):
                    await client.get("agents", lease)
                    await asyncio.sleep(0.1)

    asyncio.run(main())


def test_heartbeat_arguments(server):
    client, _, _ = server
    with pytest.raises(ValueError, match="heartbeat"):
        Sandbox.create("desk", heartbeat=30, client=client)


def test_a_dead_holder_gives_its_sandbox_back(pool, server):
    """A process that holds a pool's sandbox with heartbeats and is killed
    (no release, no atexit) loses it once its heartbeats stop: the lease
    fails with HeartbeatLost and the pool has the sandbox again, long
    before the lease's minutes."""
    client, url, token = server
    script = (
        "import sys, time\n"
        "from hvkube import Client, Sandbox\n"
        "sb = Sandbox.create(pool='sdk', client=Client(sys.argv[1], sys.argv[2]), wait=180, minutes=600, heartbeat=10)\n"
        "print(sb.lease, sb.name, flush=True)\n"
        "time.sleep(3600)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-c", script, url, token], stdout=subprocess.PIPE, text=True, env=env)
    try:
        lease, name = proc.stdout.readline().split()
        # Alive: its heartbeats keep the lease past 10 s.
        time.sleep(15)
        agent = client.get("agents", lease)
        assert agent["status"]["phase"] == "Running", agent["status"]
        assert agent["spec"]["completion"]["heartbeatSeconds"] == 10
        assert agent["status"].get("heartbeatAt"), "no heartbeat was recorded"
    finally:
        proc.kill()
        proc.wait()
    killed = time.monotonic()
    deadline = killed + 60
    while True:
        try:
            st = client.get("agents", lease)["status"]
        except NotFound:
            break
        if st.get("phase") == "Failed":
            assert st.get("reason") == "HeartbeatLost", st
            break
        assert time.monotonic() < deadline, f"lease {lease} still {st.get('phase')} 60 s after its holder died"
        time.sleep(0.5)
    # The pool's sandbox is free for the next holder.
    with Sandbox.create(pool="sdk", client=client, wait=180) as again:
        assert again.name == name

"""The asynchronous client on a real desktop."""

from __future__ import annotations

import asyncio

import pytest

from hvkube import AsyncAgent, AsyncClient, AsyncPool, AsyncSandbox, Conflict, NotFound

from test_sandbox import png_size


def test_async_sandbox_drives_a_desktop(server, template):
    _, url, token = server

    async def main():
        async with AsyncClient(url, token) as client:
            async with await AsyncSandbox.create(template, client=client) as sb:
                w, h = await sb.screen_size()
                assert png_size(await sb.screenshot()) == (w, h)
                # Many calls at once on one connection pool.
                await asyncio.gather(*(sb.screenshot(width=320) for _ in range(4)))
                await sb.move_mouse(120, 130)
                assert await sb.cursor_position() == (120, 130)
                r = await sb.commands.run(["sh", "-c", "exit 7"])
                assert r.exit_code == 7
                await sb.set_clipboard("async")
                assert await sb.get_clipboard() == "async"
                await sb.pause()
                with pytest.raises(Conflict):
                    await sb.write("x")
                await sb.resume()
                name = sb.name
            with pytest.raises(NotFound):
                await AsyncSandbox.connect("no-such-sandbox", client=client)
            return name

    name = asyncio.run(main())
    assert name.startswith("sandbox-")


def test_async_agents_and_pools(pool, server, template):
    _, url, token = server

    async def main():
        async with AsyncClient(url, token) as client:
            p = AsyncPool(client, "sdk")
            await p.wait_ready(1, timeout=180)
            assert [s["metadata"]["labels"]["pool"] for s in await p.sandboxes()] == ["sdk"]
            a = await AsyncAgent.submit("sdk", client=client, steps=[
                {"action": "exec", "command": ["sh", "-c", "echo async > /tmp/async.txt"]},
            ], spec={"output": {"artifacts": ["/tmp/async.txt"]}})
            res = await a.wait(300)
            assert res["status"] == "completed" and res["success"], res
            assert await a.file("artifacts/async.txt") == b"async\n"
            await a.delete()
            # A pool of none, created, scaled and deleted: no desktop is made.
            empty = await AsyncPool.create("sdk-empty", template, replicas=0, client=client)
            await empty.scale(0)
            assert (await empty.info())["spec"]["replicas"] == 0
            await empty.wait_ready()
            await empty.delete()
            with pytest.raises(NotFound):
                for _ in range(300):
                    await empty.info()
                    await asyncio.sleep(0.1)

    asyncio.run(main())

"""The asynchronous client on a real desktop."""

from __future__ import annotations

import asyncio

import pytest

from hvkube import AsyncClient, AsyncSandbox, Conflict, NotFound

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

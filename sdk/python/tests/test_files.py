"""Guest files: sandbox.files.read and write."""

from __future__ import annotations

import asyncio

import pytest

from hvkube import AsyncClient, AsyncSandbox, HvkubeError, InvalidInput, NotFound

MiB = 1 << 20


def test_write_then_read_any_bytes(desk):
    data = bytes(range(256)) * 4096  # 1 MiB, every byte value
    assert desk.files.write("/tmp/sdk/deep/bin.dat", data) == {"path": "/tmp/sdk/deep/bin.dat", "size": len(data)}
    assert desk.files.read("/tmp/sdk/deep/bin.dat") == data
    desk.files.write("/tmp/sdk/text.txt", "héllo\n")  # a str goes as UTF-8
    assert desk.files.read("/tmp/sdk/text.txt") == "héllo\n".encode()
    desk.files.write("/tmp/sdk/empty", b"")
    assert desk.files.read("/tmp/sdk/empty") == b""
    # Outside the desktop user's home a file is root's.
    assert desk.commands.run(["stat", "-c", "%U", "/tmp/sdk/text.txt"]).stdout == "root\n"


def test_files_under_home_are_the_desktop_users(desk):
    desk.files.write("/home/agent/sdk-notes/today.txt", b"mine")
    r = desk.commands.run(["stat", "-c", "%U:%G", "/home/agent/sdk-notes", "/home/agent/sdk-notes/today.txt"])
    assert r.stdout.split() == ["agent:agent", "agent:agent"]
    assert desk.files.read("/home/agent/sdk-notes/today.txt") == b"mine"


def test_file_errors(desk):
    with pytest.raises(NotFound):
        desk.files.read("/tmp/sdk/no-such-file")
    for bad in ("tmp/relative", "/tmp/../etc/passwd", ""):
        with pytest.raises(InvalidInput) as e:
            desk.files.read(bad)
        assert e.value.field == "path"
    with pytest.raises(InvalidInput) as e:
        desk.files.write("relative.txt", b"x")
    assert e.value.field == "path"
    # 16 MiB at most.
    with pytest.raises(HvkubeError) as e:
        desk.files.write("/tmp/sdk/too-big", b"\0" * (16 * MiB + 1))
    assert e.value.status == 413
    assert desk.commands.run("test -e /tmp/sdk/too-big").exit_code == 1


def test_reading_a_file_over_16_mib_is_413(desk):
    assert desk.commands.run("head -c 17M /dev/zero > /tmp/sdk/big").exit_code == 0
    with pytest.raises(HvkubeError) as e:
        desk.files.read("/tmp/sdk/big")
    assert e.value.status == 413 and "too large" in e.value.message


def test_async_files(desk, server):
    _, url, token = server

    async def main():
        async with AsyncClient(url, token) as client:
            sb = await AsyncSandbox.connect(desk.name, client=client)
            await asyncio.gather(*(sb.files.write(f"/tmp/sdk/async-{i}", f"n{i}") for i in range(3)))
            got = await asyncio.gather(*(sb.files.read(f"/tmp/sdk/async-{i}") for i in range(3)))
            assert got == [b"n0", b"n1", b"n2"]

    asyncio.run(main())

"""The SDK over TLS: hvkube serve --tls-addr, checked by the authority
hvkube ca prints (ca_file, or HVKUBE_CA_FILE)."""

from __future__ import annotations

import httpx
import pytest

from hvkube import AsyncClient, Client


def test_tls_with_the_servers_authority(server, tls, monkeypatch):
    _, _, token = server
    url, ca = tls
    with Client(url, token, ca_file=ca) as c:
        assert isinstance(c.list("templates"), list)
    monkeypatch.setenv("HVKUBE_CA_FILE", ca)
    with Client(url, token) as c:
        assert isinstance(c.list("templates"), list)


def test_tls_refuses_an_unknown_authority(server, tls, monkeypatch):
    _, _, token = server
    url, _ = tls
    monkeypatch.delenv("HVKUBE_CA_FILE", raising=False)
    # The system's authorities do not know the server's.
    with Client(url, token) as c:
        with pytest.raises(httpx.ConnectError):
            c.list("templates")


async def _list(url: str, token: str, ca: str) -> list:
    async with AsyncClient(url, token, ca_file=ca) as c:
        return await c.list("templates")


def test_async_tls(server, tls):
    import asyncio

    _, _, token = server
    url, ca = tls
    assert isinstance(asyncio.run(_list(url, token, ca)), list)

"""The HTTP connection to an hvkube server."""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import httpx

from ._errors import raise_for

DEFAULT_SERVER = "http://127.0.0.1:8080"


def default_data_dir() -> Path:
    """The data directory hvkube serve uses by default (its token is there)."""
    if d := os.environ.get("HVKUBE_DATA_DIR"):
        return Path(d)
    if d := os.environ.get("XDG_DATA_HOME"):
        return Path(d) / "hvkube"
    return Path.home() / ".local" / "share" / "hvkube"


def default_token() -> str | None:
    """HVKUBE_TOKEN, else the token file of the default data directory."""
    if t := os.environ.get("HVKUBE_TOKEN"):
        return t
    try:
        return (default_data_dir() / "token").read_text().strip() or None
    except OSError:
        return None


def _connection(server: str | None, token: str | None) -> tuple[str, dict[str, str]]:
    """The server's URL and the headers of every request."""
    url = (server or os.environ.get("HVKUBE_SERVER") or DEFAULT_SERVER).rstrip("/")
    token = token if token is not None else default_token()
    return url, ({"Authorization": f"Bearer {token}"} if token else {})


def _verify(ca_file: str | None) -> ssl.SSLContext | bool:
    """How an https server's certificate is checked: against ``ca_file``
    (else HVKUBE_CA_FILE: the authority ``hvkube ca`` prints), else the
    system's authorities."""
    ca_file = ca_file or os.environ.get("HVKUBE_CA_FILE")
    return ssl.create_default_context(cafile=ca_file) if ca_file else True


class Client:
    """A connection to an hvkube server.

    ``server`` defaults to HVKUBE_SERVER (else http://127.0.0.1:8080) and
    ``token`` to HVKUBE_TOKEN (else the token ``hvkube serve`` keeps in its
    data directory). An https server's certificate is checked against
    ``ca_file`` (else HVKUBE_CA_FILE, else the system's authorities). Every
    call is bounded by ``timeout`` seconds unless it says otherwise.
    """

    def __init__(self, server: str | None = None, token: str | None = None, timeout: float = 60.0,
                 ca_file: str | None = None) -> None:
        self.server, self._headers = _connection(server, token)
        self._http = httpx.Client(base_url=self.server, headers=self._headers, timeout=timeout,
                                  verify=_verify(ca_file))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
                timeout: float | None = None, content: bytes | None = None,
                headers: dict[str, str] | None = None) -> httpx.Response:
        """Sends a request to the API (path under /api/v1) and raises the
        error it answers, if any. ``json`` is a JSON body; ``content`` raw
        bytes (say what they are in ``headers``)."""
        resp = self._http.request(method, "/api/v1/" + path.lstrip("/"),
                                  **_request_args(json, params, timeout, content, headers))
        raise_for(resp)
        return resp

    def get(self, resource: str, name: str) -> dict[str, Any]:
        """An object: ``get("sandboxes", "desk")``."""
        return self.request("GET", f"{resource}/{name}").json()

    def list(self, resource: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """The objects of a kind, optionally by label selector."""
        params = {"labelSelector": label_selector} if label_selector else None
        return self.request("GET", resource, params=params).json().get("items") or []

    def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", resource, json=obj).json()

    def delete(self, resource: str, name: str) -> None:
        self.request("DELETE", f"{resource}/{name}")


class AsyncClient:
    """Client's asynchronous twin (httpx.AsyncClient): the same server,
    token and timeout defaults; use it with ``async with``."""

    def __init__(self, server: str | None = None, token: str | None = None, timeout: float = 60.0,
                 ca_file: str | None = None) -> None:
        self.server, self._headers = _connection(server, token)
        self._http = httpx.AsyncClient(base_url=self.server, headers=self._headers, timeout=timeout,
                                       verify=_verify(ca_file))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
                      timeout: float | None = None, content: bytes | None = None,
                      headers: dict[str, str] | None = None) -> httpx.Response:
        """Client.request, awaited."""
        resp = await self._http.request(method, "/api/v1/" + path.lstrip("/"),
                                        **_request_args(json, params, timeout, content, headers))
        raise_for(resp)
        return resp

    async def get(self, resource: str, name: str) -> dict[str, Any]:
        return (await self.request("GET", f"{resource}/{name}")).json()

    async def list(self, resource: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        params = {"labelSelector": label_selector} if label_selector else None
        return (await self.request("GET", resource, params=params)).json().get("items") or []

    async def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        return (await self.request("POST", resource, json=obj)).json()

    async def delete(self, resource: str, name: str) -> None:
        await self.request("DELETE", f"{resource}/{name}")


def _request_args(json: Any, params: dict[str, Any] | None, timeout: float | None, content: bytes | None,
                  headers: dict[str, str] | None) -> dict[str, Any]:
    kw: dict[str, Any] = {"params": params}
    if json is not None:
        kw["json"] = json
    if content is not None:
        kw["content"] = content
    if headers:
        kw["headers"] = headers
    if timeout is not None:
        kw["timeout"] = timeout
    return kw

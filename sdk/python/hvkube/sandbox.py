"""Sandboxes: desktops to see and drive."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any, Callable

import httpx

from ._client import AsyncClient, Client
from ._errors import HvkubeError

RUNNING, PAUSED, SAVED, ERROR = "Running", "Paused", "Saved", "Error"


class Commands:
    """Commands in a sandbox's guest (``sandbox.commands``)."""

    def __init__(self, sandbox: _Ops) -> None:
        self._sb = sandbox

    def run(self, command: str | list[str], *, env: dict[str, str] | None = None, stdin: str = "",
            timeout: float = 60) -> Any:
        """Runs a command as root in the guest and waits for it (awaited on
        an AsyncSandbox). A string is run by ``sh -c``; a list is the
        program and its arguments, unparsed. Returns a CommandResult."""
        return self._sb._run(command, env, stdin, timeout)


class CommandResult:
    """What a command did: ``exit_code``, ``stdout``, ``stderr``."""

    def __init__(self, exit_code: int, stdout: str, stderr: str) -> None:
        self.exit_code, self.stdout, self.stderr = exit_code, stdout, stderr

    def __repr__(self) -> str:
        return f"CommandResult(exit_code={self.exit_code}, stdout={self.stdout!r}, stderr={self.stderr!r})"


class _Ops:
    """What a sandbox does, for Sandbox and AsyncSandbox alike: each
    operation is one request, made by the subclass's _do (at once, or as
    an awaitable) and shaped by parse."""

    name: str

    def _do(self, method: str, op: str, body: Any = None, *, params: dict[str, Any] | None = None,
            timeout: float | None = None, parse: Callable[[httpx.Response], Any] = lambda r: None) -> Any:
        raise NotImplementedError

    def _post(self, op: str, body: Any = None, *, timeout: float | None = None,
              parse: Callable[[httpx.Response], Any] = lambda r: None) -> Any:
        return self._do("POST", op, body if body is not None else {}, timeout=timeout, parse=parse)

    def info(self) -> Any:
        """The sandbox object as the server has it."""
        return self._do("GET", "", parse=lambda r: r.json())

    def screen_size(self) -> Any:
        """The screen's width and height in pixels."""
        return self._do("GET", "", parse=lambda r: _resolution(self.name, r.json()))

    def pause(self) -> Any:
        return self._post("pause")

    def resume(self) -> Any:
        return self._post("resume", timeout=120)

    def save(self) -> Any:
        return self._post("save", timeout=300)

    def reset(self) -> Any:
        """Back to the template's clean snapshot."""
        return self._post("reset", timeout=120)

    def kill(self) -> Any:
        """Deletes the sandbox and its VM."""
        return self._do("DELETE", "")

    def screenshot(self, *, format: str = "png", width: int | None = None, settle: bool = False) -> Any:
        """The screen as PNG (or JPEG) bytes; ``width`` scales it down."""
        params: dict[str, Any] = {"format": format}
        if width:
            params["width"] = width
        if settle:
            params["settle"] = "true"
        return self._do("GET", "screen", params=params, parse=lambda r: r.content)

    def action(self, action: dict[str, Any]) -> Any:
        """Sends one action, or a batch (``{"actions": [...]}``), in any
        vocabulary the API takes (Anthropic's, OpenAI's, Gemini's); returns
        the API's answer."""
        return self._post("input", action, parse=lambda r: r.json())

    def _act(self, action: dict[str, Any]) -> Any:
        return self._post("input", action)

    def left_click(self, x: int | None = None, y: int | None = None) -> Any:
        return self._act(_at({"action": "left_click"}, x, y))

    def right_click(self, x: int | None = None, y: int | None = None) -> Any:
        return self._act(_at({"action": "right_click"}, x, y))

    def double_click(self, x: int | None = None, y: int | None = None) -> Any:
        return self._act(_at({"action": "double_click"}, x, y))

    def move_mouse(self, x: int, y: int) -> Any:
        return self._act({"action": "mouse_move", "coordinate": [x, y]})

    def drag(self, start: tuple[int, int], end: tuple[int, int]) -> Any:
        return self._act({"action": "left_click_drag", "start_coordinate": list(start), "coordinate": list(end)})

    def scroll(self, x: int, y: int, direction: str = "down", amount: int = 3) -> Any:
        return self._act({"action": "scroll", "coordinate": [x, y], "scroll_direction": direction, "scroll_amount": amount})

    def write(self, text: str) -> Any:
        """Types text."""
        return self._act({"action": "type", "text": text})

    def press(self, keys: str) -> Any:
        """Presses a key or combination: ``"Return"``, ``"ctrl+s"``."""
        return self._act({"action": "key", "text": keys})

    def cursor_position(self) -> Any:
        """The pointer's ``(x, y)``."""
        return self._post("input", {"action": "cursor_position"}, parse=lambda r: tuple(int(v) for v in r.json()["coordinate"]))

    def get_clipboard(self) -> Any:
        return self._do("GET", "clipboard", parse=lambda r: r.json().get("text", ""))

    def set_clipboard(self, text: str) -> Any:
        return self._post("clipboard", {"text": text})

    def stream_url(self, ttl: int = 300) -> Any:
        """A page of the live view (with a view-only display token)."""
        return self._post("display/token", {"ttlSeconds": ttl}, parse=lambda r: r.json()["page"])

    def _run(self, command: str | list[str], env: dict[str, str] | None, stdin: str, timeout: float) -> Any:
        return self._post("exec", _exec_body(command, env, stdin, timeout), timeout=timeout + 30, parse=_command_result)


class Sandbox(_Ops):
    """A desktop sandbox on an hvkube server.

    Make one with :meth:`create` or reach one with :meth:`connect`; used in
    a ``with`` block, a sandbox this object created is deleted at its end.
    Coordinates are pixels of the sandbox's screen.
    """

    def __init__(self, client: Client, name: str, *, owned: bool = False) -> None:
        self.client, self.name, self._owned = client, name, owned
        self.commands = Commands(self)

    @classmethod
    def create(cls, template: str | None = None, *, name: str | None = None, client: Client | None = None,
               labels: dict[str, str] | None = None, wait: float = 300) -> "Sandbox":
        """Creates a sandbox cloned from ``template`` (the server's default
        when None) and waits up to ``wait`` seconds until it runs."""
        client = client or Client()
        out = client.create("sandboxes", _new_sandbox(template, name, labels))
        sb = cls(client, out["metadata"]["name"], owned=True)
        if wait:
            sb.wait_running(wait)
        return sb

    @classmethod
    def connect(cls, name: str, *, client: Client | None = None) -> "Sandbox":
        """An existing sandbox (404 raises NotFound)."""
        client = client or Client()
        client.get("sandboxes", name)
        return cls(client, name)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._owned:
            self.kill()

    def _do(self, method, op, body=None, *, params=None, timeout=None, parse=lambda r: None):
        return parse(self.client.request(method, _path(self.name, op), json=body, params=params, timeout=timeout))

    @property
    def phase(self) -> str:
        return self.info().get("status", {}).get("phase", "Pending")

    def wait_running(self, timeout: float = 300) -> None:
        """Waits until the sandbox runs; raises if it fails or time runs out."""
        deadline = time.monotonic() + timeout
        while not _running(self.name, self.info(), deadline, timeout):
            time.sleep(0.2)

    @property
    def clipboard(self) -> str:
        return self.get_clipboard()

    @clipboard.setter
    def clipboard(self, text: str) -> None:
        self.set_clipboard(text)


class AsyncSandbox(_Ops):
    """Sandbox for asyncio: the same methods, awaited, on an AsyncClient
    (``async with await AsyncSandbox.create(...) as sb``). The clipboard is
    ``await get_clipboard()`` and ``await set_clipboard(text)``."""

    def __init__(self, client: AsyncClient, name: str, *, owned: bool = False) -> None:
        self.client, self.name, self._owned = client, name, owned
        self.commands = Commands(self)

    @classmethod
    async def create(cls, template: str | None = None, *, name: str | None = None, client: AsyncClient | None = None,
                     labels: dict[str, str] | None = None, wait: float = 300) -> "AsyncSandbox":
        client = client or AsyncClient()
        out = await client.create("sandboxes", _new_sandbox(template, name, labels))
        sb = cls(client, out["metadata"]["name"], owned=True)
        if wait:
            await sb.wait_running(wait)
        return sb

    @classmethod
    async def connect(cls, name: str, *, client: AsyncClient | None = None) -> "AsyncSandbox":
        client = client or AsyncClient()
        await client.get("sandboxes", name)
        return cls(client, name)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._owned:
            await self.kill()

    async def _do(self, method, op, body=None, *, params=None, timeout=None, parse=lambda r: None):
        return parse(await self.client.request(method, _path(self.name, op), json=body, params=params, timeout=timeout))

    async def wait_running(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not _running(self.name, await self.info(), deadline, timeout):
            await asyncio.sleep(0.2)


def _path(name: str, op: str) -> str:
    return f"sandboxes/{name}/{op}" if op else f"sandboxes/{name}"


def _new_sandbox(template: str | None, name: str | None, labels: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name or "sandbox-" + secrets.token_hex(4)}
    if labels:
        meta["labels"] = labels
    spec: dict[str, Any] = {"templateRef": template} if template else {}
    return {"apiVersion": "hvkube/v1", "kind": "Sandbox", "metadata": meta, "spec": spec}


def _running(name: str, obj: dict[str, Any], deadline: float, timeout: float) -> bool:
    """Whether obj runs; raises if it failed or the deadline passed."""
    st = obj.get("status", {})
    if st.get("phase") == RUNNING:
        return True
    if st.get("phase") == ERROR:
        raise HvkubeError(409, f"sandbox {name}: {st.get('reason', '')}: {st.get('message', '')}")
    if time.monotonic() > deadline:
        raise TimeoutError(f"sandbox {name} not Running after {timeout}s: {st.get('phase')} {st.get('message', '')}")
    return False


def _resolution(name: str, obj: dict[str, Any]) -> tuple[int, int]:
    res = obj.get("status", {}).get("resolution", "")
    w, _, h = res.partition("x")
    if not (w.isdigit() and h.isdigit()):
        raise HvkubeError(409, f"sandbox {name} reports no resolution (is it running?)")
    return int(w), int(h)


def _exec_body(command: str | list[str], env: dict[str, str] | None, stdin: str, timeout: float) -> dict[str, Any]:
    argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
    if not argv:
        raise ValueError("command: empty")
    body: dict[str, Any] = {"command": argv[0], "args": argv[1:], "timeoutSeconds": max(1, int(timeout))}
    if env:
        body["env"] = [f"{k}={v}" for k, v in env.items()]
    if stdin:
        body["stdin"] = stdin
    return body


def _command_result(r: httpx.Response) -> "CommandResult":
    out = r.json()
    return CommandResult(out.get("exitCode", -1), out.get("stdout", ""), out.get("stderr", ""))


def _at(action: dict[str, Any], x: int | None, y: int | None) -> dict[str, Any]:
    if (x is None) != (y is None):
        raise ValueError("give both x and y, or neither")
    if x is not None:
        action["coordinate"] = [x, y]
    return action

"""Sandboxes: desktops to see and drive."""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import threading
import time
from typing import Any, Callable

import httpx

from ._client import AsyncClient, Client
from ._errors import HvkubeError, NotFound
from ._flow import Call, Flow, Sleep, arun, json_body, one, run

log = logging.getLogger("hvkube")

RUNNING, PAUSED, SAVED, ERROR = "Running", "Paused", "Saved", "Error"

# The label of the agents that hold a sandbox taken from a pool for a
# client (the MCP tool acquire_sandbox makes the same), and how long such
# an agent is kept once it has ended.
LEASE_LABEL = "hvkube.io/lease"
LEASE_TTL_SECONDS = 600
AGENT_ENDED = ("Completed", "Failed", "Cancelled")


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


class Files:
    """Files in a sandbox's guest (``sandbox.files``), at most 16 MiB each.
    Paths are absolute. Awaited on an AsyncSandbox."""

    def __init__(self, sandbox: _Ops) -> None:
        self._sb = sandbox

    def read(self, path: str) -> Any:
        """The file's bytes. A missing file raises NotFound, a relative
        path InvalidInput (``field`` "path"), one over 16 MiB HvkubeError
        with status 413."""
        return self._sb._do("GET", "files", params={"path": path}, timeout=120, parse=lambda r: r.content)

    def write(self, path: str, data: bytes | bytearray | memoryview | str) -> Any:
        """Writes data (a str as UTF-8) to the file, making its directories.
        Under the desktop user's home the file is that user's, elsewhere
        root's. Returns ``{"path", "size"}``."""
        body = data.encode() if isinstance(data, str) else bytes(data)
        return self._sb._do("PUT", "files", params={"path": path}, content=body,
                            headers={"Content-Type": "application/octet-stream"}, timeout=120, parse=json_body)


class CommandResult:
    """What a command did: ``exit_code``, ``stdout``, ``stderr``."""

    def __init__(self, exit_code: int, stdout: str, stderr: str) -> None:
        self.exit_code, self.stdout, self.stderr = exit_code, stdout, stderr

    def __repr__(self) -> str:
        return f"CommandResult(exit_code={self.exit_code}, stdout={self.stdout!r}, stderr={self.stderr!r})"


class _Ops:
    """What a sandbox does, for Sandbox and AsyncSandbox alike: each
    operation is a flow of requests (hvkube._flow), run by the subclass's
    _flow at once or as an awaitable."""

    name: str
    _owned: bool
    _lease: str | None

    def _flow(self, flow: Flow) -> Any:
        raise NotImplementedError

    def _do(self, method: str, op: str, body: Any = None, *, params: dict[str, Any] | None = None,
            timeout: float | None = None, content: bytes | None = None, headers: dict[str, str] | None = None,
            parse: Callable[[httpx.Response], Any] = lambda r: None) -> Any:
        return self._flow(one(Call(method, _path(self.name, op), body, params, timeout, content, headers, parse)))

    @property
    def lease(self) -> str | None:
        """The agent that holds this sandbox for you, when it was taken
        from a pool (``create(pool=...)``); None otherwise."""
        return self._lease

    def wait_running(self, timeout: float = 300) -> Any:
        """Waits until the sandbox runs; raises if it fails or time runs out."""
        return self._flow(_wait_running(self.name, timeout))

    def heartbeat(self) -> Any:
        """Tells the server that the holder of this pool's sandbox is alive
        (``create(pool=..., heartbeat=N)`` holds it only while heartbeats
        come; a Sandbox sends them itself). Returns the server's answer,
        whose ``deadline`` is when the lease ends without another."""
        if not self._lease:
            raise ValueError("heartbeat: only a sandbox taken from a pool (pool=...) is held by a lease")
        return self._flow(one(Call("POST", f"agents/{self._lease}/heartbeat", {}, parse=json_body)))

    def release(self) -> Any:
        """Gives back what this object took: a sandbox of a pool goes back
        to the pool (its lease agent is deleted, and the pool resets the
        sandbox by its releasePolicy); a sandbox it created is deleted; one
        it connected to is left alone. The end of a ``with`` block calls it."""
        return self._flow(self._release())

    def _release(self) -> Flow:
        self._stop_keepalive()
        if self._lease:
            try:
                yield Call("DELETE", f"agents/{self._lease}")
            except NotFound:
                pass  # it ended and is gone already
            self._lease = None
        elif self._owned:
            try:
                yield Call("DELETE", _path(self.name, ""))
            except NotFound:
                pass
            self._owned = False

    def _stop_keepalive(self) -> None:
        pass

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
        """Deletes the sandbox and its VM (a pool makes a new one for its
        own; give a pool's sandbox back with release instead)."""
        return self._flow(self._kill())

    def _kill(self) -> Flow:
        yield Call("DELETE", _path(self.name, ""))
        self._owned = False  # nothing left for release to delete

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

    def browser_tools(self, tool_use: Any) -> Any:
        """Runs Anthropic's browser toolset (``browser_toolset_20260801``)
        on the sandbox's browser: ``tool_use`` is a member's ``tool_use``
        block as the model sent it (a dict, or an object with
        ``model_dump``), or a list of a turn's; returns the ``tool_result``
        block(s) to send back, in the same order."""
        def plain(b: Any) -> Any:
            return b.model_dump() if hasattr(b, "model_dump") else b
        body = [plain(b) for b in tool_use] if isinstance(tool_use, list) else plain(tool_use)
        return self._post("browser", body, timeout=660, parse=lambda r: r.json())

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

    Make one with :meth:`create` (from a template, or taken from a pool)
    or reach one with :meth:`connect`; used in a ``with`` block, what this
    object took is given back at its end (:meth:`release`). Coordinates are
    pixels of the sandbox's screen.
    """

    def __init__(self, client: Client, name: str, *, owned: bool = False, lease: str | None = None) -> None:
        self.client, self.name, self._owned, self._lease = client, name, owned, lease
        self.commands = Commands(self)
        self.files = Files(self)
        self._keepalive: threading.Event | None = None

    @classmethod
    def create(cls, template: str | None = None, *, pool: str | None = None, name: str | None = None,
               client: Client | None = None, labels: dict[str, str] | None = None, wait: float = 300,
               minutes: int | None = None, heartbeat: int | None = None) -> "Sandbox":
        """A new sandbox cloned from ``template`` (the server's default
        when None), waited for up to ``wait`` seconds until it runs.

        With ``pool``, takes a free sandbox of that pool instead, as the MCP
        tool acquire_sandbox does: an mcp-agent holds it for you for
        ``minutes`` (default 30) or until :meth:`release`. If none is free
        and running within ``wait`` seconds, that agent is deleted again and
        TimeoutError raised. With ``heartbeat`` (seconds, 10 or more) the
        hold also ends that long after this process stops sending
        heartbeats: a thread of this object sends one every third of it
        until :meth:`release`, so a process that dies gives its sandbox back
        within ``heartbeat`` seconds."""
        client = client or Client()
        if pool is not None:
            _check_lease_args(template, name, labels, wait)
            sandbox, agent = run(client, _acquire(pool, wait, minutes, heartbeat))
            sb = cls(client, sandbox, lease=agent)
            if heartbeat:
                sb._start_keepalive(heartbeat)
            return sb
        _check_minutes(minutes)
        _check_heartbeat(heartbeat)
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
        self.release()

    def _flow(self, flow: Flow) -> Any:
        return run(self.client, flow)

    def _start_keepalive(self, seconds: int) -> None:
        stop = self._keepalive = threading.Event()

        def beat() -> None:
            while not stop.wait(seconds / 3):
                try:
                    self.heartbeat()
                except (HvkubeError, httpx.HTTPError) as e:
                    if isinstance(e, HvkubeError) and e.status in (404, 409):
                        return  # the lease ended: nothing to keep alive
                    log.warning("heartbeat of sandbox %s (lease %s): %s", self.name, self._lease, e)

        threading.Thread(target=beat, name=f"hvkube-heartbeat-{self.name}", daemon=True).start()

    def _stop_keepalive(self) -> None:
        if self._keepalive is not None:
            self._keepalive.set()
            self._keepalive = None

    @property
    def phase(self) -> str:
        return self.info().get("status", {}).get("phase", "Pending")

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

    def __init__(self, client: AsyncClient, name: str, *, owned: bool = False, lease: str | None = None) -> None:
        self.client, self.name, self._owned, self._lease = client, name, owned, lease
        self.commands = Commands(self)
        self.files = Files(self)
        self._keepalive: asyncio.Task[None] | None = None

    async def _beat(self, seconds: int) -> None:
        while True:
            await asyncio.sleep(seconds / 3)
            try:
                await self.heartbeat()
            except (HvkubeError, httpx.HTTPError) as e:
                if isinstance(e, HvkubeError) and e.status in (404, 409):
                    return
                log.warning("heartbeat of sandbox %s (lease %s): %s", self.name, self._lease, e)

    def _stop_keepalive(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None

    @classmethod
    async def create(cls, template: str | None = None, *, pool: str | None = None, name: str | None = None,
                     client: AsyncClient | None = None, labels: dict[str, str] | None = None, wait: float = 300,
                     minutes: int | None = None, heartbeat: int | None = None) -> "AsyncSandbox":
        """Sandbox.create, awaited. With ``heartbeat``, an asyncio task of
        this object sends the heartbeats until :meth:`release`."""
        client = client or AsyncClient()
        if pool is not None:
            _check_lease_args(template, name, labels, wait)
            sandbox, agent = await arun(client, _acquire(pool, wait, minutes, heartbeat))
            sb = cls(client, sandbox, lease=agent)
            if heartbeat:
                sb._keepalive = asyncio.get_running_loop().create_task(sb._beat(heartbeat))
            return sb
        _check_minutes(minutes)
        _check_heartbeat(heartbeat)
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
        await self.release()

    def _flow(self, flow: Flow) -> Any:
        return arun(self.client, flow)


def _path(name: str, op: str) -> str:
    return f"sandboxes/{name}/{op}" if op else f"sandboxes/{name}"


def _new_sandbox(template: str | None, name: str | None, labels: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name or "sandbox-" + secrets.token_hex(4)}
    if labels:
        meta["labels"] = labels
    spec: dict[str, Any] = {"templateRef": template} if template else {}
    return {"apiVersion": "hvkube/v1", "kind": "Sandbox", "metadata": meta, "spec": spec}


def _wait_running(name: str, timeout: float) -> Flow:
    deadline = time.monotonic() + timeout
    while not _running(name, (yield Call("GET", _path(name, ""), parse=json_body)), deadline, timeout):
        yield Sleep(0.2)


def _check_heartbeat(heartbeat: int | None) -> None:
    if heartbeat is not None:
        raise ValueError("heartbeat: only a sandbox taken from a pool (pool=...) is held by a lease")


def _check_minutes(minutes: int | None) -> None:
    if minutes is not None:
        raise ValueError("minutes: only a sandbox taken from a pool (pool=...) is held for a time")


def _check_lease_args(template: str | None, name: str | None, labels: dict[str, str] | None, wait: float) -> None:
    if template is not None:
        raise ValueError("give template or pool, not both: a pool's sandboxes are cloned from the pool's template")
    if name is not None or labels:
        raise ValueError("name and labels are for a new sandbox; a sandbox taken from a pool has the pool's")
    if not wait or wait <= 0:
        raise ValueError("wait: taking a sandbox from a pool needs a time to wait for one (seconds, > 0)")


def _lease_name() -> str:
    """mcp- and ten characters of base32, lower case, as acquire_sandbox names its agents."""
    return "mcp-" + base64.b32encode(secrets.token_bytes(10)).decode().lower()[:10]


def _acquire(pool: str, wait: float, minutes: int | None, heartbeat: int | None = None) -> Flow:
    """Takes a sandbox of pool: an mcp-agent (completion mcp-done, labelled
    as a lease) that selects the pool, waited for until it runs on a
    sandbox and that sandbox runs. Returns (sandbox, agent). Whatever ends
    the wait (time, an error, a cancellation) deletes the agent again."""
    yield Call("GET", f"sandboxpools/{pool}")  # a pool that is not there is a NotFound, not a wait
    name = _lease_name()
    completion: dict[str, Any] = {"type": "mcp-done"}
    if minutes is not None:
        completion["timeoutMinutes"] = minutes
    if heartbeat is not None:
        if heartbeat < 10:
            raise ValueError("heartbeat: at least 10 seconds")
        completion["heartbeatSeconds"] = heartbeat
    yield Call("POST", "agents", {
        "apiVersion": "hvkube/v1", "kind": "Agent", "metadata": {"name": name, "labels": {LEASE_LABEL: "mcp"}},
        "spec": {"type": "mcp-agent", "sandboxSelector": {"pool": pool}, "completion": completion,
                 "ttlSecondsAfterFinished": LEASE_TTL_SECONDS}})
    deadline = time.monotonic() + wait
    try:
        while True:
            st = (yield Call("GET", f"agents/{name}", parse=json_body)).get("status", {})
            if st.get("phase") == RUNNING and st.get("sandbox"):
                sandbox = st["sandbox"]
                break
            if st.get("phase") in AGENT_ENDED:
                raise HvkubeError(409, f"agent {name} ended ({st['phase']}) before it ran: {st.get('message', '')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no sandbox of pool {pool} was free within {wait}s (see `hvkube get pool {pool}`)")
            yield Sleep(0.2)
        # The node marks the agent Running, then resumes its sandbox; the
        # hold's heartbeats start now, while the sandbox resumes.
        beat = time.monotonic()
        while not _running(sandbox, (yield Call("GET", _path(sandbox, ""), parse=json_body)), deadline, wait):
            if heartbeat and time.monotonic() - beat >= heartbeat / 3:
                yield Call("POST", f"agents/{name}/heartbeat", {})
                beat = time.monotonic()
            yield Sleep(0.2)
    except BaseException as e:
        if isinstance(e, GeneratorExit):
            raise
        try:
            yield Call("DELETE", f"agents/{name}")
        except NotFound:
            pass
        raise
    return sandbox, name


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

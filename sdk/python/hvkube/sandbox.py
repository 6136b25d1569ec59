"""Sandboxes: desktops to see and drive."""

from __future__ import annotations

import secrets
import time
from typing import Any

from ._client import Client
from ._errors import HvkubeError

RUNNING, PAUSED, SAVED, ERROR = "Running", "Paused", "Saved", "Error"


class Commands:
    """Commands in a sandbox's guest (``sandbox.commands``)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def run(self, command: str | list[str], *, env: dict[str, str] | None = None, stdin: str = "",
            timeout: float = 60) -> "CommandResult":
        """Runs a command as root in the guest and waits for it. A string is
        run by ``sh -c``; a list is the program and its arguments, unparsed."""
        argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise ValueError("command: empty")
        body: dict[str, Any] = {"command": argv[0], "args": argv[1:], "timeoutSeconds": max(1, int(timeout))}
        if env:
            body["env"] = [f"{k}={v}" for k, v in env.items()]
        if stdin:
            body["stdin"] = stdin
        out = self._sb._post("exec", body, timeout=timeout + 30).json()
        return CommandResult(out.get("exitCode", -1), out.get("stdout", ""), out.get("stderr", ""))


class CommandResult:
    """What a command did: ``exit_code``, ``stdout``, ``stderr``."""

    def __init__(self, exit_code: int, stdout: str, stderr: str) -> None:
        self.exit_code, self.stdout, self.stderr = exit_code, stdout, stderr

    def __repr__(self) -> str:
        return f"CommandResult(exit_code={self.exit_code}, stdout={self.stdout!r}, stderr={self.stderr!r})"


class Sandbox:
    """A desktop sandbox on an hvkube server.

    Make one with :meth:`create` or reach one with :meth:`connect`; used in
    a ``with`` block, a sandbox this object created is deleted at its end.
    Coordinates are pixels of the sandbox's screen.
    """

    def __init__(self, client: Client, name: str, *, owned: bool = False) -> None:
        self.client, self.name, self._owned = client, name, owned
        self.commands = Commands(self)

    # ---- getting one ----

    @classmethod
    def create(cls, template: str | None = None, *, name: str | None = None, client: Client | None = None,
               labels: dict[str, str] | None = None, wait: float = 300) -> "Sandbox":
        """Creates a sandbox cloned from ``template`` (the server's default
        when None) and waits up to ``wait`` seconds until it runs."""
        client = client or Client()
        meta: dict[str, Any] = {"name": name or "sandbox-" + secrets.token_hex(4)}
        if labels:
            meta["labels"] = labels
        spec: dict[str, Any] = {"templateRef": template} if template else {}
        out = client.create("sandboxes", {"apiVersion": "hvkube/v1", "kind": "Sandbox", "metadata": meta, "spec": spec})
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

    # ---- state ----

    def info(self) -> dict[str, Any]:
        """The sandbox object as the server has it."""
        return self.client.get("sandboxes", self.name)

    @property
    def phase(self) -> str:
        return self.info().get("status", {}).get("phase", "Pending")

    def wait_running(self, timeout: float = 300) -> None:
        """Waits until the sandbox runs; raises if it fails or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.info().get("status", {})
            if st.get("phase") == RUNNING:
                return
            if st.get("phase") == ERROR:
                raise HvkubeError(409, f"sandbox {self.name}: {st.get('reason', '')}: {st.get('message', '')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"sandbox {self.name} not Running after {timeout}s: {st.get('phase')} {st.get('message', '')}")
            time.sleep(0.2)

    def pause(self) -> None:
        self._post("pause")

    def resume(self) -> None:
        self._post("resume", timeout=120)

    def save(self) -> None:
        self._post("save", timeout=300)

    def reset(self) -> None:
        """Back to the template's clean snapshot."""
        self._post("reset", timeout=120)

    def kill(self) -> None:
        """Deletes the sandbox and its VM."""
        self.client.delete("sandboxes", self.name)

    # ---- screen ----

    def screenshot(self, *, format: str = "png", width: int | None = None, settle: bool = False) -> bytes:
        """The screen as PNG (or JPEG) bytes; ``width`` scales it down."""
        params: dict[str, Any] = {"format": format}
        if width:
            params["width"] = width
        if settle:
            params["settle"] = "true"
        return self.client.request("GET", f"sandboxes/{self.name}/screen", params=params).content

    def screen_size(self) -> tuple[int, int]:
        """The screen's width and height in pixels."""
        res = self.info().get("status", {}).get("resolution", "")
        w, _, h = res.partition("x")
        if not (w.isdigit() and h.isdigit()):
            raise HvkubeError(409, f"sandbox {self.name} reports no resolution (is it running?)")
        return int(w), int(h)

    # ---- input ----

    def action(self, action: dict[str, Any]) -> dict[str, Any]:
        """Sends one action, or a batch (``{"actions": [...]}``), in any
        vocabulary the API takes (Anthropic's, OpenAI's, Gemini's)."""
        return self._post("input", action).json()

    def left_click(self, x: int | None = None, y: int | None = None) -> None:
        self.action(_at({"action": "left_click"}, x, y))

    def right_click(self, x: int | None = None, y: int | None = None) -> None:
        self.action(_at({"action": "right_click"}, x, y))

    def double_click(self, x: int | None = None, y: int | None = None) -> None:
        self.action(_at({"action": "double_click"}, x, y))

    def move_mouse(self, x: int, y: int) -> None:
        self.action({"action": "mouse_move", "coordinate": [x, y]})

    def drag(self, start: tuple[int, int], end: tuple[int, int]) -> None:
        self.action({"action": "left_click_drag", "start_coordinate": list(start), "coordinate": list(end)})

    def scroll(self, x: int, y: int, direction: str = "down", amount: int = 3) -> None:
        self.action({"action": "scroll", "coordinate": [x, y], "scroll_direction": direction, "scroll_amount": amount})

    def write(self, text: str) -> None:
        """Types text."""
        self.action({"action": "type", "text": text})

    def press(self, keys: str) -> None:
        """Presses a key or combination: ``"Return"``, ``"ctrl+s"``."""
        self.action({"action": "key", "text": keys})

    def cursor_position(self) -> tuple[int, int]:
        x, y = self.action({"action": "cursor_position"})["coordinate"]
        return int(x), int(y)

    # ---- clipboard, live view ----

    @property
    def clipboard(self) -> str:
        return self.client.request("GET", f"sandboxes/{self.name}/clipboard").json().get("text", "")

    @clipboard.setter
    def clipboard(self, text: str) -> None:
        self._post("clipboard", {"text": text})

    def stream_url(self, ttl: int = 300) -> str:
        """A page of the live view (with a view-only display token)."""
        return self._post("display/token", {"ttlSeconds": ttl}).json()["page"]

    def _post(self, op: str, body: dict[str, Any] | None = None, timeout: float | None = None):
        return self.client.request("POST", f"sandboxes/{self.name}/{op}", json=body if body is not None else {}, timeout=timeout)


def _at(action: dict[str, Any], x: int | None, y: int | None) -> dict[str, Any]:
    if (x is None) != (y is None):
        raise ValueError("give both x and y, or neither")
    if x is not None:
        action["coordinate"] = [x, y]
    return action

"""OSWorld on hvkube: a provider and a VM manager for OSWorld's DesktopEnv.

OSWorld (github.com/xlang-ai/OSWorld) runs its tasks through a provider
that starts a VM, reports the address of the VM's guest server, reverts it
to a snapshot and stops it. :class:`HvkubeProvider` does that with the
sandboxes of an hvkube pool, and :class:`HvkubeVMManager` names the pool.
:func:`register` makes ``DesktopEnv(provider_name="hvkube")`` use them
without a change to OSWorld's files (``python3 -m hvkube.osworld_run
RUNNER.py ARGS`` runs a runner that way); docs/osworld.md has the steps.

``path_to_vm`` is the name of an hvkube pool, ``NAME`` or ``pool/NAME``, or
``sandbox/NAME``: a sandbox that is there already (an Agent's own).
``start_emulator`` takes a sandbox of that pool (``Sandbox.create(pool=...)``),
``revert_to_snapshot`` resets it to its template's clean snapshot,
``save_state`` saves it to disk and runs it on, ``stop_emulator`` gives it
back to the pool.

The guest server's API (the one OSWorld's PythonController and
SetupController speak: ``/screenshot``, ``/execute``, ``/setup/...``) is served
by the hvkube server at ``/api/v1/sandboxes/NAME/osworld/...``, behind the
server's token, while OSWorld sends plain requests to ``http://IP:PORT/...``.
So ``get_ip_address`` starts forwarders in this process that add the token
and pass each request to that sandbox, on a loopback address of this
environment's own (127.0.0.N: Linux routes all of 127.0.0.0/8 to the
loopback device) at the ports OSWorld expects of a VM: the guest server at
5000, Chromium's DevTools at 9222 (HTTP and WebSocket) and VLC's web
interface at 8080 (with the caller's password passed on to VLC). It
answers that address alone, which every release of OSWorld reads: those
that build ``http://{vm_ip}:5000`` and those that take the ports after it.
Where no such address can be had (another system, or 253 environments on
the machine already), the forwarders listen on 127.0.0.1 at free ports and
the answer is ``127.0.0.1:SERVER:CHROMIUM:0:VLC``. There is no VNC port;
the sandbox's live view is ``Sandbox.stream_url()``.

The sandbox is held by a lease that lives as long as this process: a
thread sends a heartbeat every 15 s, and the server gives the sandbox back
to its pool 45 s after the last one (HVKUBE_OSWORLD_HEARTBEAT), so a runner
that is killed frees its desktop within a minute.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import socket
import ssl
import threading
import time
import weakref
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import unquote

import httpx

from ._client import Client
from ._errors import HvkubeError, NotFound
from .sandbox import RUNNING, Sandbox

log = logging.getLogger("hvkube.osworld")

POOL_ENV = "HVKUBE_OSWORLD_POOL"
MINUTES_ENV = "HVKUBE_OSWORLD_MINUTES"
HEARTBEAT_ENV = "HVKUBE_OSWORLD_HEARTBEAT"
DEFAULT_POOL = "osworld"
# How long a provider holds its sandbox at most unless it gives it back
# first (a benchmark run keeps one for all its tasks), and how long after
# its last heartbeat: the sandbox goes back to its pool when this process
# dies.
DEFAULT_MINUTES = 24 * 60
DEFAULT_HEARTBEAT = 45

# The ports OSWorld expects of a VM (DesktopEnv's defaults), which are
# also the guest's: the guest server, Chromium's DevTools, VLC's web
# interface.
SERVER_PORT, CDP_PORT, VLC_PORT = 5000, 9222, 8080

# Bounds of the forwarders: a request body, a request's head, a DevTools
# list rewritten, and how long one upstream call may take (OSWorld's open
# waits up to 1800 s for its window, and its client 1810 s).
MAX_BODY = 64 << 20
MAX_HEAD = 64 << 10
MAX_LIST = 1 << 20
UPSTREAM_TIMEOUT = 1830.0

_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
# Headers passed on: to the server (nothing of the caller's credentials or
# cookies), and back to the caller.
_REQUEST_HEADERS = ("content-type", "accept")
_RESPONSE_HEADERS = ("content-type", "content-length", "content-encoding", "content-disposition", "cache-control",
                     "last-modified", "etag", "content-security-policy")
_WS_HEADERS = ("upgrade", "connection", "sec-websocket-key", "sec-websocket-version", "sec-websocket-protocol",
               "sec-websocket-extensions")
_DEVTOOLS_LIST = re.compile(r"^/json(/version|/list|/new)?/?$")
# How a guest service's own credentials travel through the server's port
# forward (its Authorization is the server's token).
GUEST_AUTHORIZATION = "X-Guest-Authorization"


def sandbox_of(path_to_vm: str | None) -> str | None:
    """The sandbox a path_to_vm names as ``sandbox/NAME`` (a sandbox that
    is there already, used as it is: an Agent's own), else None."""
    p = (path_to_vm or "").strip()
    if not p.startswith("sandbox/"):
        return None
    name = p[len("sandbox/"):]
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 63:
        raise ValueError(f"path_to_vm {path_to_vm!r}: sandbox/NAME names a sandbox")
    return name


def pool_of(path_to_vm: str | None) -> str:
    """The pool a path_to_vm names: ``NAME`` or ``pool/NAME``; None or empty
    is HVKUBE_OSWORLD_POOL (default ``osworld``)."""
    p = (path_to_vm or "").strip() or default_pool()
    if p.startswith("pool/"):
        p = p[len("pool/"):]
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", p) or len(p) > 63:
        raise ValueError(f"path_to_vm {path_to_vm!r}: name an hvkube pool, NAME or pool/NAME")
    return p


def default_pool() -> str:
    return os.environ.get(POOL_ENV) or DEFAULT_POOL


PROVIDER_ENV = "HVKUBE_OSWORLD_PROVIDER"
_registering = threading.local()


def register(name: str | None = None, client: Client | None = None) -> None:
    """Makes OSWorld's ``DesktopEnv(provider_name=NAME)`` use hvkube, in
    this process, with no file of OSWorld changed: NAME is ``name``, else
    HVKUBE_OSWORLD_PROVIDER, else ``hvkube``. A runner whose command line
    offers only OSWorld's own provider names (run_multienv.py) can be
    given one of them, ``docker`` say: that name then means hvkube.

    OSWorld must be importable (``desktop_env``). Idempotent; the provider
    starts clean as OSWorld's docker and cloud providers do (a sandbox is
    taken reset, so the first task needs no revert). Providers use
    ``client`` when given (else HVKUBE_SERVER and HVKUBE_TOKEN when each is
    made). ``python3 -m hvkube.osworld_run RUNNER.py ARGS`` calls this,
    then runs the runner.
    """
    import desktop_env.desktop_env as de
    import desktop_env.providers as providers

    alias = (name or os.environ.get(PROVIDER_ENV) or "hvkube").lower().strip()
    if getattr(providers, "_hvkube_alias", None) is not None:
        providers._hvkube_alias, providers._hvkube_client = alias, client
        return
    create = providers.create_vm_manager_and_provider
    init = de.DesktopEnv.__init__

    def create_vm_manager_and_provider(provider_name: str, region: str, use_proxy: bool = False) -> Any:
        if getattr(_registering, "on", False) or provider_name.lower().strip() == providers._hvkube_alias:
            return HvkubeVMManager(), HvkubeProvider(region, client=providers._hvkube_client)
        return create(provider_name, region, use_proxy)

    def __init__(self: Any, provider_name: str = "vmware", *args: Any, **kwargs: Any) -> None:
        if provider_name.lower().strip() != providers._hvkube_alias:
            init(self, provider_name, *args, **kwargs)
            return
        # Among OSWorld's own names, the one of providers that start
        # clean; create_vm_manager_and_provider gives hvkube's meanwhile.
        _registering.on = True
        try:
            init(self, "docker", *args, **kwargs)
        finally:
            _registering.on = False

    providers._hvkube_alias, providers._hvkube_client = alias, client
    providers.create_vm_manager_and_provider = create_vm_manager_and_provider
    de.create_vm_manager_and_provider = create_vm_manager_and_provider
    de.DesktopEnv.__init__ = __init__


class HvkubeVMManager:
    """OSWorld's VMManager for hvkube: a pool is shared by every process
    that takes sandboxes from it, so there is no registry to keep; a
    DesktopEnv made without ``path_to_vm`` gets HVKUBE_OSWORLD_POOL."""

    checked_and_cleaned = True

    def __init__(self, registry_path: str = "", **kwargs: Any) -> None:
        pass

    def initialize_registry(self, **kwargs: Any) -> None:
        pass

    def add_vm(self, vm_path: str, region: str | None = None, **kwargs: Any) -> None:
        pass

    def delete_vm(self, vm_path: str, region: str | None = None, **kwargs: Any) -> None:
        pass

    def occupy_vm(self, vm_path: str, pid: int, region: str | None = None, **kwargs: Any) -> None:
        pass

    def check_and_clean(self, **kwargs: Any) -> None:
        pass

    def list_free_vms(self, region: str | None = None, **kwargs: Any) -> list[str]:
        return [default_pool()]

    def get_vm_path(self, os_type: str = "Ubuntu", region: str | None = None, screen_size: Any = None,
                    **kwargs: Any) -> str:
        return default_pool()


class HvkubeProvider:
    """OSWorld's Provider for hvkube: one sandbox of a pool at a time.

    ``region`` is OSWorld's and unused. The server and token are
    HVKUBE_SERVER and HVKUBE_TOKEN (or ``client``). ``wait`` bounds taking a
    sandbox and the guest server's answer after a start or a reset;
    ``minutes`` (default HVKUBE_OSWORLD_MINUTES, else a day) is how long the
    sandbox is held at most, ``heartbeat`` (default HVKUBE_OSWORLD_HEARTBEAT,
    else 45) how long after this process stops renewing the hold;
    ``wait_guest`` waits for the guest server (``GET /screenshot``) after a
    start or a reset.
    """

    def __init__(self, region: str | None = None, *, client: Client | None = None, wait: float = 300,
                 minutes: int | None = None, heartbeat: int | None = None, wait_guest: bool = True,
                 upstream_timeout: float = UPSTREAM_TIMEOUT, max_body: int = MAX_BODY) -> None:
        self.region = region
        self.client = client or Client()
        self.wait = wait
        self.minutes = minutes if minutes is not None else int(os.environ.get(MINUTES_ENV) or DEFAULT_MINUTES)
        self.heartbeat = heartbeat if heartbeat is not None else int(os.environ.get(HEARTBEAT_ENV) or DEFAULT_HEARTBEAT)
        self.address: str | None = None
        self.wait_guest = wait_guest
        self.upstream_timeout = upstream_timeout
        self.max_body = max_body
        self.sandbox: Sandbox | None = None
        self.pool: str | None = None
        self.forwarders: dict[str, Forwarder] = {}
        self._lock = threading.Lock()
        atexit.register(_stop_at_exit, weakref.ref(self))

    # OSWorld's Provider.

    def start_emulator(self, path_to_vm: str, headless: bool = True, os_type: str = "Ubuntu", *args: Any,
                       **kwargs: Any) -> None:
        """Takes a sandbox of the pool, unless this provider holds one of it
        already (DesktopEnv starts again after every revert); waits until
        its guest server answers. ``sandbox/NAME`` uses that sandbox as it
        is, without taking it from anyone (an Agent's own sandbox, with the
        Agent's token)."""
        if (name := sandbox_of(path_to_vm)) is not None:
            self._attach(name)
            return
        self._hold(pool_of(path_to_vm))

    def _attach(self, name: str) -> None:
        if self.sandbox is None or self.sandbox.name != name:
            self.sandbox, self.pool = Sandbox.connect(name, client=self.client), None
        self._wait_guest(self.sandbox, time.monotonic() + self.wait)

    def get_ip_address(self, path_to_vm: str, *args: Any, **kwargs: Any) -> str:
        """This environment's address, ``127.0.0.N``, where the guest server
        answers at 5000, DevTools at 9222 and VLC at 8080 (the forwarders,
        started on the first call); or ``127.0.0.1:SERVER:CHROMIUM:0:VLC``
        where no address of its own can be had."""
        if self.sandbox is None:
            raise RuntimeError("hvkube provider: no sandbox held: call start_emulator first")
        with self._lock:
            if not self.forwarders:
                self.address, self.forwarders = self._listen()
            return self.address or ""

    # What the forwarders pass to: the guest server, and guest ports.
    _TARGETS: tuple[tuple[str, int, str | None, bool], ...] = (
        ("server", SERVER_PORT, None, False),
        ("chromium", CDP_PORT, f"ports/{CDP_PORT}", True),
        ("vlc", VLC_PORT, f"ports/{VLC_PORT}", False),
    )

    def _listen(self) -> tuple[str, dict[str, "Forwarder"]]:
        """Starts the forwarders on a loopback address of their own at
        OSWorld's ports, or on 127.0.0.1 at free ports."""
        for n in range(2, 255):
            host = f"127.0.0.{n}"
            made: dict[str, Forwarder] = {}
            try:
                for name, port, _, _ in self._TARGETS:
                    made[name] = self._forwarder(name, host, port)
            except OSError:
                for f in made.values():
                    f.close()
                continue
            log.info("OSWorld's view of sandbox %s: %s (guest server :%d, DevTools :%d, VLC :%d)",
                     self.sandbox_name, host, SERVER_PORT, CDP_PORT, VLC_PORT)
            return host, made
        made = {name: self._forwarder(name, "127.0.0.1", 0) for name, _, _, _ in self._TARGETS}
        return f"127.0.0.1:{made['server'].port}:{made['chromium'].port}:0:{made['vlc'].port}", made

    def save_state(self, path_to_vm: str, snapshot_name: str | None = None, *args: Any, **kwargs: Any) -> None:
        """Saves the sandbox to disk (``POST …/save``) and runs it on. hvkube
        keeps one saved state per sandbox, not named snapshots:
        snapshot_name is not used."""
        sb = self._held(path_to_vm)
        sb.save()
        sb.resume()
        self._wait_guest(sb, time.monotonic() + self.wait)

    def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str | None = None, *args: Any,
                           **kwargs: Any) -> str:
        """Resets the sandbox to its template's clean snapshot (whatever
        snapshot_name says), waits until its guest server answers, and
        returns path_to_vm. A sandbox whose hold ended (its lease's
        minutes passed) is replaced by a fresh one of the pool."""
        if (name := sandbox_of(path_to_vm)) is not None:
            self._attach(name)
            sb = self.sandbox
            assert sb is not None
            sb.reset()
            sb.wait_running(self.wait)
            self._wait_guest(sb, time.monotonic() + self.wait)
            return path_to_vm
        pool = pool_of(path_to_vm)
        if not self._hold(pool, fresh_only=True):
            sb = self.sandbox
            assert sb is not None
            sb.reset()
            if sb.phase != RUNNING:
                sb.resume()
            deadline = time.monotonic() + self.wait
            sb.wait_running(self.wait)
            self._wait_guest(sb, deadline)
        return path_to_vm

    def stop_emulator(self, path_to_vm: str | None = None, region: str | None = None, *args: Any,
                      **kwargs: Any) -> None:
        """Stops the forwarders and gives the sandbox back to its pool."""
        with self._lock:
            forwarders, self.forwarders = self.forwarders, {}
        for f in forwarders.values():
            f.close()
        sb, self.sandbox, self.pool, self.address = self.sandbox, None, None, None
        if sb is not None:
            sb.release()

    # The sandbox.

    @property
    def sandbox_name(self) -> str | None:
        sb = self.sandbox
        return sb.name if sb is not None else None

    def _hold(self, pool: str, fresh_only: bool = False) -> bool:
        """Makes sure a live sandbox of pool is held; True when it took a
        new one (clean already), False when it kept the one it had."""
        if self.sandbox is not None and self.pool == pool and self._lease_alive(self.sandbox):
            if not fresh_only and self.sandbox.phase != RUNNING:
                self.sandbox.resume()
                self.sandbox.wait_running(self.wait)
            return False
        if self.sandbox is not None:
            old, self.sandbox, self.pool = self.sandbox, None, None
            try:
                old.release()
            except HvkubeError as e:
                log.warning("giving back sandbox %s: %s", old.name, e)
        deadline = time.monotonic() + self.wait
        sb = Sandbox.create(pool=pool, client=self.client, wait=self.wait, minutes=self.minutes,
                            heartbeat=self.heartbeat or None)
        self.sandbox, self.pool = sb, pool
        log.info("sandbox %s of pool %s taken (lease agent %s)", sb.name, pool, sb.lease)
        self._wait_guest(sb, deadline)
        return True

    def _held(self, path_to_vm: str) -> Sandbox:
        if (name := sandbox_of(path_to_vm)) is not None and self.sandbox is not None and self.sandbox.name == name:
            return self.sandbox
        if self.sandbox is None or self.pool != pool_of(path_to_vm):
            raise RuntimeError(f"hvkube provider: no sandbox of {path_to_vm!r} held: call start_emulator first")
        return self.sandbox

    def _lease_alive(self, sb: Sandbox) -> bool:
        try:
            st = self.client.get("agents", sb.lease or "").get("status", {})
        except NotFound:
            return False
        return st.get("phase") == RUNNING and st.get("sandbox") == sb.name

    def _wait_guest(self, sb: Sandbox, deadline: float) -> None:
        """Waits until the sandbox's guest server answers a screenshot."""
        if not self.wait_guest:
            return
        last = ""
        while True:
            try:
                self.client.request("GET", f"sandboxes/{sb.name}/osworld/screenshot", timeout=30)
                return
            except (HvkubeError, httpx.TransportError) as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise TimeoutError(f"sandbox {sb.name}: the guest server did not answer within {self.wait}s: {last}")
            time.sleep(0.5)

    def _forwarder(self, which: str, host: str, port: int) -> "Forwarder":
        _, _, guest, devtools = next(t for t in self._TARGETS if t[0] == which)

        def target() -> str | None:
            name = self.sandbox_name
            if not name:
                return None
            return f"/api/v1/sandboxes/{name}/" + (guest or "osworld")
        # A guest port's service may want its own credentials (VLC's
        # password): the caller's Authorization goes to it.
        return Forwarder(self.client, target, host=host, port=port, devtools=devtools,
                         guest_auth=guest is not None, timeout=self.upstream_timeout, max_body=self.max_body)

    def _stop_quietly(self) -> None:
        try:
            self.stop_emulator()
        except Exception as e:  # at exit: say it, go on
            log.warning("hvkube provider at exit: %s", e)


class Forwarder:
    """A local HTTP endpoint that passes requests on to one prefix of the
    hvkube API with the server's token added.

    It listens on a loopback address (``host``, 127.0.0.1 by default) and
    ``port`` (a free one when 0), so every program of this machine's users
    and every web page its browsers open can reach it; it takes only what
    OSWorld's own clients send:

    - ``Host`` must be ``HOST:PORT`` (or ``localhost:PORT`` on 127.0.0.1; a
      page whose name was pointed at the address sends its own name): 403
      otherwise;
    - a request with an ``Origin`` (any page's fetch or form post), or a
      ``Sec-Fetch-Site`` other than ``none`` (a page's image or script), is
      refused with 403;
    - the request target is a path: absolute URLs, ``*`` and CONNECT are
      refused (400, 405); a path with a ``.`` or ``..`` segment, a backslash
      or a control character, also percent-encoded, is refused (400); what
      is left is appended to the prefix, never anything else;
    - a body is at most ``max_body`` bytes with a Content-Length (413, 411
      for a chunked one); each upstream call is bounded by ``timeout``
      seconds (504), the request's head by 60 s.

    The answer streams back with its type and length. ``target()`` gives the
    prefix for each request (None: 503, nothing held). With ``devtools``,
    WebSocket upgrades are relayed too, and the DevTools target lists are
    rewritten to name this endpoint's WebSocket addresses. With
    ``guest_auth``, the caller's Authorization goes on to the guest's
    service (as X-Guest-Authorization: the server's own is the token).
    """

    def __init__(self, client: Client, target: Callable[[], str | None], *, host: str = "127.0.0.1", port: int = 0,
                 devtools: bool = False, guest_auth: bool = False, timeout: float = UPSTREAM_TIMEOUT,
                 max_body: int = MAX_BODY) -> None:
        self.target, self.devtools, self.max_body = target, devtools, max_body
        self.guest_auth = guest_auth
        self.upstream_url = httpx.URL(client.server)
        self._auth = dict(client._headers)
        self._timeout = timeout
        self._http = httpx.Client(base_url=client.server, headers=self._auth, follow_redirects=False,
                                  timeout=httpx.Timeout(timeout, connect=10))
        self.forwarded = 0  # requests sent on to the server
        self._count = threading.Lock()
        self._server = _Server((host, port), _Handler)
        self._server.forwarder = self
        self.host: str = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"hvkube-forwarder-{self.port}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._http.close()

    def _counted(self) -> None:
        with self._count:
            self.forwarded += 1

    def refusal(self, method: str, target: str, headers: Any) -> tuple[int, str] | None:
        """Why a request is refused (status, message), or None."""
        hosts = headers.get_all("Host") or []
        allowed = [f"{self.host}:{self.port}"] + ([f"localhost:{self.port}"] if self.host == "127.0.0.1" else [])
        if len(hosts) != 1 or hosts[0].strip().lower() not in allowed:
            return 403, "Host must be " + " or ".join(allowed)
        if headers.get_all("Origin"):
            return 403, "requests from web pages (with an Origin) are refused"
        if any(v.strip().lower() != "none" for v in headers.get_all("Sec-Fetch-Site") or []):
            return 403, "requests from web pages (Sec-Fetch-Site) are refused"
        if method not in _METHODS:
            return 405, f"method {method} is not forwarded"
        if not target.startswith("/") or target.startswith("//"):
            return 400, "the request target must be a path (absolute URLs are refused)"
        path, _, _ = target.partition("?")
        if "#" in target:
            return 400, "the request target has a fragment"
        plain = unquote(path)
        if any(c < " " or c == "\x7f" for c in plain) or "\\" in plain:
            return 400, "the path has a control character or a backslash"
        if any(seg in (".", "..") for seg in plain.split("/")):
            return 400, "the path has a . or .. segment"
        if headers.get_all("Transfer-Encoding"):
            return 411, "send the body with a Content-Length"
        lengths = headers.get_all("Content-Length") or []
        if len(lengths) > 1 or (lengths and not lengths[0].strip().isdigit()):
            return 400, "bad Content-Length"
        if lengths and int(lengths[0]) > self.max_body:
            return 413, f"the body is over {self.max_body} bytes"
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    forwarder: Forwarder


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "hvkube-forwarder"
    sys_version = ""
    timeout = 60  # for reading a request's head and body
    # HTTP/1.0: one request a connection, an answer's end is the
    # connection's, so an upstream answer of unknown length streams as is.
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("forwarder %s: " + format, self.server.forwarder.port, *args)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError, socket.timeout):
            self.close_connection = True

    def _any(self) -> None:
        fwd = self.server.forwarder
        # The target as it came (http.server makes //x into /x).
        words = self.requestline.split()
        self.path = words[1] if len(words) > 1 else ""
        refused = fwd.refusal(self.command, self.path, self.headers)
        if refused:
            self._fail(*refused)
            return
        prefix = fwd.target()
        if prefix is None:
            self._fail(503, "no sandbox is held (start_emulator)")
            return
        if "websocket" in (self.headers.get("Upgrade") or "").lower():
            if not fwd.devtools:
                self._fail(501, "WebSockets are relayed only to Chromium's DevTools")
                return
            self._websocket(prefix)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if length and (body is None or len(body) != length):
            self._fail(400, "the body ended early")
            return
        headers = {k: v for k in _REQUEST_HEADERS if (v := self.headers.get(k))}
        if fwd.guest_auth and (auth := self.headers.get("Authorization")):
            headers[GUEST_AUTHORIZATION] = auth
        url = prefix + self.path
        fwd._counted()
        try:
            resp = fwd._http.send(fwd._http.build_request(self.command, url, content=body, headers=headers),
                                  stream=True)
        except httpx.TimeoutException:
            self._fail(504, f"the hvkube server did not answer within {fwd._timeout}s")
            return
        except httpx.HTTPError as e:
            self._fail(502, f"the hvkube server: {e}")
            return
        try:
            self._answer(resp, prefix)
        finally:
            resp.close()

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_CONNECT = do_TRACE = _any

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request, a method it has
        no handler for) as JSON too."""
        self._fail(code, message or explain or "refused")

    def _answer(self, resp: httpx.Response, prefix: str) -> None:
        fwd = self.server.forwarder
        path = self.path.partition("?")[0]
        if fwd.devtools and _DEVTOOLS_LIST.match(path) and resp.status_code == 200:
            body = b"".join(_bounded(resp.iter_bytes(), MAX_LIST + 1))
            if len(body) <= MAX_LIST:
                body = _rewrite_devtools(body, fwd.upstream_url, prefix, fwd.host, fwd.port)
                self._send_head(resp.status_code, {"content-type": resp.headers.get("content-type", ""),
                                                   "content-length": str(len(body))})
                if self.command != "HEAD":
                    self.wfile.write(body)
                return
            self._fail(502, "a DevTools list over 1 MiB")
            return
        head = {k: v for k in _RESPONSE_HEADERS if (v := resp.headers.get(k)) is not None}
        self._send_head(resp.status_code, head)
        if self.command == "HEAD":
            return
        for chunk in resp.iter_raw():
            self.wfile.write(chunk)

    def _send_head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            if v:
                self.send_header(k, v)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Connection", "close")
        self.end_headers()

    def _fail(self, status: int, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.close_connection = True
        try:
            self._send_head(status, {"content-type": "application/json", "content-length": str(len(body))})
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            pass

    def _websocket(self, prefix: str) -> None:
        """Relays a WebSocket: the upgrade goes to the server with the
        token, and once it answers 101 bytes pass both ways until either
        side closes."""
        fwd = self.server.forwarder
        u = fwd.upstream_url
        port = u.port or (443 if u.scheme == "https" else 80)
        fwd._counted()
        try:
            up = socket.create_connection((u.host, port), timeout=10)
            if u.scheme == "https":
                up = ssl.create_default_context().wrap_socket(up, server_hostname=u.host)
            # The upgrade's answer comes once the guest's server has taken
            # it, which under emulation can take long: the upstream bound.
            up.settimeout(fwd._timeout)
        except OSError as e:
            self._fail(502, f"the hvkube server: {e}")
            return
        try:
            lines = [f"GET {prefix}{self.path} HTTP/1.1", f"Host: {u.netloc.decode()}"]
            lines += [f"{k}: {v}" for k, v in fwd._auth.items()]
            lines += [f"{k}: {v}" for k in _WS_HEADERS if (v := self.headers.get(k))]
            up.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = up.recv(4096)
                if not chunk or len(answer) > MAX_HEAD:
                    self._fail(502, "the hvkube server did not answer the upgrade")
                    return
                answer += chunk
            self.close_connection = True
            self.wfile.write(answer)
            if not answer.startswith((b"HTTP/1.1 101", b"HTTP/1.0 101")):
                return
            up.settimeout(None)
            self.connection.settimeout(None)
            back = threading.Thread(target=_pipe, args=(up.recv, self.connection.sendall, self.connection),
                                    daemon=True)
            back.start()
            _pipe(self.rfile.read1, up.sendall, up)
            back.join()
        except OSError:
            pass
        finally:
            up.close()


def _stop_at_exit(ref: "weakref.ref[HvkubeProvider]") -> None:
    if (provider := ref()) is not None:
        provider._stop_quietly()


def _pipe(read: Callable[[int], bytes], write: Callable[[bytes], Any], other: socket.socket) -> None:
    """Copies read to write until either ends, then shuts the other
    connection down, which ends the copy the other way."""
    try:
        while chunk := read(65536):
            write(chunk)
    except OSError:
        pass
    finally:
        try:
            other.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _bounded(chunks: Any, limit: int) -> Any:
    n = 0
    for c in chunks:
        n += len(c)
        yield c
        if n >= limit:
            return


def _rewrite_devtools(body: bytes, upstream: httpx.URL, prefix: str, host: str, port: int) -> bytes:
    """DevTools lists name the server's WebSocket addresses of the sandbox
    (the server rewrote the guest's): make them this forwarder's."""
    here = f"{host}:{port}".encode()
    there = upstream.netloc + prefix.encode()
    for scheme in (b"wss://", b"ws://"):
        body = body.replace(scheme + there, b"ws://" + here)
    return body.replace(there, here)  # devtoolsFrontendUrl's ws=HOST/PATH

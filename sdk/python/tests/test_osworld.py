"""The OSWorld provider on a real server: its sandbox, its forwarders, and
what the forwarders refuse."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hvkube import Client, NotFound
from hvkube.osworld import Forwarder, HvkubeProvider, HvkubeVMManager, pool_of

from test_sandbox import png_size

PATH = "pool/sdk"


@pytest.fixture(scope="module")
def provider(server, pool):
    client, _, _ = server
    p = HvkubeProvider(client=client, wait=180)
    p.start_emulator(PATH, True, "Ubuntu")
    yield p
    p.stop_emulator(PATH)


def ports(provider) -> dict[str, int]:
    """The forwarders' ports: OSWorld's, at the environment's own address."""
    ip = provider.get_ip_address(PATH)
    assert re.fullmatch(r"127\.0\.0\.(\d+)", ip) and ip != "127.0.0.1", ip
    return {"server": 5000, "chromium": 9222, "vlc": 8080}


def addr(provider) -> str:
    return provider.get_ip_address(PATH)


def forwarded(provider) -> int:
    return sum(f.forwarded for f in provider.forwarders.values())


def send(port: int, raw: bytes, ip: str = "127.0.0.1") -> tuple[int, bytes, bytes]:
    """Sends raw bytes as a request to ip:port; the answer's status, head
    and body."""
    with socket.create_connection((ip, port), timeout=60) as s:
        s.sendall(raw)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), head, body


def request(port: int, method: str, path: str, body: bytes = b"", ctype: str = "", host: str | None = None,
            extra: str = "", ip: str = "127.0.0.1") -> tuple[int, bytes, bytes]:
    """A request to ip:port as OSWorld's clients send one (Host IP:PORT, no
    Origin), or as told."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host or f'{ip}:{port}'}", "Connection: close"]
    if ctype:
        lines.append(f"Content-Type: {ctype}")
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    raw = ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode() + body
    return send(port, raw, ip)


_send, _request = send, request


def test_path_to_vm_names_a_pool(monkeypatch):
    assert pool_of("sdk") == pool_of("pool/sdk") == "sdk"
    monkeypatch.setenv("HVKUBE_OSWORLD_POOL", "bench")
    assert pool_of(None) == "bench"
    assert HvkubeVMManager().get_vm_path(os_type="Ubuntu", region=None, screen_size=(1280, 800)) == "bench"
    for bad in ("/vms/Ubuntu.vmx", "pool/", "Pool/X", "sandbox/desk"):
        with pytest.raises(ValueError):
            pool_of(bad)


def test_ip_address_is_the_environments_own(provider, server, pool):
    """An address alone, as every OSWorld release reads it; the guest
    server answers at its port 5000, as on a VM. A second environment (a
    second DesktopEnv, num_envs) gets another; its sandbox is held with
    heartbeats."""
    ip = addr(provider)
    assert addr(provider) == ip  # started once
    status, _, body = request(5000, "GET", "/platform", ip=ip)
    assert status == 200 and body == b"Linux"
    sb = provider.sandbox
    assert sb.name.startswith("sdk-") and sb.lease and sb.phase == "Running"
    client, _, _ = server
    assert client.get("agents", sb.lease)["spec"]["completion"]["heartbeatSeconds"] == 45
    pool.scale(2)
    pool.wait_ready(1)  # one idle beside the one this environment holds
    other = HvkubeProvider(client=client, wait=180)
    try:
        other.start_emulator(PATH, True, "Ubuntu")
        ip2 = other.get_ip_address(PATH)
        assert ip2 != ip and re.fullmatch(r"127\.0\.0\.\d+", ip2)
        assert other.sandbox.name != sb.name
        # Each address reaches its own sandbox.
        cmd = json.dumps({"command": ["cat", "/proc/sys/kernel/hostname"], "shell": False}).encode()
        names = {json.loads(request(5000, "POST", "/execute", cmd, "application/json", ip=a)[2])["output"].strip()
                 for a in (ip, ip2)}
        assert names == {sb.name, other.sandbox.name}, names
    finally:
        other.stop_emulator(PATH)
        pool.scale(1)


def test_forwarder_refuses_what_a_web_page_or_a_stranger_sends(provider):
    port = ports(provider)["server"]
    ip = addr(provider)
    sb = provider.sandbox
    touch = json.dumps({"command": ["touch", "/tmp/forwarded"], "shell": False}).encode()
    before = forwarded(provider)
    here = f"{ip}:{port}"

    def request(*args, **kw):
        return _request(*args, ip=ip, **kw)

    def send(port, raw):
        return _send(port, raw, ip)
    attacks = {
        "a foreign Host (DNS rebinding)": (request(port, "POST", "/execute", touch, "application/json", host=f"evil.example:{port}"), 403),
        "another port in Host": (request(port, "POST", "/execute", touch, "application/json", host=f"{ip}:1"), 403),
        "localhost in Host": (request(port, "POST", "/execute", touch, "application/json", host=f"localhost:{port}"), 403),
        "another address in Host": (request(port, "POST", "/execute", touch, "application/json", host=f"127.0.0.1:{port}"), 403),
        "no Host": (send(port, b"GET /screenshot HTTP/1.0\r\n\r\n"), 403),
        "two Hosts": (request(port, "GET", "/screenshot", extra=f"Host: {here}\r\n"), 403),
        "an Origin": (request(port, "POST", "/execute", touch, "application/json", extra="Origin: http://evil.example\r\n"), 403),
        "Origin null": (request(port, "POST", "/execute", touch, "text/plain", extra="Origin: null\r\n"), 403),
        "a page's image": (request(port, "GET", "/screenshot", extra="Sec-Fetch-Site: cross-site\r\n"), 403),
        "a .. path": (request(port, "GET", "/../../screen"), 400),
        "an encoded .. path": (request(port, "GET", "/%2e%2E/%2e%2e/screen"), 400),
        "an encoded slash and ..": (request(port, "GET", "/x%2f..%2f..%2fscreen"), 400),
        "a backslash": (request(port, "GET", "/..\\..\\screen"), 400),
        "an absolute URL": (request(port, "GET", f"http://{here}/screenshot"), 400),
        "an absolute URL elsewhere": (request(port, "GET", "http://evil.example/x"), 400),
        "a scheme-relative path": (request(port, "GET", "//evil.example/x"), 400),
        "CONNECT": (request(port, "CONNECT", "evil.example:443"), 405),
        "a body over 64 MiB": (send(port, f"POST /execute HTTP/1.1\r\nHost: {here}\r\nContent-Type: application/json\r\n"
                                           f"Content-Length: {64 * 2**20 + 1}\r\n\r\n".encode() + touch), 413),
        "a chunked body": (send(port, f"POST /execute HTTP/1.1\r\nHost: {here}\r\nContent-Type: application/json\r\n"
                                      f"Transfer-Encoding: chunked\r\n\r\n{len(touch):x}\r\n".encode() + touch + b"\r\n0\r\n\r\n"), 411),
        "a WebSocket to the guest server": (request(port, "GET", "/x", extra="Upgrade: websocket\r\nConnection: Upgrade\r\n"), 501),
    }
    for what, ((status, _, body), want) in attacks.items():
        assert status == want, f"{what}: {status} {body!r}"
        assert "error" in json.loads(body), what
    assert forwarded(provider) == before, "a refused request was forwarded"
    assert sb.commands.run("test -e /tmp/forwarded").exit_code == 1
    # The same request as OSWorld sends it goes through; the command runs
    # in the user's home.
    status, _, body = request(port, "POST", "/execute", touch, "application/json")
    assert status == 200, body
    assert forwarded(provider) == before + 1
    assert sb.commands.run("test -e /tmp/forwarded").exit_code == 0


def test_forwarder_reaches_its_sandbox_only(provider):
    p = ports(provider)
    ip = addr(provider)

    def request(*args, **kw):
        return _request(*args, ip=ip, **kw)
    sb = provider.sandbox
    before = forwarded(provider)
    status, head, body = request(p["server"], "GET", "/screenshot")
    assert status == 200 and b"image/png" in head.lower()
    assert png_size(body) == sb.screen_size()
    # Another API route is a path under the sandbox's OSWorld prefix.
    status, _, body = request(p["server"], "GET", "/api/v1/sandboxes")
    assert status == 404 and b"items" not in body
    # Chromium's DevTools port: this desktop runs no Chromium, and the
    # server's answer (nothing listens on the guest port) comes back.
    status, _, body = request(p["chromium"], "GET", "/json/version")
    assert status == 502, body
    assert forwarded(provider) == before + 3


def test_python_controller_requests(provider):
    """What OSWorld's PythonController sends, through the forwarder."""
    port = ports(provider)["server"]
    ip = addr(provider)

    def request(*args, **kw):
        return _request(*args, ip=ip, **kw)
    w, h = provider.sandbox.screen_size()
    status, _, body = request(port, "GET", "/screenshot")
    assert status == 200 and png_size(body) == (w, h)
    cmd = json.dumps({"command": ["python", "-c", "print(1)"], "shell": False}).encode()
    status, _, body = request(port, "POST", "/execute", cmd, "application/json")
    assert status == 200, body
    out = json.loads(body)
    assert out["status"] == "success" and out["output"] == "1\n", out
    status, _, body = request(port, "POST", "/screen_size")
    assert status == 200 and json.loads(body) == {"width": w, "height": h}
    # Forms, as requests sends them: an upload and a download.
    boundary = "hvkube-test-boundary"
    form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file_path\"\r\n\r\n/tmp/up.txt\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file_data\"; filename=\"up.txt\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\nuploaded\r\n--{boundary}--\r\n").encode()
    status, _, body = request(port, "POST", "/setup/upload", form, f"multipart/form-data; boundary={boundary}")
    assert status == 200, body
    status, _, body = request(port, "POST", "/file", b"file_path=%2Ftmp%2Fup.txt", "application/x-www-form-urlencoded")
    assert status == 200 and body == b"uploaded"
    # A relative path is in the user's home, as on OSWorld's VM, and so is
    # a command's working directory.
    form = form.replace(b"/tmp/up.txt", b"setup.sh")
    status, _, body = request(port, "POST", "/setup/upload", form, f"multipart/form-data; boundary={boundary}")
    assert status == 200, body
    cmd = json.dumps({"command": "pwd; cat setup.sh", "shell": True}).encode()
    status, _, body = request(port, "POST", "/execute", cmd, "application/json")
    assert status == 200 and json.loads(body)["output"] == "/home/agent\nuploaded", body


def test_revert_save_and_stop(provider, server):
    client, _, _ = server
    sb, lease = provider.sandbox, provider.sandbox.lease
    p = ports(provider)
    ip = addr(provider)

    def request(*args, **kw):
        return _request(*args, ip=ip, **kw)
    assert sb.commands.run("touch /tmp/dirty").exit_code == 0
    assert provider.revert_to_snapshot(PATH, "init_state") == PATH
    assert provider.sandbox is sb and sb.lease == lease  # the same sandbox, clean again
    assert sb.commands.run("test -e /tmp/dirty").exit_code == 1
    assert request(p["server"], "GET", "/screenshot")[0] == 200
    provider.save_state(PATH, "snap")
    assert sb.phase == "Running"
    assert request(p["server"], "GET", "/screenshot")[0] == 200
    # DesktopEnv starts again after a revert: the same sandbox.
    provider.start_emulator(PATH, True, "Ubuntu")
    assert provider.sandbox is sb and addr(provider) == ip
    provider.stop_emulator(PATH)
    assert provider.sandbox is None
    with pytest.raises(NotFound):
        for _ in range(600):
            client.get("agents", lease)
    with pytest.raises(OSError):
        socket.create_connection((ip, p["server"]), timeout=5).close()
    provider.stop_emulator(PATH)  # again: nothing to do
    with pytest.raises(RuntimeError):
        provider.get_ip_address(PATH)


class _FakeServer(BaseHTTPRequestHandler):
    """A stand-in for the server's port forward to Chromium's DevTools:
    a target list naming its own WebSocket address, and a WebSocket that
    echoes bytes."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str]] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        type(self).seen.append((self.path, self.headers.get("Authorization", "")))
        prefix = "/api/v1/sandboxes/desk/ports/9222"
        if self.headers.get("Authorization") != "Bearer secret" or not self.path.startswith(prefix + "/"):
            self.send_error(401)
            return
        if self.path == prefix + "/json/version":
            ws = f"ws://{self.headers['Host']}{prefix}/devtools/browser/b1"
            body = json.dumps({"Browser": "Fake/1", "webSocketDebuggerUrl": ws}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.endswith("/requests/status.xml"):
            body = (self.headers.get("X-Guest-Authorization") or "none").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == prefix + "/slow":
            time.sleep(2)
            self.send_error(500)
            return
        if self.headers.get("Upgrade") == "websocket":
            if self.path.endswith("/slow"):
                time.sleep(12)  # a guest that takes its time to answer
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.flush()
            while data := self.connection.recv(65536):
                self.connection.sendall(data)
            self.close_connection = True
            return
        self.send_error(404)


def upgrade(s: socket.socket, port: int, path: str) -> bytes:
    """Sends a WebSocket upgrade for path on s; the answer's head."""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
              "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
              "Sec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    return head


def test_devtools_forwarder_relays_websockets():
    """The WebSocket relay and the target-list rewrite, against a local
    stand-in for the server (no desktop here runs Chromium)."""
    fake = ThreadingHTTPServer(("127.0.0.1", 0), _FakeServer)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    client = Client(f"http://127.0.0.1:{fake.server_address[1]}", "secret")
    fwd = Forwarder(client, lambda: "/api/v1/sandboxes/desk/ports/9222", devtools=True)
    try:
        status, _, body = request(fwd.port, "GET", "/json/version")
        assert status == 200
        assert json.loads(body)["webSocketDebuggerUrl"] == f"ws://127.0.0.1:{fwd.port}/devtools/browser/b1"
        with socket.create_connection(("127.0.0.1", fwd.port), timeout=10) as s:
            head = upgrade(s, fwd.port, "/devtools/browser/b1")
            assert head.startswith(b"HTTP/1.1 101")
            s.sendall(b"\x81\x04ping")
            assert s.recv(6) == b"\x81\x04ping"
        # An upgrade the guest answers late (past the connection's own 10 s)
        # still goes through.
        with socket.create_connection(("127.0.0.1", fwd.port), timeout=30) as s:
            head = upgrade(s, fwd.port, "/devtools/browser/slow")
            assert head.startswith(b"HTTP/1.1 101"), head
        # A WebSocket from a page is refused like any request from one.
        status, _, _ = request(fwd.port, "GET", "/devtools/browser/b1",
                               extra="Upgrade: websocket\r\nConnection: Upgrade\r\nOrigin: http://evil.example\r\n")
        assert status == 403
        assert [p for p, _ in _FakeServer.seen] == ["/api/v1/sandboxes/desk/ports/9222/json/version",
                                                    "/api/v1/sandboxes/desk/ports/9222/devtools/browser/b1",
                                                    "/api/v1/sandboxes/desk/ports/9222/devtools/browser/slow"]
        assert {a for _, a in _FakeServer.seen} == {"Bearer secret"}
    finally:
        fwd.close()
        client.close()
        fake.shutdown()
        fake.server_close()


def test_forwarder_bounds_upstream_calls():
    """An upstream call that takes too long is a 504; with no sandbox held
    there is nothing to forward to (503). Against a local stand-in."""
    fake = ThreadingHTTPServer(("127.0.0.1", 0), _FakeServer)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    client = Client(f"http://127.0.0.1:{fake.server_address[1]}", "secret")
    target = ["/api/v1/sandboxes/desk/ports/9222"]
    fwd = Forwarder(client, lambda: target[0], timeout=0.5)
    try:
        status, _, body = request(fwd.port, "GET", "/slow")
        assert status == 504, body
        target[0] = None
        status, _, body = request(fwd.port, "GET", "/json/version")
        assert status == 503 and fwd.forwarded == 1, body
    finally:
        fwd.close()
        client.close()
        fake.shutdown()
        fake.server_close()


def test_provider_without_a_sandbox(server):
    client, _, _ = server
    p = HvkubeProvider(client=client)
    with pytest.raises(RuntimeError):
        p.get_ip_address(PATH)
    with pytest.raises(NotFound):
        p.start_emulator("pool/no-such-pool", True, "Ubuntu")
    assert p.sandbox is None
    p.stop_emulator(PATH)


def test_guest_password_goes_to_the_guest_service():
    """VLC's password, which OSWorld's getter sends as Basic auth, reaches
    the guest's service (as X-Guest-Authorization through the server, whose
    Authorization is the token); the guest server's forwarder passes none."""
    fake = ThreadingHTTPServer(("127.0.0.1", 0), _FakeServer)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    client = Client(f"http://127.0.0.1:{fake.server_address[1]}", "secret")
    vlc = Forwarder(client, lambda: "/api/v1/sandboxes/desk/ports/9222", guest_auth=True)
    plain = Forwarder(client, lambda: "/api/v1/sandboxes/desk/ports/9222")
    try:
        basic = "Basic OnBhc3N3b3Jk"  # ('', 'password')
        status, _, body = request(vlc.port, "GET", "/requests/status.xml", extra=f"Authorization: {basic}\r\n")
        assert status == 200 and body.decode() == basic
        status, _, body = request(plain.port, "GET", "/requests/status.xml", extra=f"Authorization: {basic}\r\n")
        assert status == 200 and body == b"none"
    finally:
        vlc.close()
        plain.close()
        client.close()
        fake.shutdown()
        fake.server_close()

"""A real hvkube server on a real desktop for the SDK's tests.

HVKUBE_BIN names the hvkube binary (default: bin/hvkube of the repository)
and HVKUBE_CACHE_DIR the cache that make image fills (else XDG_CACHE_HOME/hvkube, else
~/.cache/hvkube, as hvkube serve's default); the server runs on a
free loopback port with a data directory of its own, and is stopped after
the tests.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hvkube import Client, Pool, Sandbox  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _image_dir() -> Path:
    """Where make image leaves the images, as hvkube serve's default."""
    if cache := os.environ.get("HVKUBE_CACHE_DIR"):
        return Path(cache) / "images"
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg) / "hvkube" / "images"
    return Path.home() / ".cache" / "hvkube" / "images"


# The server's TLS listener (hvkube serve --tls-addr) and the file of the
# authority its certificate is checked by (hvkube ca), once it runs.
_TLS: dict[str, str] = {}


@pytest.fixture(scope="session")
def tls(server):
    """The server's https URL and its authority's certificate file."""
    return _TLS["url"], _TLS["ca"]


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    binary = os.environ.get("HVKUBE_BIN") or str(REPO / "bin" / "hvkube")
    if not Path(binary).exists():
        pytest.fail(f"{binary}: no hvkube binary (make build)")
    if not (_image_dir() / "linux-desktop" / "current").exists():
        pytest.fail(f"{_image_dir()}/linux-desktop: no image (make image)")
    data = tmp_path_factory.mktemp("hvkube")
    token = secrets.token_hex(16)
    (data / "token").write_text(token)
    (data / "token").chmod(0o600)
    addr = f"127.0.0.1:{_free_port()}"
    tls_addr = f"127.0.0.1:{_free_port()}"
    log = open(data / "serve.log", "w")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(data)}
    proc = subprocess.Popen([binary, "serve", "--addr", addr, "--data-dir", str(data / "data"),
                             "--token-file", str(data / "token"), "--image-dir", str(_image_dir()),
                             "--tls-addr", tls_addr, "--tls-names", "127.0.0.1"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://{addr}"
    client = Client(url, token, timeout=60)
    deadline = time.monotonic() + 60
    while True:
        try:
            client.list("templates")
            break
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("the server did not start: " + (data / "serve.log").read_text()[-2000:])
            time.sleep(0.2)
    ca = subprocess.run([binary, "ca", "--key-file", str(data / "data" / "token.key")],
                        check=True, capture_output=True, env=env).stdout
    (data / "ca.crt").write_bytes(ca)
    _TLS.update(url=f"https://{tls_addr}", ca=str(data / "ca.crt"))
    yield client, url, token
    client.close()
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="session")
def template(server):
    """The linux-desktop template, built once (a cold boot)."""
    client, _, _ = server
    client.create("templates", {"apiVersion": "hvkube/v1", "kind": "Template", "metadata": {"name": "desk"},
                                "spec": {"qemu": {"image": "linux-desktop"}}})
    deadline = time.monotonic() + 600
    while True:
        st = client.get("templates", "desk").get("status", {})
        if st.get("phase") == "Ready":
            return "desk"
        if st.get("phase") == "Failed" or time.monotonic() > deadline:
            pytest.fail(f"template desk: {st}")
        time.sleep(1)


@pytest.fixture(scope="session")
def desk(server, template):
    """One sandbox of the template, shared by the tests that drive a desktop."""
    client, _, _ = server
    sb = Sandbox.create(template, client=client, wait=300)
    yield sb
    sb.kill()


@pytest.fixture(scope="session")
def pool(server, template):
    """The pool of the tests: one desktop, taken by agents and leases in turn."""
    client, _, _ = server
    p = Pool.create("sdk", template, replicas=1, client=client)
    p.wait_ready(1)
    yield p
    p.delete()


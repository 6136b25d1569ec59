#!/usr/bin/env python3
"""Small QMP / guest-agent client for trying the linux-desktop image by hand.

Used by boot.sh (wait-ready) and for checks against a running guest:

  vmctl.py wait-ready QGA_SOCKET [--since EPOCH] [--timeout S] [--pid PID]
  vmctl.py exec QGA_SOCKET [--env K=V]... [--input TEXT] -- CMD [ARG...]
  vmctl.py qmp QMP_SOCKET COMMAND [JSON_ARGUMENTS]
  vmctl.py screenshot QMP_SOCKET OUT.png
  vmctl.py selftest OUT_DIR [--qmp QMP_SOCKET] [--qga QGA_SOCKET]

selftest is meant to run under boot.sh, which sets $QMP_SOCKET and
$QGA_SOCKET:  boot.sh IMAGE_DIR python3 vmctl.py selftest OUT_DIR

Standard library only. The guest agent serves one client at a time, so every
call opens its own connection and closes it when done.
"""

import argparse
import base64
import json
import os
import random
import socket
import struct
import sys
import tempfile
import time
import zlib

X_ENV = ["DISPLAY=:0", "XAUTHORITY=/home/agent/.Xauthority",
         "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"]
ABS_MAX = 0x7FFF  # QEMU's absolute axis range is 0..32767


class Channel:
    """A JSON stream over a unix socket (QMP or qemu-ga)."""

    def __init__(self, path, timeout):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.dec = json.JSONDecoder()

    def close(self):
        self.sock.close()

    def send(self, obj, prefix=b""):
        self.sock.sendall(prefix + json.dumps(obj).encode() + b"\n")

    def recv(self):
        while True:
            # 0xff is the guest agent's resynchronisation marker; it is never
            # part of UTF-8 JSON. surrogateescape keeps byte offsets exact.
            self.buf = self.buf.lstrip(b" \t\r\n\xff")
            if self.buf:
                text = self.buf.decode("utf-8", "surrogateescape")
                try:
                    obj, end = self.dec.raw_decode(text)
                    self.buf = text[end:].encode("utf-8", "surrogateescape")
                    return obj
                except ValueError:
                    pass  # incomplete: read more
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk


class QGA(Channel):
    def __init__(self, path, timeout=10, sync=True):
        super().__init__(path, timeout)
        self.sync_ids = set()  # guest-sync-delimited ids sent so far
        if sync:
            self.sync()

    def sync(self, within=None):
        """No greeting: skip whatever is in the stream before us.

        The 0xff sent first resets qemu-ga's parser (it answers with a parse
        error). Before qemu-ga runs nothing is answered: re-send every second
        and count answers to any sync sent on this connection. A last plain
        guest-sync, answered in order, then drains every reply still queued.
        """
        timeout = self.sock.gettimeout()
        deadline = time.monotonic() + (within if within is not None else timeout)
        self.sock.settimeout(1.0)
        try:
            while True:
                sync_id = random.randint(1, 2**31 - 1)
                self.sync_ids.add(sync_id)
                self.send({"execute": "guest-sync-delimited",
                           "arguments": {"id": sync_id}}, prefix=b"\xff")
                try:
                    while True:
                        ret = self.recv().get("return")
                        if isinstance(ret, int) and ret in self.sync_ids:
                            break
                    break
                except socket.timeout:
                    if time.monotonic() > deadline:
                        raise
            last = random.randint(1, 2**31 - 1)
            self.send({"execute": "guest-sync", "arguments": {"id": last}})
            while self.recv().get("return") != last:
                pass
        finally:
            self.sock.settimeout(timeout)

    def cmd(self, name, args=None):
        req = {"execute": name}
        if args is not None:
            req["arguments"] = args
        self.send(req)
        msg = self.recv()
        if "error" in msg:
            raise RuntimeError(f"{name}: {msg['error'].get('desc')}")
        return msg.get("return")

    def exec(self, argv, env=None, stdin=None, timeout=60):
        args = {"path": argv[0], "arg": argv[1:], "capture-output": True}
        if env is not None:
            args["env"] = env
        if stdin is not None:
            args["input-data"] = base64.b64encode(stdin).decode()
        pid = self.cmd("guest-exec", args)["pid"]
        deadline = time.monotonic() + timeout
        while True:
            st = self.cmd("guest-exec-status", {"pid": pid})
            if st.get("exited"):
                out = base64.b64decode(st.get("out-data", ""))
                err = base64.b64decode(st.get("err-data", ""))
                return st.get("exitcode", -1), out, err
            if time.monotonic() > deadline:
                raise TimeoutError(f"{argv[0]} still running after {timeout} s")
            time.sleep(0.02)


class QMP(Channel):
    def __init__(self, path, timeout=30):
        super().__init__(path, timeout)
        self.recv()  # greeting
        self.cmd("qmp_capabilities")

    def cmd(self, name, args=None):
        req = {"execute": name}
        if args is not None:
            req["arguments"] = args
        self.send(req)
        while True:
            msg = self.recv()
            if "event" in msg:
                continue
            if "error" in msg:
                raise RuntimeError(f"{name}: {msg['error'].get('desc')}")
            return msg.get("return")


def guest_exec(qga_path, argv, env=None, stdin=None, timeout=60):
    q = QGA(qga_path)
    try:
        return q.exec(argv, env, stdin, timeout)
    finally:
        q.close()


def read_ppm(path):
    with open(path, "rb") as f:
        data = f.read()
    fields, pos = [], 0
    while len(fields) < 4:  # magic, width, height, maxval
        while data[pos:pos + 1].isspace():
            pos += 1
        start = pos
        while not data[pos:pos + 1].isspace():
            pos += 1
        fields.append(data[start:pos])
    if fields[0] != b"P6" or fields[3] != b"255":
        raise ValueError("not an 8-bit P6 PPM")
    w, h = int(fields[1]), int(fields[2])
    return w, h, data[pos + 1:pos + 1 + w * h * 3]


def write_png(path, w, h, rgb):
    def chunk(tag, body):
        return (struct.pack(">I", len(body)) + tag + body +
                struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF))
    stride = w * 3
    raw = b"".join(b"\0" + rgb[y * stride:(y + 1) * stride] for y in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 1)))
        f.write(chunk(b"IEND", b""))


def screenshot(qmp_path, out_png):
    """screendump (PPM) -> PNG; returns (width, height, rgb, seconds for the dump)."""
    with tempfile.TemporaryDirectory() as tmp:
        ppm = os.path.join(tmp, "screen.ppm")
        q = QMP(qmp_path)
        try:
            t0 = time.monotonic()
            q.cmd("screendump", {"filename": ppm})
            took = time.monotonic() - t0
        finally:
            q.close()
        w, h, rgb = read_ppm(ppm)
    if out_png:
        write_png(out_png, w, h, rgb)
    return w, h, rgb, took


# --- input ---------------------------------------------------------------------

def abs_value(pixel, size):
    """Pixel -> QEMU absolute axis value (0..32767 spans the whole screen).

    Aim at the middle of the pixel: the guest's scaling (usb-tablet, libinput,
    X) rounds in ways that a plain pixel * 32767 / (size - 1) misses by one.
    """
    return min(ABS_MAX, round((pixel + 0.5) * (ABS_MAX + 1) / size))


def move(q, x, y, w, h):
    q.cmd("input-send-event", {"events": [
        {"type": "abs", "data": {"axis": "x", "value": abs_value(x, w)}},
        {"type": "abs", "data": {"axis": "y", "value": abs_value(y, h)}}]})


def button(q, down, name="left"):
    q.cmd("input-send-event", {"events": [
        {"type": "btn", "data": {"down": down, "button": name}}]})


def key(q, qcode, down):
    q.cmd("input-send-event", {"events": [
        {"type": "key", "data": {"down": down,
                                 "key": {"type": "qcode", "data": qcode}}}]})


# Text -> (qcode, shifted) for a US keyboard layout; enough for the self-test.
KEYS = {" ": ("spc", False), ">": ("dot", True), "/": ("slash", False),
        ".": ("dot", False), "-": ("minus", False), "\n": ("ret", False)}


def type_text(q, text):
    for ch in text:
        if ch.isalnum() and ch.isascii():
            code, shift = ch.lower(), ch.isupper()
        else:
            code, shift = KEYS[ch]
        # Down and up as separate commands: in one batch the key is lost.
        if shift:
            key(q, "shift", True)
        key(q, code, True)
        key(q, code, False)
        if shift:
            key(q, "shift", False)


# --- commands --------------------------------------------------------------------

def cmd_wait_ready(a):
    """Poll until the guest agent answers, then until hvkube-ready succeeds.

    One connection for the whole wait: a sync sent before qemu-ga runs is
    answered as soon as it starts, so retries only re-send on that socket.
    """
    start = a.since if a.since else time.time()
    deadline = time.monotonic() + a.timeout
    last_err = "no guest agent socket"
    q = None
    agent_up = False
    while time.monotonic() < deadline:
        if a.pid and not os.path.exists(f"/proc/{a.pid}"):
            print("QEMU exited", file=sys.stderr)
            return 1
        try:
            if q is None:
                q = QGA(a.qga, timeout=20, sync=False)
            if not agent_up:
                q.sync(within=max(0, deadline - time.monotonic()))
                agent_up = True
                print(f"guest agent answered after {time.time() - start:.1f} s", flush=True)
            code, out, err = q.exec(["/usr/local/bin/hvkube-ready"], X_ENV, timeout=15)
            if a.verbose:
                print(f"  {time.time() - start:5.1f} s: hvkube-ready {code} "
                      f"{(out + err).decode().strip()}", file=sys.stderr)
            if code == 0:
                print(f"desktop ready after {time.time() - start:.1f} s "
                      f"({out.decode().strip()})", flush=True)
                q.close()
                return 0
            last_err = err.decode().strip()
        except (OSError, ConnectionError, RuntimeError, TimeoutError) as e:
            last_err = str(e)
            if a.verbose:
                print(f"  {time.time() - start:5.1f} s: {last_err}", file=sys.stderr)
            if q is not None:
                q.close()
            q, agent_up = None, False
        # hvkube-ready costs the guest about half a second of a TCG vCPU:
        # polling faster would slow the boot it waits for.
        time.sleep(0.5)
    print(f"not ready after {a.timeout} s: {last_err}", file=sys.stderr)
    return 1


def cmd_exec(a):
    stdin = a.input.encode() if a.input is not None else None
    env = a.env if a.env else None
    code, out, err = guest_exec(a.qga, a.argv, env, stdin, a.timeout)
    sys.stdout.buffer.write(out)
    sys.stderr.buffer.write(err)
    return code


def cmd_qmp(a):
    q = QMP(a.qmp)
    try:
        args = json.loads(a.arguments) if a.arguments else None
        print(json.dumps(q.cmd(a.command, args), indent=2))
    finally:
        q.close()
    return 0


def cmd_screenshot(a):
    w, h, _, took = screenshot(a.qmp, a.out)
    print(f"{a.out}: {w}x{h} (screendump {took * 1000:.0f} ms)")
    return 0


def cmd_selftest(a):
    os.makedirs(a.out, exist_ok=True)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    def x(*argv, stdin=None):
        code, out, err = guest_exec(a.qga, list(argv), X_ENV, stdin)
        return code, out.decode(errors="replace"), err.decode(errors="replace")

    # Screen: a desktop, not a blank frame.
    w, h, rgb, took = screenshot(a.qmp, os.path.join(a.out, "desktop.png"))
    colors = len({rgb[i:i + 3] for i in range(0, len(rgb), 3)})
    check(colors > 8, f"screendump {w}x{h} in {took * 1000:.0f} ms, {colors} colours "
          f"-> {a.out}/desktop.png")

    # The terminal window and where a click lands in it.
    code, out, _ = x("xdotool", "search", "--onlyvisible", "--class", "XTerm")
    wid = out.split()[0] if code == 0 and out.split() else ""
    check(bool(wid), f"xterm window found ({wid})")
    geo = {}
    if wid:
        # xwininfo's absolute position (xdotool's is off under a reparenting
        # window manager).
        _, out, _ = x("xwininfo", "-id", wid)
        for line in out.splitlines():
            k, _, v = line.strip().partition(":")
            if k in ("Absolute upper-left X", "Absolute upper-left Y", "Width", "Height"):
                geo[k.split()[-1]] = int(v)
        print(f"     xterm window (client area): {geo.get('Width')}x{geo.get('Height')}"
              f"+{geo.get('X')}+{geo.get('Y')}")
    cx = geo.get("X", 40) + geo.get("Width", 600) // 2
    cy = geo.get("Y", 40) + geo.get("Height", 400) // 2
    image_dir = os.environ.get("HVKUBE_IMAGE_DIR")
    if image_dir and w == 1280:
        with open(os.path.join(image_dir, "image.json")) as f:
            area = json.load(f)["terminal"]["clientArea"]
        got = {"x": geo.get("X"), "y": geo.get("Y"),
               "width": geo.get("Width"), "height": geo.get("Height")}
        check(got == area, f"xterm where image.json says: {area}")

    q = QMP(a.qmp)
    try:
        # Pointer: absolute moves land on the pixel asked for.
        # (The tablet reports changes only: it starts at 0,0, so a first
        # move to 0,0 would not reach X.)
        points = [(w - 1, h - 1), (0, 0), (w // 2, h // 2), (1, 1), (123, 456 % h)]
        points += [(random.randrange(w), random.randrange(h)) for _ in range(5)]
        for px, py in points + [(cx, cy)]:
            move(q, px, py, w, h)
            time.sleep(0.3)
            _, out, _ = x("xdotool", "getmouselocation", "--shell")
            loc = dict(line.split("=", 1) for line in out.split() if "=" in line)
            got = (int(loc.get("X", -1)), int(loc.get("Y", -1)))
            check(got == (px, py), f"abs move to {px},{py}: X reports {got[0]},{got[1]}")

        # Click into the terminal and type a command.
        x("rm", "-f", "/tmp/t")
        button(q, True)
        button(q, False)
        time.sleep(0.3)
        t0 = time.monotonic()
        type_text(q, "echo hi > /tmp/t\n")
        typed = time.monotonic() - t0
        content = ""
        for _ in range(40):
            code, content, _ = x("cat", "/tmp/t")
            if code == 0 and content:
                break
            time.sleep(0.25)
        check(content == "hi\n", f"typed 'echo hi > /tmp/t' ({typed:.2f} s of key events): "
              f"/tmp/t = {content!r}")
    finally:
        q.close()
    screenshot(a.qmp, os.path.join(a.out, "typed.png"))

    # Clipboard round trip, including non-ASCII text.
    text = "hvkube clipboard ✓ äöü\nsecond line"
    t0 = time.monotonic()
    code, _, err = x("/usr/local/bin/hvkube-clipboard-set", stdin=text.encode())
    took = time.monotonic() - t0
    # Returns at once (well, under emulation): an xclip still attached to
    # guest-exec's pipes would hold the call until the selection is lost.
    check(code == 0 and took < 10, f"hvkube-clipboard-set returned {code} in {took:.2f} s {err.strip()}")
    code, out, err = x("/usr/local/bin/hvkube-clipboard-get")
    check(code == 0 and out == text, f"hvkube-clipboard-get returned {code}: {out!r} {err.strip()}")
    # A second owner replaces the first (whose xclip exits and must be reaped).
    x("/usr/local/bin/hvkube-clipboard-set", stdin=b"second")
    code, out, _ = x("/usr/local/bin/hvkube-clipboard-get")
    check(out == "second", f"clipboard replaced: {out!r}")

    # Resolution change and back.
    # 1920x1080 is among the display's modes; 1000x700 is not (a CVT mode
    # gets added).
    for res in ["1920x1080", "1000x700", f"{w}x{h}"]:
        t0 = time.monotonic()
        code, _, err = x("/usr/local/bin/hvkube-resolution", res)
        took = time.monotonic() - t0
        sw, sh, _, _ = screenshot(a.qmp, os.path.join(a.out, f"screen-{res}.png"))
        check(code == 0 and f"{sw}x{sh}" == res,
              f"hvkube-resolution {res}: exit {code} in {took:.1f} s, screendump {sw}x{sh} {err.strip()}")
    code, _, err = x("/usr/local/bin/hvkube-resolution", "99999x1")
    check(code != 0 and err, f"hvkube-resolution rejects a bad size: {err.strip()}")
    code, _, err = x("/usr/local/bin/hvkube-resolution", "4096x2160")
    _, out, _ = x("/usr/local/bin/hvkube-ready")
    check(code != 0 and out.strip() == f"ready {w}x{h}",
          f"hvkube-resolution 4096x2160 fails cleanly (exit {code}): {err.strip()}")

    code, out, _ = x("/usr/local/bin/hvkube-ready")
    check(code == 0, f"hvkube-ready: {out.strip()}")

    # Identity of a clone.
    code, out, err = x("/usr/local/bin/hvkube-identity", "selftest-1")
    _, host, _ = x("cat", "/proc/sys/kernel/hostname")
    check(code == 0 and host.strip() == "selftest-1",
          f"hvkube-identity: exit {code}, hostname {host.strip()!r}; {out.strip()!r} {err.strip()}")
    code, out, err = x("/usr/local/bin/hvkube-ready")
    check(code == 0, f"X clients still connect after the hostname change: {out.strip()} {err.strip()}")

    # Guest clock from the host.
    qa = QGA(a.qga)
    try:
        now = time.time_ns()
        try:
            qa.cmd("guest-set-time", {"time": now})
            ok, what = True, "guest-set-time ok"
        except RuntimeError as e:
            ok, what = False, f"guest-set-time: {e}"
        gt = qa.cmd("guest-get-time") / 1e9
    finally:
        qa.close()
    check(ok and abs(gt - time.time()) < 2, f"{what}, guest clock off by {gt - time.time():+.2f} s")

    # No zombies left behind (PID 1 reaps), memory and disk use.
    _, out, _ = x("ps", "-eo", "stat=,pid=,comm=")
    zombies = [line for line in out.splitlines() if line.strip().startswith("Z")]
    check(not zombies, f"no zombie processes {zombies}")
    _, out, _ = x("free", "-m")
    print("     " + "\n     ".join(out.strip().splitlines()))
    _, out, _ = x("df", "-h", "/")
    print("     " + "\n     ".join(out.strip().splitlines()))

    print(f"{len(failures)} failed" if failures else "all checks passed")
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("wait-ready")
    s.add_argument("qga")
    s.add_argument("--since", type=float, help="epoch seconds the clock starts at (QEMU start)")
    s.add_argument("--timeout", type=float, default=180)
    s.add_argument("--pid", type=int, help="give up when this process (QEMU) exits")
    s.add_argument("--verbose", action="store_true", help="print every attempt")
    s = sub.add_parser("exec")
    s.add_argument("qga")
    s.add_argument("--env", action="append", help="K=V; default: the inherited qemu-ga environment")
    s.add_argument("--input", help="text for stdin")
    s.add_argument("--timeout", type=float, default=60)
    s.add_argument("argv", nargs="+")
    s = sub.add_parser("qmp")
    s.add_argument("qmp")
    s.add_argument("command")
    s.add_argument("arguments", nargs="?")
    s = sub.add_parser("screenshot")
    s.add_argument("qmp")
    s.add_argument("out")
    s = sub.add_parser("selftest", help="run the image checks against a running guest")
    s.add_argument("out", help="directory for the screenshots")
    s.add_argument("--qmp", default=os.environ.get("QMP_SOCKET"), help="default: $QMP_SOCKET")
    s.add_argument("--qga", default=os.environ.get("QGA_SOCKET"), help="default: $QGA_SOCKET")
    a = p.parse_args()
    handler = {"wait-ready": cmd_wait_ready, "exec": cmd_exec, "qmp": cmd_qmp,
               "screenshot": cmd_screenshot, "selftest": cmd_selftest}[a.cmd]
    return handler(a)


if __name__ == "__main__":
    sys.exit(main())

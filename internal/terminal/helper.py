# hvkube's terminal helper, run in a Linux guest by the guest agent (as
# root): it listens on the TCP port in argv[1] for one connection from the
# host, checks the token its configuration (one JSON line on standard
# input) carries, and runs the configured program on a pseudo-terminal as
# the desktop's user, relaying it in frames: a type byte, a 4-byte
# big-endian length and the payload. From the host: 0 input, 1 window size
# (rows and columns, 2 bytes each). To the host: 0 output, 3 the exit
# status (4 bytes, signed; 128+N for signal N). It ends with the program,
# or ends the program (SIGHUP to its process group) when the connection
# goes, and waits at most 30 s for the connection.
import fcntl, hmac, json, os, pty, pwd, select, signal, socket, struct, sys, termios

MAX = 1 << 16

def frame(kind, data=b""):
    return struct.pack(">BI", kind, len(data)) + data

def main():
    port = int(sys.argv[1])
    cfg = json.loads(sys.stdin.readline())
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    srv.settimeout(30)
    conn, _ = srv.accept()
    srv.close()
    conn.settimeout(10)
    got = b""
    while b"\n" not in got:
        chunk = conn.recv(256)
        if not chunk or len(got) > 256:
            return
        got += chunk
    line, buf = got.split(b"\n", 1)
    if not hmac.compare_digest(line, cfg["token"].encode()):
        return
    conn.settimeout(None)
    pw = pwd.getpwnam(cfg["user"])
    argv = cfg.get("argv") or [pw.pw_shell or "/bin/sh", "-l"]
    env = dict(os.environ)
    env.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name, SHELL=pw.pw_shell or "/bin/sh",
               TERM=cfg.get("term") or "xterm-256color")
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.initgroups(pw.pw_name, pw.pw_gid)
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            try:
                os.chdir(pw.pw_dir)
            except OSError:
                os.chdir("/")
            os.execvpe(argv[0], argv, env)
        except Exception as e:
            os.write(2, ("hvkube terminal: %s: %s\r\n" % (argv[0], e)).encode())
        os._exit(127)
    resize(fd, cfg.get("rows") or 24, cfg.get("cols") or 80)
    buf = feed(fd, buf)  # frames that came with the token
    if buf is None:
        return
    status = None
    while status is None:
        r, _, _ = select.select([conn, fd], [], [], 0.5)
        if fd in r and not relay(fd, conn):
            status = reap(pid, True)
            break
        if conn in r:
            chunk = conn.recv(MAX)
            if not chunk:
                try:
                    os.killpg(pid, signal.SIGHUP)
                except OSError:
                    pass
                return
            buf = feed(fd, buf + chunk)
            if buf is None:
                return
        status = reap(pid, False)
    # What the program wrote before it ended, then its status.
    while select.select([fd], [], [], 0.1)[0] and relay(fd, conn):
        pass
    conn.sendall(frame(3, struct.pack(">i", status)))
    conn.close()

def feed(fd, buf):
    """Acts on the whole frames in buf; returns what is left of it, or
    None for a frame too large."""
    while len(buf) >= 5:
        kind, n = struct.unpack(">BI", buf[:5])
        if n > MAX:
            return None
        if len(buf) < 5 + n:
            break
        data, buf = buf[5:5 + n], buf[5 + n:]
        if kind == 0:
            os.write(fd, data)
        elif kind == 1 and n == 4:
            rows, cols = struct.unpack(">HH", data)
            resize(fd, rows, cols)
    return buf

def relay(fd, conn):
    try:
        data = os.read(fd, MAX)
    except OSError:
        return False
    if data:
        conn.sendall(frame(0, data))
    return bool(data)

def reap(pid, block):
    try:
        p, st = os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return 0
    if p == 0:
        return None
    code = os.waitstatus_to_exitcode(st)
    return 128 - code if code < 0 else code

def resize(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

main()

//go:build linux

package terminal

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/backend"
)

// hostGuest runs the helper on this host: "the guest" is this machine,
// its port on loopback. It exercises the helper's PTY, frames and token
// as a guest runs them, without a VM (the QEMU test in internal/server
// runs it in one).
type hostGuest struct{ t *testing.T }

func (g hostGuest) Exec(ctx context.Context, _ string, req backend.ExecRequest) (backend.ExecResult, error) {
	cmd := exec.Command(req.Path, req.Args...)
	cmd.Stdin = bytes.NewReader(req.Stdin)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return backend.ExecResult{}, err
	}
	g.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return backend.ExecResult{}, nil
}

func (g hostGuest) DialPort(ctx context.Context, _ string, port int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
}

func needPython(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this host")
	}
	return p
}

func me(t *testing.T) string {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// read collects output frames until the exit frame.
func readAll(t *testing.T, c *Conn) (string, int) {
	t.Helper()
	var out strings.Builder
	for {
		kind, data, err := c.Next()
		if err != nil {
			t.Fatalf("read: %v (output so far %q)", err, out.String())
		}
		switch kind {
		case Output:
			out.Write(data)
		case Exit:
			return out.String(), ExitCode(data)
		}
	}
}

func TestHelperRunsOnAPTY(t *testing.T) {
	needPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Open(ctx, hostGuest{t}, "x", Request{User: me(t), Rows: 12, Cols: 34,
		Argv: []string{"sh", "-c", `stty size; test -t 0 && echo tty; read line; echo "got:$line"; stty size; exit 5`}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	out, code := readAll(t, c)
	for _, want := range []string{"12 34", "tty", "got:hello"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in %q", want, out)
		}
	}
	if code != 5 {
		t.Errorf("exit status %d, want 5", code)
	}

	// A resize reaches the program; a signal's status is 128+N.
	c2, err := Open(ctx, hostGuest{t}, "x", Request{User: me(t), Argv: []string{"sh", "-c", `read a; stty size; kill -TERM $$`}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.SetSize(40, 120); err != nil {
		t.Fatal(err)
	}
	c2.Write([]byte("go\n"))
	out, code = readAll(t, c2)
	if !strings.Contains(out, "40 120") || code != 128+15 {
		t.Errorf("after a resize and SIGTERM: %q, exit %d", out, code)
	}
}

// TestHelperWantsItsToken: a connection without the token the helper was
// started with runs nothing.
func TestHelperWantsItsToken(t *testing.T) {
	py := needPython(t)
	mark := filepath.Join(t.TempDir(), "ran")
	const port = 45871
	cmd := exec.Command(py, "-c", helper, fmt.Sprint(port))
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"token":"right","user":%q,"argv":["touch",%q]}`+"\n", me(t), mark))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if conn, err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "wrong\n")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(make([]byte, 16)); err != io.EOF {
		t.Errorf("after a wrong token: read %d, %v; want the connection closed", n, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the helper: %v", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the program ran for a wrong token")
	}
}

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	WriteFrame(&b, Input, []byte("abc"))
	WriteFrame(&b, Resize, ResizePayload(5000, 0))
	k, d, err := ReadFrame(&b)
	if err != nil || k != Input || string(d) != "abc" {
		t.Fatalf("%d %q %v", k, d, err)
	}
	k, d, _ = ReadFrame(&b)
	if k != Resize || !bytes.Equal(d, []byte{0x03, 0xe8, 0, 1}) {
		t.Errorf("resize payload %v: want rows and columns clamped to 1000 and 1", d)
	}
	if err := WriteFrame(&b, Input, make([]byte, MaxPayload+1)); err == nil {
		t.Error("an oversized frame was written")
	}
	big := []byte{0, 0xff, 0xff, 0xff, 0xff}
	if _, _, err := ReadFrame(bytes.NewReader(big)); err == nil {
		t.Error("an oversized frame was read")
	}
	for _, r := range []Request{{Rows: 1001}, {Cols: -1}, {Argv: []string{""}}, {Argv: make([]string, MaxArgs+1)}, {Term: strings.Repeat("x", 65)}} {
		if err := r.Check(); err == nil {
			t.Errorf("%+v passed the check", r)
		}
	}
}

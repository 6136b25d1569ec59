package gateway

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hvkube/hvkube/internal/testwait"
)

// stubVNC stands in for a VNC server at the socket boundary (the QEMU
// tests in internal/server use the real one): it answers the RFB 3.8
// handshake with security None and a 4x2 screen, then records what it
// receives.
type stubVNC struct {
	mu  sync.Mutex
	got bytes.Buffer
}

func (s *stubVNC) serve(c net.Conn) {
	defer c.Close()
	c.Write([]byte("RFB 003.008\n"))
	var v [12]byte
	if _, err := io.ReadFull(c, v[:]); err != nil {
		return
	}
	c.Write([]byte{1, securityNone})
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return
	}
	c.Write([]byte{0, 0, 0, 0})
	if _, err := io.ReadFull(c, b[:]); err != nil { // ClientInit
		return
	}
	s.record(b[:])
	init := make([]byte, 24)
	init[1], init[3] = 4, 2
	c.Write(append(init[:20], 0, 0, 0, 0))
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		s.record(buf[:n])
		if err != nil {
			return
		}
	}
}

func (s *stubVNC) record(b []byte) {
	s.mu.Lock()
	s.got.Write(b)
	s.mu.Unlock()
}

func (s *stubVNC) received() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.got.Bytes())
}

// proxyServer serves the gateway over a stub VNC server; control is what
// the control check answers.
func proxyServer(t *testing.T, o Options, control *atomic.Bool) (*httptest.Server, *stubVNC) {
	t.Helper()
	vnc := &stubVNC{}
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if control != nil {
		o.Control = func(context.Context) bool { return control.Load() }
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Serve(w, r, func(ctx context.Context) (io.ReadWriteCloser, error) {
			a, b := net.Pipe()
			go vnc.serve(b)
			return a, nil
		}, o)
	}))
	t.Cleanup(srv.Close)
	return srv, vnc
}

func dialProxy(t *testing.T, srv *httptest.Server) (net.Conn, *Viewer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	t.Cleanup(func() { conn.Close() })
	v, err := NewViewer(conn)
	if err != nil {
		t.Fatal(err)
	}
	return conn, v
}

// waitClosed reports whether the gateway ends the connection soon.
func waitClosed(conn net.Conn) bool {
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, conn)
	return err == nil || !strings.Contains(err.Error(), "deadline")
}

func TestProxyInput(t *testing.T) {
	var control atomic.Bool
	srv, vnc := proxyServer(t, Options{}, &control)
	_, v := dialProxy(t, srv)
	if v.Width != 4 || v.Height != 2 {
		t.Fatalf("ServerInit %dx%d", v.Width, v.Height)
	}
	// Each step ends with an update request, which always passes: once
	// the server has it, the gateway has handled the pointer before it.
	handled := func(n int) {
		t.Helper()
		if !testwait.For(5*time.Second, func() bool { return len(vnc.received()) >= n }) {
			t.Fatalf("the VNC server got % x, want %d bytes", vnc.received(), n)
		}
	}
	const setup = 1 + 20 + 8 // ClientInit, SetPixelFormat, SetEncodings
	v.Pointer(1, 1, 0)       // dropped
	v.RequestUpdate(true)
	handled(setup + 10)
	control.Store(true)
	v.Pointer(2, 2, 1) // passes
	v.RequestUpdate(true)
	handled(setup + 26)
	control.Store(false)
	v.Pointer(3, 3, 0) // dropped
	v.RequestUpdate(true)
	handled(setup + 36)
	fbur := []byte{msgFramebufferUpdateReq, 1, 0, 0, 0, 0, 0, 4, 0, 2}
	want := []byte{1} // ClientInit, shared
	want = append(want, 0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0, 2, 0, 0, 1, 0, 0, 0, 0)
	want = append(want, fbur...)
	want = append(want, msgPointerEvent, 1, 0, 2, 0, 2)
	want = append(want, fbur...)
	want = append(want, fbur...)
	if !testwait.For(5*time.Second, func() bool { return bytes.Equal(vnc.received(), want) }) {
		t.Fatalf("the VNC server got\n% x\nwant\n% x", vnc.received(), want)
	}
}

func TestProxyReadOnly(t *testing.T) {
	srv, vnc := proxyServer(t, Options{}, nil)
	conn, v := dialProxy(t, srv)
	v.Pointer(1, 1, 1)
	conn.Write(msg(uint8(4), uint8(1), uint16(0), uint32(0x61)))                                                 // KeyEvent
	conn.Write(append(msg(uint8(6), [3]byte{}, int32(3)), 'a', 'b', 'c'))                                        // ClientCutText
	conn.Write(msg(uint8(255), uint8(0), uint16(1), uint32(0x61), uint32(30)))                                   // QEMU key
	conn.Write(append(msg(uint8(251), uint8(0), uint16(8), uint16(8), uint8(1), uint8(0)), make([]byte, 16)...)) // SetDesktopSize
	v.RequestUpdate(false)
	// The update request comes last: once it is in, the rest was handled.
	// Had it not come within the bound, the length check below says so.
	testwait.For(5*time.Second, func() bool { return len(vnc.received()) >= 1+28+10 })
	got := vnc.received()
	if bytes.Contains(got, []byte{msgPointerEvent}) || bytes.Contains(got, []byte("abc")) || len(got) != 1+28+10 {
		t.Fatalf("a read-only viewer's input reached the VNC server: % x", got)
	}
}

func TestProxyEndsSessions(t *testing.T) {
	t.Run("UnknownMessage", func(t *testing.T) {
		srv, _ := proxyServer(t, Options{}, nil)
		conn, _ := dialProxy(t, srv)
		conn.Write([]byte{7, 0, 0, 0})
		if !waitClosed(conn) {
			t.Fatal("an unknown message did not end the session")
		}
	})
	t.Run("CutTextTooLarge", func(t *testing.T) {
		srv, _ := proxyServer(t, Options{}, nil)
		conn, _ := dialProxy(t, srv)
		conn.Write(msg(uint8(6), [3]byte{}, int32(MaxCutText+1)))
		if !waitClosed(conn) {
			t.Fatal("an oversized cut text did not end the session")
		}
	})
	t.Run("HandshakeTimeout", func(t *testing.T) {
		srv, _ := proxyServer(t, Options{HandshakeTimeout: 200 * time.Millisecond}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			t.Fatal(err)
		}
		conn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
		defer conn.Close()
		if !waitClosed(conn) {
			t.Fatal("a viewer that never did the handshake was kept")
		}
	})
	t.Run("Idle", func(t *testing.T) {
		srv, _ := proxyServer(t, Options{IdleTimeout: 300 * time.Millisecond}, nil)
		conn, _ := dialProxy(t, srv)
		if !waitClosed(conn) {
			t.Fatal("an idle session was kept")
		}
	})
	t.Run("SecurityVNCAuth", func(t *testing.T) {
		srv, _ := proxyServer(t, Options{}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			t.Fatal(err)
		}
		conn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
		defer conn.Close()
		var v [12]byte
		io.ReadFull(conn, v[:])
		conn.Write([]byte("RFB 003.008\n"))
		var types [2]byte
		io.ReadFull(conn, types[:])
		conn.Write([]byte{2}) // VNC authentication
		if !waitClosed(conn) {
			t.Fatal("a security type other than None was passed")
		}
	})
}

func TestSubprotocol(t *testing.T) {
	srv, _ := proxyServer(t, Options{}, nil)
	for _, offer := range [][]string{nil, {"binary"}} {
		ws, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{Subprotocols: offer})
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if offer != nil {
			want = "binary"
		}
		if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != want || ws.Subprotocol() != want {
			t.Errorf("offered %v: agreed %q, want %q", offer, got, want)
		}
		ws.CloseNow()
	}
}

func TestControlCache(t *testing.T) {
	var calls atomic.Int32
	var ok atomic.Bool
	check := ControlCache(50*time.Millisecond, func(context.Context) bool { calls.Add(1); return ok.Load() })
	for i := 0; i < 100; i++ {
		check(context.Background())
	}
	if calls.Load() != 1 {
		t.Fatalf("%d checks in a burst, want 1", calls.Load())
	}
	ok.Store(true)
	// The clock must pass the 50 ms cache time: the cache reads the wall
	// clock, so only time passing makes the change visible.
	time.Sleep(60 * time.Millisecond)
	if !check(context.Background()) {
		t.Fatal("a change was not seen after the cache time")
	}
}

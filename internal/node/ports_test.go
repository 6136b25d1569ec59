package node

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/fake"
)

// guestServer is a TCP server of the test that the fake backend's guest
// ports lead to: it greets each connection with a line.
func guestServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("guest\n"))
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// TestDialPort: a running sandbox's served port connects through the
// backend; a paused or saved one is 409 naming its phase, another node's
// is 409, a port out of range is 400 naming port, a port nothing serves is
// an error of no category, and a backend without the ability is 501.
func TestDialPort(t *testing.T) {
	addr := guestServer(t)
	t.Run("running", func(t *testing.T) {
		r := newOpsRig(t, api.SandboxRunning)
		r.be.ServePort("box", 9222, addr)
		c, err := r.nd.DialPort(r.ctx, "box", 9222)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || line != "guest\n" {
			t.Fatalf("read %q, %v", line, err)
		}
		_, err = r.nd.DialPort(r.ctx, "box", 9223)
		for _, cat := range []error{api.ErrConflict, api.ErrNotFound, api.ErrInvalid, api.ErrUnsupported} {
			if err == nil || errors.Is(err, cat) {
				t.Fatalf("a port nothing serves: %v, want an error of no category", err)
			}
		}
		for _, port := range []int{0, -1, 65536} {
			if _, err := r.nd.DialPort(r.ctx, "box", port); api.FieldOf(err) != "port" {
				t.Errorf("port %d: %v, want ErrInvalid naming port", port, err)
			}
		}
		if _, err := r.nd.DialPort(r.ctx, "nope", 9222); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("a missing sandbox: %v, want ErrNotFound", err)
		}
		r.setStatus(func(s *api.SandboxStatus) { s.Node = "n2" })
		if _, err := r.nd.DialPort(r.ctx, "box", 9222); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "n2") {
			t.Errorf("another node's sandbox: %v, want ErrConflict naming n2", err)
		}
	})
	for _, phase := range []string{api.SandboxPaused, api.SandboxSaved} {
		t.Run(phase, func(t *testing.T) {
			r := newOpsRig(t, phase)
			r.be.ServePort("box", 9222, addr)
			_, err := r.nd.DialPort(r.ctx, "box", 9222)
			if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), phase) {
				t.Fatalf("%v, want ErrConflict naming %s", err, phase)
			}
			if n := r.be.Count(fake.OpDialPort); n != 0 {
				t.Fatalf("the backend was asked %d times", n)
			}
		})
	}
	t.Run("no ability", func(t *testing.T) {
		r := newOpsRig(t, api.SandboxRunning)
		nd := New(Options{Store: r.st, Backend: struct{ backend.Backend }{r.be}, Name: "n1"})
		defer nd.Stop()
		if _, err := nd.DialPort(context.Background(), "box", 9222); !errors.Is(err, api.ErrUnsupported) {
			t.Fatalf("%v, want ErrUnsupported", err)
		}
	})
}

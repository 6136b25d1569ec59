package fake

import (
	"bufio"
	"context"
	"errors"
	"net"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// TestDialPort: a served port of a running sandbox connects to its server;
// an unserved one refuses; a sandbox that does not run, a missing one and
// a port out of range get their categories; FailNext fires on the dial.
func TestDialPort(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t, Options{})
	inState(t, b, "run", backend.StateRunning)
	inState(t, b, "paused", backend.StatePaused)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte("hello from the guest\n"))
	}()
	b.ServePort("run", 8080, ln.Addr().String())
	b.ServePort("paused", 8080, ln.Addr().String())

	c, err := b.DialPort(ctx, "run", 8080)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || line != "hello from the guest\n" {
		t.Fatalf("read %q, %v", line, err)
	}

	for _, tt := range []struct {
		name, id string
		port     int
		want     error // nil: an error of no category
	}{
		{"unserved port", "run", 8081, nil},
		{"paused", "paused", 8080, api.ErrConflict},
		{"missing", "nope", 8080, api.ErrNotFound},
		{"port 0", "run", 0, api.ErrInvalid},
		{"port 65536", "run", 65536, api.ErrInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := b.DialPort(ctx, tt.id, tt.port)
			if err == nil {
				c.Close()
				t.Fatal("connected")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("%v, want %v", err, tt.want)
			}
			for _, cat := range []error{api.ErrConflict, api.ErrNotFound, api.ErrInvalid, api.ErrUnsupported} {
				if tt.want == nil && errors.Is(err, cat) {
					t.Fatalf("%v: a refused port is not %v", err, cat)
				}
			}
		})
	}

	// Taken away, the port refuses; an injected failure fires once.
	b.ServePort("run", 8080, "")
	if c, err := b.DialPort(ctx, "run", 8080); err == nil {
		c.Close()
		t.Fatal("a port taken away still connects")
	}
	b.ServePort("run", 8080, ln.Addr().String())
	noNet := errors.New("no network")
	b.FailNext(OpDialPort, "run", noNet)
	if _, err := b.DialPort(ctx, "run", 8080); !errors.Is(err, noNet) {
		t.Fatalf("FailNext: %v", err)
	}
	if got := b.Count(OpDialPort); got != 8 {
		t.Fatalf("%d dials recorded, want 8", got)
	}
}

package fake

import (
	"context"
	"fmt"
	"net"

	"github.com/hvkube/hvkube/internal/api"
)

// guestPort names a TCP port of a sandbox's guest.
type guestPort struct {
	id   string
	port int
}

// ServePort makes port of sandbox id's guest lead to the TCP server at
// addr, a listener the test runs on this host (an httptest.Server's
// address): DialPort of that port connects there, as a real backend
// connects to a server inside the guest. An empty addr takes the port away
// again; it then refuses. It is the test's wiring, so it may be set before
// the sandbox exists and outlives it.
func (b *Backend) ServePort(id string, port int, addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := guestPort{id, port}
	if addr == "" {
		delete(b.ports, k)
		return
	}
	b.ports[k] = addr
}

// DialPort implements backend.PortDialer. The sandbox must be Running
// (ErrConflict otherwise, ErrNotFound when missing) and port in 1..65535
// (ErrInvalid). A port ServePort set connects to its server; any other
// refuses, as a guest with nothing listening there would.
func (b *Backend) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if err := b.begin(ctx, OpDialPort, id); err != nil {
		return nil, err
	}
	if port < 1 || port > 65535 {
		return nil, api.Invalid("port", "%d is not a TCP port (1..65535)", port)
	}
	b.mu.Lock()
	_, err := b.runningLocked(OpDialPort, id)
	addr := b.ports[guestPort{id, port}]
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if addr == "" {
		return nil, fmt.Errorf("dial port %d of sandbox %s: connection refused", port, id)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial port %d of sandbox %s: %w", port, id, err)
	}
	return c, nil
}

package guestnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/hvkube/hvkube/internal/api"
)

var (
	// ErrClosed is returned by a closed Network's methods.
	ErrClosed = fmt.Errorf("guest network closed: %w", api.ErrUnavailable)
	// ErrAttached is returned by Attach while another attachment runs.
	ErrAttached = fmt.Errorf("guest network already attached: %w", api.ErrConflict)
)

const nicID tcpip.NICID = 1

// forwarderSlack is how far above MaxConns the forwarder's own bound on
// handshakes is, so that forward sees (and resets) what is past MaxConns.
const forwarderSlack = 16

// abortEvery is how often Close aborts endpoints again while it waits.
const abortEvery = 100 * time.Millisecond

// TCP buffer sizes. The guest is an in-process hop away, so a megabyte of
// window keeps a splice busy; the bound keeps MaxConns connections from
// holding much more memory than that each.
const (
	tcpBufMin     = 4 << 10
	tcpBufDefault = 256 << 10
	tcpBufMax     = 1 << 20
)

// Network is one guest's network: a netstack with the gateway and DNS
// addresses, a TCP forwarder that judges and splices the guest's
// connections, a DNS server, and the link to QEMU (see Attach). Its methods
// are safe for concurrent use.
type Network struct {
	cfg    Config
	opts   Options
	stack  *stack.Stack
	link   *channel.Endpoint
	names  *nameTable
	policy atomic.Pointer[Policy]
	report *denyReporter // nil without Options.OnDeny
	dns    *gonet.UDPConn
	// dnsSlots bounds the questions being resolved.
	dnsSlots chan struct{}
	// conns counts the guest's connections being made or spliced.
	conns atomic.Int64
	stats counters

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex // guards the following fields
	closed   bool
	attached bool
}

// counters are the atomics behind Stats.
type counters struct {
	allowed, denied, limited, dialFailed         atomic.Uint64
	bytesToHost, bytesToGuest                    atomic.Uint64
	dnsQueries, dnsRefused, dnsDropped           atomic.Uint64
	framesIn, framesOut, framesDropped, attaches atomic.Uint64
	unreported                                   atomic.Uint64
}

// Stats are a Network's counts since New.
type Stats struct {
	// Allowed counts the guest's connections the policy permitted, Denied
	// those refused (by the policy, as an address of the guest network, or
	// by the limit), Limited those of Denied refused by Options.MaxConns,
	// and DialFailed those permitted that the host could not make (reset
	// too).
	Allowed, Denied, Limited, DialFailed uint64
	// Active is the number of connections being made or spliced now.
	Active int64
	// BytesToHost and BytesToGuest count spliced payload bytes.
	BytesToHost, BytesToGuest uint64
	// DNSQueries counts questions received, DNSRefused those refused by a
	// Deny name rule, DNSDropped those dropped (too many in flight).
	DNSQueries, DNSRefused, DNSDropped uint64
	// FramesIn and FramesOut count frames carried; FramesDropped counts
	// inbound frames the link filter refused.
	FramesIn, FramesOut, FramesDropped uint64
	// Attachments counts calls of Attach that ran.
	Attachments uint64
	// DenialsUnreported counts denials OnDeny was not told of, because
	// too many distinct ones came in one interval.
	DenialsUnreported uint64
}

// New creates a guest's network with its policy. It starts the DNS server
// and, with Options.OnDeny, the reporter; nothing flows until Attach. Close
// ends it.
func New(cfg Config, pol Policy, opts Options) (*Network, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("guest network config: %w", err)
	}
	if opts, err = opts.withDefaults(); err != nil {
		return nil, fmt.Errorf("guest network options: %w", err)
	}
	n := &Network{
		cfg:      cfg,
		opts:     opts,
		names:    newNameTable(MaxRememberedAddrs),
		dnsSlots: make(chan struct{}, MaxDNSInFlight),
	}
	n.policy.Store(pol.clone())
	if err := n.newStack(); err != nil {
		return nil, err
	}
	dnsAddr := tcpip.FullAddress{NIC: nicID, Addr: addr4(cfg.DNS), Port: 53}
	if n.dns, err = gonet.DialUDP(n.stack, &dnsAddr, nil, ipv4.ProtocolNumber); err != nil {
		n.stack.Destroy()
		return nil, fmt.Errorf("guest network DNS: %w", err)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Go(n.serveDNS)
	if opts.OnDeny != nil {
		n.report = newDenyReporter(opts.OnDeny, opts.DenyInterval, &n.stats.unreported)
		n.wg.Go(func() { n.report.run(n.ctx) })
	}
	return n, nil
}

// newStack builds the netstack: one NIC, promiscuous and spoofing so that
// it takes the guest's packets to any address and answers from it, holding
// the gateway and DNS addresses.
func (n *Network) newStack() error {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	fail := func(what string, e tcpip.Error) error {
		s.Destroy()
		return fmt.Errorf("guest network %s: %s", what, e)
	}
	sack := tcpip.TCPSACKEnabled(true)
	if e := s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); e != nil {
		return fail("SACK", e)
	}
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: tcpBufMin, Default: tcpBufDefault, Max: tcpBufMax}
	if e := s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv); e != nil {
		return fail("receive buffer", e)
	}
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: tcpBufMin, Default: tcpBufDefault, Max: tcpBufMax}
	if e := s.SetTransportProtocolOption(tcp.ProtocolNumber, &snd); e != nil {
		return fail("send buffer", e)
	}
	n.link = channel.New(QueueLen, uint32(n.cfg.MTU+ethernetHeader), tcpip.LinkAddress(n.cfg.GatewayMAC))
	if e := s.CreateNIC(nicID, ethernet.New(n.link)); e != nil {
		return fail("NIC", e)
	}
	for _, a := range []netip.Addr{n.cfg.Gateway, n.cfg.DNS} {
		pa := tcpip.ProtocolAddress{
			Protocol:          ipv4.ProtocolNumber,
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: addr4(a), PrefixLen: n.cfg.Guest.Bits()},
		}
		if e := s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); e != nil {
			return fail("address "+a.String(), e)
		}
	}
	if e := s.SetPromiscuousMode(nicID, true); e != nil {
		return fail("promiscuous mode", e)
	}
	if e := s.SetSpoofing(nicID, true); e != nil {
		return fail("spoofing", e)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}})
	if e := s.AddStaticNeighbor(nicID, ipv4.ProtocolNumber, addr4(n.cfg.Guest.Addr()), tcpip.LinkAddress(n.cfg.GuestMAC)); e != nil {
		return fail("guest neighbor", e)
	}
	// Handshakes in flight are bounded by MaxConns in forward; the
	// forwarder's own bound, past which it drops SYNs unanswered, is set
	// above it so that the guest is reset instead.
	fwd := tcp.NewForwarder(s, 0, n.opts.MaxConns+forwarderSlack, n.forward)
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)
	n.stack = s
	return nil
}

func addr4(a netip.Addr) tcpip.Address { return tcpip.AddrFrom4(a.As4()) }

func fromAddr(a tcpip.Address) netip.Addr {
	ad, _ := netip.AddrFromSlice(a.AsSlice())
	return ad
}

// enter counts a goroutine or call in the Network's WaitGroup, or reports
// that the Network is closed.
func (n *Network) enter() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.wg.Add(1)
	return true
}

// Attach runs the link over conn, which carries QEMU's -netdev stream
// framing, until conn ends, ctx ends or the Network closes; it takes conn
// and closes it. It returns nil when the peer closed or dropped the stream, ctx's
// error when ctx ended, ErrClosed when the Network closed, ErrAttached when
// another attachment runs. Attach may be called again after it returned:
// the stack persists, and frames queued meanwhile (up to QueueLen) are sent
// on the new connection.
func (n *Network) Attach(ctx context.Context, conn net.Conn) error {
	if !n.enter() {
		conn.Close()
		return ErrClosed
	}
	defer n.wg.Done()
	n.mu.Lock()
	if n.attached {
		n.mu.Unlock()
		conn.Close()
		return ErrAttached
	}
	n.attached = true
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.attached = false
		n.mu.Unlock()
	}()
	n.stats.attaches.Add(1)

	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopNet := context.AfterFunc(n.ctx, cancel)
	defer stopNet()
	// Closing conn is what ends both pumps' blocking reads and writes.
	stopConn := context.AfterFunc(actx, func() { conn.Close() })
	defer stopConn()

	var wg sync.WaitGroup
	var writeErr error
	wg.Go(func() {
		if err := pumpOut(actx, n.link, conn, &n.stats.framesOut); err != nil && actx.Err() == nil {
			writeErr = err
		}
		cancel()
	})
	readErr := pumpIn(conn, n.link, admitter(n.cfg.Guest.Addr(), n.cfg.Gateway, n.cfg.DNS), &n.stats.framesIn, &n.stats.framesDropped)
	cancel()
	wg.Wait()
	conn.Close()

	// Which error came first is a race (a write to a peer that left can
	// fail before the read sees the end), so the peer's leaving is judged
	// on both.
	switch {
	case n.ctx.Err() != nil:
		return ErrClosed
	case ctx.Err() != nil:
		return ctx.Err()
	case peerGone(readErr) || writeErr != nil && peerGone(writeErr):
		return nil
	case errors.Is(readErr, errFrameTooLarge):
		n.opts.Logger.Warn("guest network link out of step", "err", readErr)
		return fmt.Errorf("read frames: %w", readErr)
	case writeErr != nil:
		return writeErr
	}
	return fmt.Errorf("read frames: %w", readErr)
}

// SetPolicy replaces the policy for connections and questions from now on;
// connections already open stay open.
func (n *Network) SetPolicy(pol Policy) {
	n.policy.Store(pol.clone())
}

// Policy returns the policy in force.
func (n *Network) Policy() Policy {
	return *n.policy.Load().clone()
}

// Config returns the configuration with its defaults filled in.
func (n *Network) Config() Config {
	c := n.cfg
	c.HostAddrs = slices.Clone(c.HostAddrs)
	return c
}

// DialGuest opens a TCP connection from the gateway address to the guest's
// port: the way into the guest, with nothing listening on the host. It
// blocks until the guest accepts or resets, or ctx ends. Errors wrap
// api.ErrUnavailable; the caller closes the connection, and Close aborts
// it.
func (n *Network) DialGuest(ctx context.Context, port uint16) (net.Conn, error) {
	if port == 0 {
		return nil, fmt.Errorf("dial guest: port 0: %w", api.ErrInvalid)
	}
	if !n.enter() {
		return nil, ErrClosed
	}
	defer n.wg.Done()
	local := tcpip.FullAddress{NIC: nicID, Addr: addr4(n.cfg.Gateway)}
	remote := tcpip.FullAddress{NIC: nicID, Addr: addr4(n.cfg.Guest.Addr()), Port: port}
	// The dial ends when the Network closes, too.
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(n.ctx, cancel)
	defer stop()
	c, err := gonet.DialTCPWithBind(dctx, n.stack, local, remote, ipv4.ProtocolNumber)
	if err != nil {
		if n.ctx.Err() != nil {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("dial guest port %d: %w: %w", port, err, api.ErrUnavailable)
	}
	return c, nil
}

// Stats returns the counts so far.
func (n *Network) Stats() Stats {
	s := &n.stats
	return Stats{
		Allowed:           s.allowed.Load(),
		Denied:            s.denied.Load(),
		Limited:           s.limited.Load(),
		DialFailed:        s.dialFailed.Load(),
		Active:            n.conns.Load(),
		BytesToHost:       s.bytesToHost.Load(),
		BytesToGuest:      s.bytesToGuest.Load(),
		DNSQueries:        s.dnsQueries.Load(),
		DNSRefused:        s.dnsRefused.Load(),
		DNSDropped:        s.dnsDropped.Load(),
		FramesIn:          s.framesIn.Load(),
		FramesOut:         s.framesOut.Load(),
		FramesDropped:     s.framesDropped.Load(),
		Attachments:       s.attaches.Load(),
		DenialsUnreported: s.unreported.Load(),
	}
}

// Close ends the attachment, every connection and the DNS server, reports
// pending denials, and returns when the Network's goroutines have ended (the
// last OnDeny call among them). It is idempotent.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	n.dns.Close()
	// Aborting the stack's endpoints ends the guest side of every splice
	// and any DialGuest in flight.
	n.stack.Close()
	// A handshake that began after that is not aborted by it; abort again
	// until every goroutine of the Network has ended.
	done := make(chan struct{})
	go func() {
		n.wg.Wait()
		close(done)
	}()
	t := time.NewTicker(abortEvery)
	defer t.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-t.C:
			for _, e := range n.stack.RegisteredEndpoints() {
				e.Abort()
			}
		}
	}
	n.link.Close()
	n.stack.Wait()
	return nil
}

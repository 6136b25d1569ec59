package guestnet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
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
	"gvisor.dev/gvisor/pkg/waiter"
)

// testTimeout bounds every wait of a test; a refused connection returns
// long before it, and one that timed out instead fails the test by its
// error, not by a duration.
const testTimeout = 10 * time.Second

var (
	guestAddr   = netip.MustParsePrefix(DefaultGuest).Addr()
	gatewayAddr = netip.MustParseAddr(DefaultGateway)
	dnsAddr     = netip.MustParseAddr(DefaultDNS)
)

// testGuest plays QEMU and the guest: a second netstack with the guest's MAC
// and address, configured as a guest image would be, whose frames cross a
// real connection in the stream framing.
type testGuest struct {
	t     testing.TB
	stack *stack.Stack
	link  *channel.Endpoint
}

func newTestGuest(t testing.TB) *testGuest {
	t.Helper()
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	mac, _ := net.ParseMAC(DefaultGuestMAC)
	link := channel.New(QueueLen, DefaultMTU+ethernetHeader, tcpip.LinkAddress(mac))
	if e := s.CreateNIC(1, ethernet.New(link)); e != nil {
		t.Fatalf("guest NIC: %s", e)
	}
	pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{Address: addr4(guestAddr), PrefixLen: 24}}
	if e := s.AddProtocolAddress(1, pa, stack.AddressProperties{}); e != nil {
		t.Fatalf("guest address: %s", e)
	}
	subnet := tcpip.AddressWithPrefix{Address: addr4(netip.MustParseAddr("10.0.2.0")), PrefixLen: 24}.Subnet()
	s.SetRouteTable([]tcpip.Route{
		{Destination: subnet, NIC: 1},
		{Destination: header.IPv4EmptySubnet, Gateway: addr4(gatewayAddr), NIC: 1},
	})
	g := &testGuest{t: t, stack: s, link: link}
	t.Cleanup(g.close)
	return g
}

func (g *testGuest) close() {
	g.stack.Close()
	g.link.Close()
	g.stack.Wait()
}

// plug links the guest to n over a net.Pipe, with n attached on one end and
// the guest's frames pumped on the other. The returned unplug closes the
// guest's end, as QEMU going away would, and returns Attach's result.
func (g *testGuest) plug(n *Network) (unplug func() error) {
	a, b := net.Pipe()
	return g.plugConns(n, a, b)
}

// plugConns is plug over a given pair: nEnd is Attach's, gEnd the guest's.
func (g *testGuest) plugConns(n *Network, nEnd, gEnd net.Conn) (unplug func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	attached := make(chan error, 1)
	go func() { attached <- n.Attach(context.Background(), nEnd) }()
	var wg sync.WaitGroup
	var frames, dropped atomic.Uint64
	wg.Go(func() { pumpOut(ctx, g.link, gEnd, &frames) })
	wg.Go(func() { pumpIn(gEnd, g.link, nil, &frames, &dropped) })
	var once sync.Once
	var err error
	unplug = func() error {
		once.Do(func() {
			cancel()
			gEnd.Close()
			wg.Wait()
			select {
			case err = <-attached:
			case <-time.After(testTimeout):
				err = errors.New("Attach did not return after the guest's end closed")
			}
		})
		return err
	}
	g.t.Cleanup(func() { unplug() })
	return unplug
}

func (g *testGuest) full(a netip.AddrPort) tcpip.FullAddress {
	return tcpip.FullAddress{NIC: 1, Addr: addr4(a.Addr()), Port: a.Port()}
}

// connect opens a TCP connection from the guest and returns gVisor's own
// error, so that a test can tell a reset (ErrConnectionRefused) from a
// timeout.
func (g *testGuest) connect(dst netip.AddrPort) (net.Conn, tcpip.Error) {
	var wq waiter.Queue
	ep, err := g.stack.NewEndpoint(tcp.ProtocolNumber, ipv4.ProtocolNumber, &wq)
	if err != nil {
		return nil, err
	}
	entry, ch := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	err = ep.Connect(g.full(dst))
	if _, ok := err.(*tcpip.ErrConnectStarted); ok {
		select {
		case <-ch:
			err = ep.LastError()
		case <-time.After(testTimeout):
			err = &tcpip.ErrTimeout{}
		}
	}
	if err != nil {
		ep.Close()
		return nil, err
	}
	return gonet.NewTCPConn(&wq, ep), nil
}

// mustRefuse asserts that the guest's connection to dst is reset.
func (g *testGuest) mustRefuse(dst netip.AddrPort) {
	g.t.Helper()
	c, err := g.connect(dst)
	if err == nil {
		c.Close()
		g.t.Fatalf("guest connected to %s; want it refused", dst)
	}
	if _, ok := err.(*tcpip.ErrConnectionRefused); !ok {
		g.t.Fatalf("guest connection to %s: %s; want connection refused", dst, err)
	}
}

// resolver is a Go resolver whose DNS server is the Network's, reached
// through the guest's stack.
func (g *testGuest) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		raddr := g.full(netip.AddrPortFrom(dnsAddr, 53))
		return gonet.DialUDP(g.stack, nil, &raddr, ipv4.ProtocolNumber)
	}}
}

func (g *testGuest) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, err
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		addrs, err := g.resolver().LookupNetIP(ctx, "ip4", host)
		if err != nil {
			return nil, err
		}
		addr = addrs[0]
	}
	return gonet.DialContextTCP(ctx, g.stack, g.full(netip.AddrPortFrom(addr, uint16(port))), ipv4.ProtocolNumber)
}

// client is an HTTP client inside the guest.
func (g *testGuest) client() *http.Client {
	return &http.Client{
		Transport: &http.Transport{DialContext: g.dialContext, DisableKeepAlives: true},
		Timeout:   testTimeout,
	}
}

// get fetches url from inside the guest and returns the body.
func (g *testGuest) get(url string) (string, error) {
	resp, err := g.client().Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// mustGet asserts that the guest fetches url and its body is want.
func (g *testGuest) mustGet(url, want string) {
	g.t.Helper()
	got, err := g.get(url)
	if err != nil {
		g.t.Fatalf("guest GET %s: %v", url, err)
	}
	if got != want {
		g.t.Fatalf("guest GET %s = %q, want %q", url, got, want)
	}
}

// query asks the Network's DNS one question from the guest and returns the
// response code and A records.
func (g *testGuest) query(name string, qtype dnsmessage.Type) (dnsmessage.RCode, []netip.Addr) {
	g.t.Helper()
	raddr := g.full(netip.AddrPortFrom(dnsAddr, 53))
	c, err := gonet.DialUDP(g.stack, nil, &raddr, ipv4.ProtocolNumber)
	if err != nil {
		g.t.Fatalf("guest DNS socket: %v", err)
	}
	defer c.Close()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: qtype, Class: dnsmessage.ClassINET})
	msg, _ := b.Finish()
	buf := make([]byte, 1500)
	for try := 0; try < 3; try++ { // UDP: the first may meet an unresolved ARP
		c.Write(msg)
		c.SetReadDeadline(time.Now().Add(testTimeout / 3))
		n, err := c.Read(buf)
		if err != nil {
			continue
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil || h.ID != 7 {
			g.t.Fatalf("DNS response unreadable: %v", err)
		}
		p.SkipAllQuestions()
		var addrs []netip.Addr
		for {
			rh, err := p.AnswerHeader()
			if err != nil {
				break
			}
			if rh.Type != dnsmessage.TypeA {
				g.t.Fatalf("answer of type %v", rh.Type)
			}
			a, _ := p.AResource()
			addrs = append(addrs, netip.AddrFrom4(a.A))
		}
		return h.RCode, addrs
	}
	g.t.Fatalf("no DNS response for %s", name)
	return 0, nil
}

// newTestNetwork returns a Network without host addresses (tests set them
// where they matter), closed at the test's end.
func newTestNetwork(t *testing.T, pol Policy, opts Options) *Network {
	t.Helper()
	n, err := New(Config{HostAddrs: []netip.Addr{}}, pol, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func mustPolicy(t *testing.T, allow, deny []string) Policy {
	t.Helper()
	p, err := ParsePolicy(allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hostServer is an HTTP server on the host's loopback that answers body.
func hostServer(t *testing.T, body string) (port uint16) {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return netip.MustParseAddrPort(s.Listener.Addr().String()).Port()
}

// fakeHostDialer stands in for the host's network where a test cannot reach
// the real destination (a private range, the metadata address): it records
// the address asked for and connects to target instead.
type fakeHostDialer struct {
	target string

	mu     sync.Mutex // guards dialed
	dialed []string
}

func (d *fakeHostDialer) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	d.mu.Unlock()
	var nd net.Dialer
	return nd.DialContext(ctx, network, d.target)
}

func (d *fakeHostDialer) addrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

// fakeResolver stands in for the host's resolver: it answers from a map and
// counts the names it was asked.
type fakeResolver struct {
	answers map[string][]netip.Addr
	fail    map[string]error

	mu    sync.Mutex // guards asked
	asked map[string]int
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	if r.asked == nil {
		r.asked = make(map[string]int)
	}
	r.asked[host]++
	r.mu.Unlock()
	if err := r.fail[host]; err != nil {
		return nil, err
	}
	if a, ok := r.answers[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked[host]
}

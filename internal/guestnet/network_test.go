package guestnet

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"

	"github.com/hvkube/hvkube/internal/api"
)

func gw(port uint16) netip.AddrPort { return netip.AddrPortFrom(gatewayAddr, port) }

func TestHostLoopbackOnlyWhenAllowed(t *testing.T) {
	port := hostServer(t, "hello from the host")
	url := fmt.Sprintf("http://%s/", gw(port))
	tests := []struct {
		name        string
		allow, deny []string
		ok          bool
	}{
		{"no rules", nil, nil, false},
		{"rule for the port", []string{fmt.Sprintf("127.0.0.1:%d", port)}, nil, true},
		{"rule for another port", []string{fmt.Sprintf("127.0.0.1:%d", port+1)}, nil, false},
		{"loopback range", []string{"127.0.0.0/8"}, nil, true},
		{"deny beats allow", []string{fmt.Sprintf("127.0.0.1:%d", port)}, []string{"127.0.0.1"}, false},
		{"allow of another range", []string{"10.0.0.0/8"}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newTestNetwork(t, mustPolicy(t, tt.allow, tt.deny), Options{})
			g := newTestGuest(t)
			g.plug(n)
			if tt.ok {
				g.mustGet(url, "hello from the host")
			} else {
				g.mustRefuse(gw(port))
			}
		})
	}
}

func TestPrivateAndLinkLocal(t *testing.T) {
	port := hostServer(t, "fake remote")
	target := fmt.Sprintf("127.0.0.1:%d", port)
	tests := []struct {
		name        string
		dst         string
		allow, deny []string
		ok          bool
		reason      Reason
		rule        string
	}{
		{"private, no rules", "10.1.2.3:80", nil, nil, false, ReasonBlocked, "10.0.0.0/8 (private)"},
		{"private, allowed", "10.1.2.3:80", []string{"10.0.0.0/8"}, nil, true, "", ""},
		{"private, denied inside the allowed", "10.1.2.3:80", []string{"10.0.0.0/8"}, []string{"10.1.0.0/16"}, false, ReasonDenyRule, "10.1.0.0/16"},
		{"private, beside the denied", "10.2.0.1:80", []string{"10.0.0.0/8"}, []string{"10.1.0.0/16"}, true, "", ""},
		{"192.168, no rules", "192.168.1.1:443", nil, nil, false, ReasonBlocked, "192.168.0.0/16 (private)"},
		{"CGNAT, no rules", "100.64.0.1:80", nil, nil, false, ReasonBlocked, "100.64.0.0/10 (shared address space)"},
		{"metadata, no rules", "169.254.169.254:80", nil, nil, false, ReasonBlocked, "169.254.0.0/16 (link-local)"},
		{"metadata, allowed", "169.254.169.254:80", []string{"169.254.169.254:80"}, nil, true, "", ""},
		{"public, no rules", "203.0.114.7:80", nil, nil, true, "", ""},
		{"public, not in the allow list", "203.0.114.7:80", []string{"10.0.0.0/8"}, nil, false, ReasonNotAllowed, ""},
		{"public, denied", "203.0.114.7:80", nil, []string{"203.0.114.0/24:80"}, false, ReasonDenyRule, "203.0.114.0/24:80"},
		{"public, denied on another port", "203.0.114.7:80", nil, []string{"203.0.114.0/24:443"}, true, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &fakeHostDialer{target: target}
			var denials []Denial
			var mu sync.Mutex
			n := newTestNetwork(t, mustPolicy(t, tt.allow, tt.deny), Options{
				Dial:         d.Dial,
				DenyInterval: time.Hour,
				OnDeny: func(dn Denial) {
					mu.Lock()
					denials = append(denials, dn)
					mu.Unlock()
				},
			})
			g := newTestGuest(t)
			g.plug(n)
			dst := netip.MustParseAddrPort(tt.dst)
			if tt.ok {
				g.mustGet("http://"+tt.dst+"/", "fake remote")
				if got := d.addrs(); len(got) != 1 || got[0] != tt.dst {
					t.Errorf("host dialed %q, want [%s]", got, tt.dst)
				}
				return
			}
			g.mustRefuse(dst)
			if got := d.addrs(); len(got) != 0 {
				t.Errorf("host dialed %q for a refused connection", got)
			}
			n.Close() // reports what is pending
			mu.Lock()
			defer mu.Unlock()
			if len(denials) != 1 {
				t.Fatalf("denials = %+v, want one", denials)
			}
			dn := denials[0]
			if dn.Proto != "tcp" || dn.Dest != dst || dn.Reason != tt.reason || dn.Rule != tt.rule || dn.Count != 1 {
				t.Errorf("denial = %+v, want tcp %s %s %q count 1", dn, dst, tt.reason, tt.rule)
			}
		})
	}
}

func TestHostAddressesBlocked(t *testing.T) {
	d := &fakeHostDialer{target: "127.0.0.1:1"}
	n, err := New(Config{HostAddrs: []netip.Addr{netip.MustParseAddr("198.51.100.9")}}, Policy{}, Options{Dial: d.Dial})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	g := newTestGuest(t)
	g.plug(n)
	g.mustRefuse(netip.MustParseAddrPort("198.51.100.9:8080"))
	if got := d.addrs(); len(got) != 0 {
		t.Errorf("host dialed %q", got)
	}
}

func TestGuestNetworkAddressRefused(t *testing.T) {
	n := newTestNetwork(t, mustPolicy(t, []string{"10.0.0.0/8"}, nil), Options{})
	g := newTestGuest(t)
	g.plug(n)
	// Even allowed, the DNS address serves no TCP, and is not the host's.
	g.mustRefuse(netip.AddrPortFrom(dnsAddr, 53))
	g.mustRefuse(netip.AddrPortFrom(dnsAddr, 80))
}

func TestHostRefusalResets(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := netip.MustParseAddrPort(l.Addr().String()).Port()
	l.Close() // nothing listens there now
	n := newTestNetwork(t, mustPolicy(t, []string{"127.0.0.1"}, nil), Options{})
	g := newTestGuest(t)
	g.plug(n)
	g.mustRefuse(gw(port))
	if s := n.Stats(); s.Allowed != 1 || s.DialFailed != 1 || s.Denied != 0 {
		t.Errorf("stats = %+v, want 1 allowed, 1 dial failed, 0 denied", s)
	}
}

func TestNameRuleThroughDNS(t *testing.T) {
	port := hostServer(t, "by name")
	n := newTestNetwork(t, mustPolicy(t, []string{fmt.Sprintf("api.test:%d", port), "*.svc.test"}, nil), Options{
		Hosts: map[string][]netip.Addr{
			"API.test.":       {hostLoopback},
			"web.svc.test":    {hostLoopback},
			"other.test":      {hostLoopback},
			"svc.test":        {hostLoopback},
			"deep.a.svc.test": {hostLoopback},
		},
		Resolver: &fakeResolver{},
	})
	g := newTestGuest(t)
	g.plug(n)

	// Before the guest resolved a name, the address is only 127.0.0.1.
	g.mustRefuse(gw(port))

	rcode, addrs := g.query("api.test.", dnsmessage.TypeA)
	if rcode != dnsmessage.RCodeSuccess || len(addrs) != 1 || addrs[0] != gatewayAddr {
		t.Fatalf("api.test A = %v %v, want the gateway", rcode, addrs)
	}
	// The name goes through the guest's own resolver, then the connection.
	g.mustGet(fmt.Sprintf("http://api.test:%d/", port), "by name")

	// A wildcard matches below its domain, at any depth, not the domain.
	n2 := newTestNetwork(t, mustPolicy(t, []string{"*.svc.test"}, nil), Options{
		Hosts: map[string][]netip.Addr{"web.svc.test": {hostLoopback}, "svc.test": {hostLoopback}},
	})
	g2 := newTestGuest(t)
	g2.plug(n2)
	g2.query("svc.test.", dnsmessage.TypeA)
	g2.mustRefuse(gw(port))
	g2.mustGet(fmt.Sprintf("http://web.svc.test:%d/", port), "by name")
}

func TestDeniedNameNotResolved(t *testing.T) {
	r := &fakeResolver{answers: map[string][]netip.Addr{
		"ok.test.":         {netip.MustParseAddr("203.0.113.1")},
		"blocked.test.":    {netip.MustParseAddr("203.0.113.2")},
		"x.ads.test.":      {netip.MustParseAddr("203.0.113.3")},
		"mail.test.":       {netip.MustParseAddr("203.0.113.4")},
		"ads.test.":        {netip.MustParseAddr("203.0.113.5")},
		"notblocked.test.": {netip.MustParseAddr("203.0.113.6")},
	}}
	var denials []Denial
	n := newTestNetwork(t, mustPolicy(t, nil, []string{"blocked.test", "*.ads.test", "mail.test:25"}), Options{
		Resolver:     r,
		Hosts:        map[string][]netip.Addr{"blocked.test": {hostLoopback}},
		DenyInterval: time.Hour,
		OnDeny:       func(d Denial) { denials = append(denials, d) },
	})
	g := newTestGuest(t)
	g.plug(n)
	tests := []struct {
		name  string
		rcode dnsmessage.RCode
		asked int
	}{
		{"blocked.test.", dnsmessage.RCodeRefused, 0},
		{"BLOCKED.Test.", dnsmessage.RCodeRefused, 0},
		{"x.ads.test.", dnsmessage.RCodeRefused, 0},
		{"ads.test.", dnsmessage.RCodeSuccess, 1},        // the wildcard is below it only
		{"mail.test.", dnsmessage.RCodeSuccess, 1},       // a rule with a port refuses connections, not names
		{"notblocked.test.", dnsmessage.RCodeSuccess, 1}, // not a suffix match on the label
		{"ok.test.", dnsmessage.RCodeSuccess, 1},
	}
	for _, tt := range tests {
		rcode, _ := g.query(tt.name, dnsmessage.TypeA)
		if rcode != tt.rcode {
			t.Errorf("%s: rcode %v, want %v", tt.name, rcode, tt.rcode)
		}
		if got := r.count(strings.ToLower(tt.name)); got != tt.asked {
			t.Errorf("%s: resolver asked %d times, want %d", tt.name, got, tt.asked)
		}
	}
	// mail.test resolved, so its address is refused on port 25 only.
	g.mustRefuse(netip.MustParseAddrPort("203.0.113.4:25"))
	n.Close()
	if s := n.Stats(); s.DNSRefused != 3 || s.DNSQueries != uint64(len(tests)) {
		t.Errorf("stats = %+v, want 3 refused of %d questions", s, len(tests))
	}
	counts := make(map[string]int) // by name
	for _, d := range denials {
		switch d.Proto {
		case "dns":
			if d.Reason != ReasonDenyRule || d.Dest.IsValid() {
				t.Errorf("dns denial = %+v", d)
			}
		case "tcp":
			if d.Dest.Port() != 25 || d.Rule != "mail.test:25" {
				t.Errorf("tcp denial = %+v, want one by mail.test:25", d)
			}
		}
		counts[d.Proto+" "+d.Name] += d.Count
	}
	// The two questions for blocked.test (case folded) are one key.
	want := map[string]int{"dns blocked.test": 2, "dns x.ads.test": 1, "tcp mail.test": 1}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("denials by name = %v, want %v", counts, want)
	}
}

func TestDNSAnswers(t *testing.T) {
	many := make([]netip.Addr, 40)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)})
	}
	r := &fakeResolver{
		answers: map[string][]netip.Addr{
			"many.test.":  many,
			"mixed.test.": {netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("::ffff:203.0.113.9")},
		},
		fail: map[string]error{"broken.test.": errors.New("resolver down")},
	}
	n := newTestNetwork(t, Policy{}, Options{Resolver: r, Hosts: map[string][]netip.Addr{"host.test": {hostLoopback}}})
	g := newTestGuest(t)
	g.plug(n)
	tests := []struct {
		name  string
		qtype dnsmessage.Type
		rcode dnsmessage.RCode
		n     int
	}{
		{"many.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, MaxDNSAnswers},
		{"mixed.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, 1},
		{"host.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, 1},
		{"host.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, 0},
		{"host.test.", dnsmessage.TypeMX, dnsmessage.RCodeSuccess, 0},
		{"missing.test.", dnsmessage.TypeA, dnsmessage.RCodeNameError, 0},
		{"broken.test.", dnsmessage.TypeA, dnsmessage.RCodeServerFailure, 0},
	}
	for _, tt := range tests {
		rcode, addrs := g.query(tt.name, tt.qtype)
		if rcode != tt.rcode || len(addrs) != tt.n {
			t.Errorf("%s %v = %v with %d answers, want %v with %d", tt.name, tt.qtype, rcode, len(addrs), tt.rcode, tt.n)
		}
	}
	if _, addrs := g.query("host.test.", dnsmessage.TypeA); len(addrs) != 1 || addrs[0] != gatewayAddr {
		t.Errorf("host.test = %v, want the gateway for 127.0.0.1", addrs)
	}
	if r.count("host.test.") != 0 {
		t.Error("a Hosts name went to the resolver")
	}
	// Remembered: the table holds the host-side addresses.
	if got := n.names.lookup(hostLoopback, time.Now()); len(got) != 1 || got[0] != "host.test" {
		t.Errorf("names of 127.0.0.1 = %q", got)
	}
}

func TestDialGuest(t *testing.T) {
	n := newTestNetwork(t, Policy{}, Options{})
	g := newTestGuest(t)
	g.plug(n)
	l, err := gonet.ListenTCP(g.stack, tcpip.FullAddress{NIC: 1, Addr: addr4(guestAddr), Port: 9222}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "from %s: ", c.RemoteAddr())
				io.Copy(c, c)
			}()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := n.DialGuest(ctx, 9222)
	if err != nil {
		t.Fatalf("DialGuest: %v", err)
	}
	defer c.Close()
	io.WriteString(c, "ping\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(line, "from 10.0.2.2:") || !strings.HasSuffix(line, ": ping\n") {
		t.Errorf("guest answered %q, want it to see the gateway", line)
	}

	// A port where the guest listens not is refused, as an unavailable
	// guest service.
	_, err = n.DialGuest(ctx, 9223)
	if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), (&tcpip.ErrConnectionRefused{}).String()) {
		t.Errorf("DialGuest to a closed port: %v, want refused and ErrUnavailable", err)
	}
	if _, err := n.DialGuest(ctx, 0); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("DialGuest port 0: %v, want ErrInvalid", err)
	}
}

func TestReattach(t *testing.T) {
	port := hostServer(t, "again")
	url := fmt.Sprintf("http://%s/", gw(port))
	n := newTestNetwork(t, mustPolicy(t, []string{"127.0.0.1"}, nil), Options{})
	g := newTestGuest(t)

	unplug := g.plug(n)
	g.mustGet(url, "again")
	// One attachment at a time.
	a, b := net.Pipe()
	defer b.Close()
	if err := n.Attach(context.Background(), a); !errors.Is(err, ErrAttached) {
		t.Errorf("second Attach = %v, want ErrAttached", err)
	}
	if err := unplug(); err != nil {
		t.Fatalf("Attach after the peer closed = %v, want nil", err)
	}

	g.plug(n)
	g.mustGet(url, "again")
	if s := n.Stats(); s.Attachments != 2 || s.Allowed != 2 {
		t.Errorf("stats = %+v, want 2 attachments, 2 allowed", s)
	}
}

func TestAttachUnixSocket(t *testing.T) {
	// As in production: QEMU is the stream server on a unix socket, the
	// Network connects as a client.
	path := filepath.Join(t.TempDir(), "net.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Skipf("unix sockets: %v", err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	port := hostServer(t, "over a socket")
	n := newTestNetwork(t, mustPolicy(t, []string{"127.0.0.1"}, nil), Options{})
	client, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGuest(t)
	unplug := g.plugConns(n, client, <-accepted)
	g.mustGet(fmt.Sprintf("http://%s/", gw(port)), "over a socket")
	if err := unplug(); err != nil {
		t.Errorf("Attach = %v, want nil when QEMU closes", err)
	}
}

func TestAttachRejectsOversizedFrame(t *testing.T) {
	n := newTestNetwork(t, Policy{}, Options{})
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- n.Attach(context.Background(), a) }()
	binary.Write(b, binary.BigEndian, uint32(MaxFrameSize+1))
	select {
	case err := <-done:
		if !errors.Is(err, errFrameTooLarge) {
			t.Errorf("Attach = %v, want the frame too large", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Attach did not end")
	}
	b.Close()
}

func TestAttachEndsWithContext(t *testing.T) {
	n := newTestNetwork(t, Policy{}, Options{})
	a, b := net.Pipe()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Attach(ctx, a) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Attach = %v, want context.Canceled", err)
	}
	// And a closed Network refuses.
	n.Close()
	c, d := net.Pipe()
	defer d.Close()
	if err := n.Attach(context.Background(), c); !errors.Is(err, ErrClosed) {
		t.Errorf("Attach after Close = %v, want ErrClosed", err)
	}
	if _, err := n.DialGuest(context.Background(), 80); !errors.Is(err, ErrClosed) {
		t.Errorf("DialGuest after Close = %v, want ErrClosed", err)
	}
}

func TestSetPolicy(t *testing.T) {
	echo := hostEcho(t)
	n := newTestNetwork(t, mustPolicy(t, []string{"127.0.0.1"}, nil), Options{})
	g := newTestGuest(t)
	g.plug(n)
	open, terr := g.connect(gw(echo))
	if terr != nil {
		t.Fatalf("connect: %s", terr)
	}
	defer open.Close()

	n.SetPolicy(Policy{})
	g.mustRefuse(gw(echo))
	// The connection opened before stays open.
	mustEcho(t, open, "still here")

	n.SetPolicy(mustPolicy(t, []string{fmt.Sprintf("127.0.0.1:%d", echo)}, nil))
	c, terr := g.connect(gw(echo))
	if terr != nil {
		t.Fatalf("connect after allowing again: %s", terr)
	}
	c.Close()
	if got := n.Policy().Allow[0].String(); got != fmt.Sprintf("127.0.0.1:%d", echo) {
		t.Errorf("Policy() allow = %q", got)
	}
}

// hostEcho is a TCP echo server on the host's loopback.
func hostEcho(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				io.Copy(c, c)
			})
		}
	})
	return netip.MustParseAddrPort(l.Addr().String()).Port()
}

func mustEcho(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(testTimeout))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read echo: %v", err)
	}
	if string(buf) != msg {
		t.Fatalf("echo = %q, want %q", buf, msg)
	}
}

func TestOnDenyCoalesced(t *testing.T) {
	var mu sync.Mutex
	var denials []Denial
	n := newTestNetwork(t, Policy{}, Options{
		DenyInterval: time.Hour, // only the first at once, the rest at Close
		OnDeny: func(d Denial) {
			mu.Lock()
			denials = append(denials, d)
			mu.Unlock()
		},
	})
	g := newTestGuest(t)
	g.plug(n)
	const tries = 30
	for i := range tries {
		g.mustRefuse(netip.AddrPortFrom(netip.MustParseAddr("10.9.9.9"), uint16(8000+i%3)))
	}
	n.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(denials) != 2 {
		t.Fatalf("OnDeny called %d times: %+v; want 2", len(denials), denials)
	}
	if denials[0].Count != 1 || denials[1].Count != tries-1 {
		t.Errorf("counts %d and %d, want 1 and %d", denials[0].Count, denials[1].Count, tries-1)
	}
	if d := denials[0]; d.Dest.Addr() != netip.MustParseAddr("10.9.9.9") || d.Reason != ReasonBlocked || d.Time.IsZero() {
		t.Errorf("first denial = %+v", d)
	}
	if s := n.Stats(); s.Denied != tries || s.DenialsUnreported != 0 {
		t.Errorf("stats = %+v, want %d denied, none unreported", s, tries)
	}
}

func TestConnectionLimit(t *testing.T) {
	echo := hostEcho(t)
	var mu sync.Mutex
	var reasons []Reason
	n := newTestNetwork(t, mustPolicy(t, []string{"127.0.0.1"}, nil), Options{
		MaxConns: 2,
		OnDeny: func(d Denial) {
			mu.Lock()
			reasons = append(reasons, d.Reason)
			mu.Unlock()
		},
	})
	g := newTestGuest(t)
	g.plug(n)
	var open []net.Conn
	for range 2 {
		c, err := g.connect(gw(echo))
		if err != nil {
			t.Fatalf("connect: %s", err)
		}
		mustEcho(t, c, "x")
		open = append(open, c)
	}
	g.mustRefuse(gw(echo))
	if s := n.Stats(); s.Limited != 1 || s.Active != 2 {
		t.Errorf("stats = %+v, want 1 limited, 2 active", s)
	}
	// A closed connection makes room.
	open[0].Close()
	waitFor(t, "a connection to end", func() bool { return n.Stats().Active < 2 })
	c, err := g.connect(gw(echo))
	if err != nil {
		t.Fatalf("connect after one closed: %s", err)
	}
	c.Close()
	open[1].Close()
	n.Close()
	if len(reasons) != 1 || reasons[0] != ReasonLimit {
		t.Errorf("denial reasons = %v, want [%s]", reasons, ReasonLimit)
	}
}

func TestIdleConnectionCloses(t *testing.T) {
	echo := hostEcho(t)
	n := newTestNetwork(t, mustPolicy(t, []string{"127.0.0.1"}, nil), Options{IdleTimeout: 200 * time.Millisecond})
	g := newTestGuest(t)
	g.plug(n)
	c, terr := g.connect(gw(echo))
	if terr != nil {
		t.Fatalf("connect: %s", terr)
	}
	defer c.Close()
	mustEcho(t, c, "busy")
	// Idle now: the Network closes it, and the guest reads its end.
	c.SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("read on an idle connection = %v, want it closed by the Network", err)
	}
	waitFor(t, "the splice to end", func() bool { return n.Stats().Active == 0 })
}

func TestStats(t *testing.T) {
	port := hostServer(t, strings.Repeat("x", 100000))
	n := newTestNetwork(t, mustPolicy(t, []string{"127.0.0.1"}, nil), Options{Hosts: map[string][]netip.Addr{"h.test": {hostLoopback}}})
	g := newTestGuest(t)
	g.plug(n)
	if _, err := g.get(fmt.Sprintf("http://h.test:%d/", port)); err != nil {
		t.Fatal(err)
	}
	g.mustRefuse(netip.MustParseAddrPort("10.3.3.3:22"))
	waitFor(t, "the splice to end", func() bool { return n.Stats().Active == 0 })
	s := n.Stats()
	if s.Allowed != 1 || s.Denied != 1 || s.DNSQueries < 1 || s.BytesToGuest < 100000 || s.BytesToHost == 0 ||
		s.FramesIn == 0 || s.FramesOut == 0 || s.Attachments != 1 {
		t.Errorf("stats = %+v", s)
	}
}

func TestOtherUDPUnreachable(t *testing.T) {
	n := newTestNetwork(t, Policy{}, Options{})
	g := newTestGuest(t)
	g.plug(n)
	raddr := g.full(netip.MustParseAddrPort("203.0.113.1:123"))
	c, err := gonet.DialUDP(g.stack, nil, &raddr, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	unreachable := g.stack.Stats().ICMP.V4.PacketsReceived.DstUnreachable
	// Sent until answered: the first may meet an unresolved ARP.
	waitFor(t, "ICMP port unreachable", func() bool {
		c.Write([]byte("ntp?"))
		return unreachable.Value() > 0
	})
}

func TestCloseEndsGoroutines(t *testing.T) {
	// Once, so that whatever gVisor starts per process is running.
	run := func(t *testing.T) {
		echo := hostEcho(t)
		n, err := New(Config{HostAddrs: []netip.Addr{}}, mustPolicy(t, []string{"127.0.0.1"}, nil), Options{OnDeny: func(Denial) {}})
		if err != nil {
			t.Fatal(err)
		}
		g := newTestGuest(t)
		g.plug(n)
		l, err := gonet.ListenTCP(g.stack, tcpip.FullAddress{NIC: 1, Addr: addr4(guestAddr), Port: 80}, ipv4.ProtocolNumber)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			if c, err := l.Accept(); err == nil {
				defer c.Close()
				io.Copy(io.Discard, c)
			}
		}()
		// An open splice, an open connection into the guest, a denial.
		c, terr := g.connect(gw(echo))
		if terr != nil {
			t.Fatalf("connect: %s", terr)
		}
		defer c.Close()
		mustEcho(t, c, "open")
		in, err := n.DialGuest(context.Background(), 80)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		g.mustRefuse(netip.MustParseAddrPort("10.4.4.4:1"))
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		if err := n.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		// The link is gone, so the guest cannot be told; the splice is.
		if s := n.Stats(); s.Active != 0 {
			t.Errorf("%d connections active after Close", s.Active)
		}
	}
	t.Run("warm", run)
	before := runtime.NumGoroutine()
	for settled := 0; settled < 5; settled++ { // what the warm run left is ending
		time.Sleep(20 * time.Millisecond)
		if now := runtime.NumGoroutine(); now != before {
			before, settled = now, 0
		}
	}
	t.Run("measured", run)
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// waitFor polls cond until it holds or testTimeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("timed out waiting for %s\n%s", what, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

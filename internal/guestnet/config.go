package guestnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// Defaults: slirp's addresses, so a guest image configured statically for
// QEMU's user network works unchanged.
const (
	DefaultGuestMAC   = "52:54:00:12:34:56"
	DefaultGatewayMAC = "52:55:0a:00:02:02"
	DefaultGuest      = "10.0.2.15/24"
	DefaultGateway    = "10.0.2.2"
	DefaultDNS        = "10.0.2.3"
	DefaultMTU        = 1500

	DefaultMaxConns     = 512
	DefaultIdleTimeout  = 10 * time.Minute
	DefaultDialTimeout  = 10 * time.Second
	DefaultDenyInterval = 10 * time.Second
)

// Limits that are not options.
const (
	// ethernetHeader is an Ethernet header without VLAN tag.
	ethernetHeader = 14
	// MaxFrameSize is the largest frame Attach accepts: an Ethernet header
	// and the largest IPv4 packet.
	MaxFrameSize = ethernetHeader + 65535
	// QueueLen is how many frames wait for the link before more are dropped.
	QueueLen = 1024
	// AnswerTTL is the TTL of the DNS answers given to the guest.
	AnswerTTL = 60 * time.Second
	// NameMemory is how long an answer is remembered for name rules.
	NameMemory = 10 * AnswerTTL
	// MaxRememberedAddrs bounds the addresses remembered for name rules,
	// maxNamesPerAddr the names remembered for one.
	MaxRememberedAddrs = 4096
	maxNamesPerAddr    = 8
	// MaxDNSAnswers bounds the addresses of one answer, which keeps every
	// answer inside a 512-byte UDP message.
	MaxDNSAnswers = 16
	// MaxDNSInFlight bounds the queries being resolved at once.
	MaxDNSInFlight = 32
	// dnsTimeout bounds one resolution; guests retry after about as long.
	dnsTimeout = 5 * time.Second
	// maxMTU keeps a frame within MaxFrameSize.
	maxMTU = 65535
	// minMTU is IPv4's minimum datagram every host must take.
	minMTU = 576
)

// Config is the guest network's shape. The zero value of every field means
// its default.
type Config struct {
	// GuestMAC is the guest NIC's MAC address (QEMU's -device ...,mac=).
	// The Network sends to it without asking by ARP.
	GuestMAC net.HardwareAddr
	// GatewayMAC is the MAC address the Network answers with.
	GatewayMAC net.HardwareAddr
	// Guest is the guest's address and the network's prefix.
	Guest netip.Prefix
	// Gateway is the gateway address, inside Guest's prefix; it stands for
	// the host.
	Gateway netip.Addr
	// DNS is the address DNS is served on, inside Guest's prefix.
	DNS netip.Addr
	// MTU is the IP MTU of the link; the guest NIC must use the same.
	MTU int
	// HostAddrs are the host's own interface addresses, refused by default
	// (step 3 of the policy). Nil means New collects them with HostAddrs;
	// an empty, non-nil slice means none.
	HostAddrs []netip.Addr
}

// withDefaults returns c with zero fields set to their defaults, checked.
func (c Config) withDefaults() (Config, error) {
	var err error
	if c.GuestMAC == nil {
		c.GuestMAC, _ = net.ParseMAC(DefaultGuestMAC)
	}
	if c.GatewayMAC == nil {
		c.GatewayMAC, _ = net.ParseMAC(DefaultGatewayMAC)
	}
	if !c.Guest.IsValid() {
		c.Guest = netip.MustParsePrefix(DefaultGuest)
	}
	if !c.Gateway.IsValid() {
		c.Gateway = netip.MustParseAddr(DefaultGateway)
	}
	if !c.DNS.IsValid() {
		c.DNS = netip.MustParseAddr(DefaultDNS)
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.HostAddrs == nil {
		if c.HostAddrs, err = HostAddrs(); err != nil {
			return c, err
		}
	}
	switch {
	case len(c.GuestMAC) != 6 || len(c.GatewayMAC) != 6:
		return c, fmt.Errorf("MAC addresses must be 6 bytes: %w", api.ErrInvalid)
	case c.GuestMAC[0]&1 != 0 || c.GatewayMAC[0]&1 != 0:
		return c, fmt.Errorf("MAC addresses must be unicast: %w", api.ErrInvalid)
	case !c.Guest.Addr().Is4() || !c.Gateway.Is4() || !c.DNS.Is4():
		return c, fmt.Errorf("guest, gateway and DNS must be IPv4 addresses: %w", api.ErrInvalid)
	case c.Guest.Bits() < 8 || c.Guest.Bits() > 30:
		return c, fmt.Errorf("guest prefix length %d outside 8-30: %w", c.Guest.Bits(), api.ErrInvalid)
	case !c.Guest.Contains(c.Gateway) || !c.Guest.Contains(c.DNS):
		return c, fmt.Errorf("gateway %s and DNS %s must be inside %s: %w", c.Gateway, c.DNS, c.Guest, api.ErrInvalid)
	case c.Guest.Addr() == c.Gateway || c.Guest.Addr() == c.DNS || c.Gateway == c.DNS:
		return c, fmt.Errorf("guest, gateway and DNS addresses must differ: %w", api.ErrInvalid)
	case c.MTU < minMTU || c.MTU > maxMTU:
		return c, fmt.Errorf("MTU %d outside %d-%d: %w", c.MTU, minMTU, maxMTU, api.ErrInvalid)
	}
	for _, a := range []netip.Addr{c.Guest.Addr(), c.Gateway, c.DNS} {
		if a == c.Guest.Masked().Addr() || a == lastAddr(c.Guest) {
			return c, fmt.Errorf("%s is the network or broadcast address of %s: %w", a, c.Guest, api.ErrInvalid)
		}
	}
	return c, nil
}

// lastAddr is p's broadcast address.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// HostAddrs returns the addresses of the host's network interfaces, for
// Config.HostAddrs. They change when interfaces do; a Network keeps the ones
// it was created with.
func HostAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("host interface addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		var ip net.IP
		switch a := a.(type) {
		case *net.IPNet:
			ip = a.IP
		case *net.IPAddr:
			ip = a.IP
		}
		if ad, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, ad.Unmap())
		}
	}
	return out, nil
}

// Resolver resolves host names for the guest's DNS; *net.Resolver is one.
type Resolver interface {
	// LookupNetIP is called with network "ip4".
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DialFunc opens a host connection; (*net.Dialer).DialContext is one. It is
// called with network "tcp" and an address of the form "IP:port".
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Options are a Network's collaborators and bounds. The zero value of every
// field means its default.
type Options struct {
	// Dial opens the host side of a permitted connection; by default a
	// net.Dialer. It is called with a context that ends after DialTimeout.
	Dial DialFunc
	// DialTimeout bounds one host dial (default DefaultDialTimeout).
	DialTimeout time.Duration
	// Resolver resolves names the guest asks for (default
	// net.DefaultResolver).
	Resolver Resolver
	// Hosts are static answers, checked before Resolver; names are matched
	// without regard to case or a trailing dot. An address of the loopback
	// range must be 127.0.0.1 (which the guest reaches as the gateway).
	Hosts map[string][]netip.Addr
	// MaxConns bounds the guest's connections: spliced ones and those
	// being made (default DefaultMaxConns). Past it a new connection is
	// reset and reported with ReasonLimit.
	MaxConns int
	// IdleTimeout closes a connection that moved no byte either way for
	// this long (default DefaultIdleTimeout).
	IdleTimeout time.Duration
	// OnDeny, if set, is told of refused connections and DNS questions,
	// coalesced (see Denial). It is called from one goroutine of the
	// Network's, never concurrently, and never from the packet path, so a
	// slow OnDeny delays only later reports.
	OnDeny func(Denial)
	// DenyInterval is the coalescing window of OnDeny (default
	// DefaultDenyInterval).
	DenyInterval time.Duration
	// Logger receives debug records of dials that failed and warnings of
	// broken links (default: discarded).
	Logger *slog.Logger
	// Now is the clock for remembered names and Denial.Time (default
	// time.Now).
	Now func() time.Time
}

func (o Options) withDefaults() (Options, error) {
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.Dial == nil {
		d := &net.Dialer{Timeout: o.DialTimeout}
		o.Dial = d.DialContext
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.DenyInterval == 0 {
		o.DenyInterval = DefaultDenyInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxConns < 0 || o.DialTimeout < 0 || o.IdleTimeout < 0 || o.DenyInterval < 0 {
		return o, fmt.Errorf("negative bound in options: %w", api.ErrInvalid)
	}
	hosts := make(map[string][]netip.Addr, len(o.Hosts))
	for name, addrs := range o.Hosts {
		key, err := normalizeName(name)
		if err != nil {
			return o, fmt.Errorf("hosts %q: %w", name, err)
		}
		var errs []error
		for _, a := range addrs {
			a = a.Unmap()
			if !a.IsValid() {
				errs = append(errs, fmt.Errorf("hosts %q: an invalid address: %w", name, api.ErrInvalid))
				continue
			}
			if a.IsLoopback() && a != hostLoopback {
				errs = append(errs, fmt.Errorf("hosts %q: %s: of the loopback range only %s can be reached: %w", name, a, hostLoopback, api.ErrInvalid))
			}
			hosts[key] = append(hosts[key], a)
		}
		if err := errors.Join(errs...); err != nil {
			return o, err
		}
	}
	o.Hosts = hosts
	return o, nil
}

// normalizeName returns name in lower case without a trailing dot, or an
// error if it is not a host name.
func normalizeName(name string) (string, error) {
	n := strings.ToLower(strings.TrimSuffix(name, "."))
	if err := checkName(n); err != nil {
		return "", err
	}
	return n, nil
}

// checkName reports whether n (lower case, no trailing dot) is a host name:
// dot-separated labels of letters, digits, '-' and '_', 1-63 bytes each and
// 253 in all, the last of them not all digits (which would be a mistyped
// address).
func checkName(n string) error {
	if n == "" {
		return fmt.Errorf("empty name: %w", api.ErrInvalid)
	}
	if len(n) > 253 {
		return fmt.Errorf("name longer than 253 bytes: %w", api.ErrInvalid)
	}
	labels := strings.Split(n, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("name %q: a label is empty or longer than 63 bytes: %w", n, api.ErrInvalid)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("name %q: %q is not allowed in a host name: %w", n, c, api.ErrInvalid)
			}
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" {
		return fmt.Errorf("%q is neither an address nor a host name: %w", n, api.ErrInvalid)
	}
	return nil
}

// Package guestnet is a user-mode network for one guest, run in-process on
// gVisor's netstack, with an egress policy that hvkube owns.
//
// A Network is the other end of a guest's only NIC. It needs no privilege and
// changes nothing on the host: no tap device, no firewall rule, and no
// listening socket. The guest sees a slirp-compatible network, so an image can
// configure it statically:
//
//	guest    10.0.2.15/24, MAC 52:54:00:12:34:56
//	gateway  10.0.2.2 (also the default route); it stands for the host
//	DNS      10.0.2.3, UDP port 53, served by this package
//	MTU      1500
//
// # The link
//
// Attach runs the link over a connection that carries QEMU's -netdev stream
// framing: each Ethernet frame (without FCS) is preceded by its length as a
// 4-byte big-endian integer. QEMU is the stream server (on a unix socket) and
// hvkube connects as the client; after QEMU restarts, hvkube connects again
// and calls Attach again. The stack, its addresses and remembered names
// persist across attachments; TCP connections of the old attachment survive
// only if the guest does.
//
// The guest's ARP requests for the gateway and DNS addresses are answered;
// requests for any other address are not (so a guest probing its own address
// for conflicts sees none). The Network sends to the guest's MAC address
// without asking by ARP, so QEMU's NIC must have Config.GuestMAC. IPv4
// packets from any source address but the guest's are dropped, and so are
// frames of other types than ARP and IPv4 (IPv6 among them: the guest
// network is IPv4 only).
//
// # Egress
//
// Every TCP connection the guest opens, to any address, is received by the
// Network and judged by its Policy before the handshake completes. A
// permitted connection is spliced to a host connection made with
// Options.Dial; a refused one is answered with a TCP reset at once, and
// one the host cannot make as soon as the dial fails, so the guest's
// connect fails with "connection refused" rather than a timeout. A connection to the gateway address and
// port P goes to the host's 127.0.0.1:P, and is judged as a connection to
// 127.0.0.1:P. Connections to other addresses of the guest network
// (10.0.2.0/24 by default, DNS address included) are refused.
//
// A connection's destination is its address and port, plus the names the
// guest resolved to that address through this package's DNS (see below).
// Rules are checked in this order, and the first step that decides wins:
//
//  1. a Deny rule that matches refuses;
//  2. an Allow rule that matches permits, except that a name rule does
//     not open a destination of step 3 through a name's DNS answer (only
//     through a name of Options.Hosts): a name opens only what its public
//     answer is, so a name that resolves, or is re-pointed, to loopback,
//     the metadata address or the host does not reach it;
//  3. a destination in the built-in blocked set is refused: every range of
//     IANA's special-purpose registries that is not globally reachable or
//     leads to one (the blocked variable: loopback, link-local, private,
//     shared address space, documentation, benchmarking, multicast,
//     reserved, NAT64, 6to4, …), and the host's own interface addresses
//     (Config.HostAddrs);
//  4. when Policy.Allow is empty, the connection is permitted (the public
//     internet); when it is not empty, the connection is refused (only what
//     is allowed).
//
// So an address or CIDR Allow rule is how a guest reaches something in the
// blocked set (a service on the host's loopback, a private range), and a
// Deny rule takes away what an Allow rule or the default would give.
//
// A rule is one of:
//
//	10.0.0.0/8           a CIDR prefix, written with its network's address
//	127.0.0.1            one address (an IPv4-mapped one is taken as IPv4)
//	::1, fc00::/7        IPv6 likewise
//	127.0.0.1:8443       an address or prefix with a port (1-65535)
//	10.0.0.0/8:443
//	[::1]:80             IPv6 with a port takes brackets
//	[fc00::/7]:443
//	example.com          a host name, exactly (neither case nor a trailing
//	                     dot matters)
//	*.example.com        any name below example.com, at any depth, but not
//	                     example.com itself
//	example.com:443      a name or wildcard with a port
//	*.example.com:443
//
// A rule without a port matches every port. A name rule matches a connection
// when the guest resolved that name, through this package's DNS, to the
// connection's address (and the port matches). The Network remembers each
// answer it gave (address to names) for NameMemory, ten times the TTL it
// gives the guest, because browsers and resolvers cache answers and connect
// later; the table is bounded (MaxRememberedAddrs addresses of 8 names at
// most, those that expire soonest forgotten first). An address that several names resolved to carries all
// of them. A name rule therefore cannot see an address the guest obtained
// any other way: to refuse an address whatever it is called, use an address
// or CIDR rule. And a name Allow rule permits whatever its name resolves to,
// a private address included.
//
// # DNS
//
// The Network answers DNS queries on the DNS address, UDP port 53. A and
// AAAA questions of class IN are answered; a name matched by a Deny name rule
// without a port is answered REFUSED without being resolved (and reported
// as a Denial of Proto "dns"). Otherwise
// Options.Hosts is checked first, then Options.Resolver (by default the
// host's resolver). At most MaxDNSAnswers addresses are given, with a TTL of
// AnswerTTL. An answer of 127.0.0.1 is given to the guest as the gateway
// address, since that is where the guest reaches the host's loopback. AAAA
// and every other type are answered with no records (the guest network has
// no IPv6), other opcodes NOTIMP, malformed queries FORMERR. Answers are not
// filtered: a name may resolve to a private address, and the connection to
// it is judged by the policy. DNS over TCP is not served (the connection is
// refused).
//
// # What is not carried
//
// UDP other than DNS is not forwarded: a datagram to any other address or
// port is answered with ICMP port unreachable, which fails a connected
// socket fast. ICMP echo is answered for the gateway and DNS addresses and
// dropped for every other. Nothing comes in from outside: the only way into
// the guest is DialGuest, a TCP connection from the gateway address that
// hvkube opens in-process (the port forward).
//
// # Bounds
//
// Frames are at most MaxFrameSize bytes (a larger length ends the
// attachment, since the stream cannot be trusted after it); the outbound
// queue holds QueueLen frames and drops past it while the link is slow or
// detached; Options.MaxConns bounds the guest's connections being made or
// spliced (past it a new connection is reset and reported with
// ReasonLimit; DialGuest's connections are hvkube's and not counted); a
// connection that moves no byte in either direction for Options.IdleTimeout
// is closed; Options.DialTimeout bounds a host dial; DNS queries are at most
// 512 bytes and are resolved at most MaxDNSInFlight at a time (more are
// dropped, and the guest asks again); remembered names are bounded as
// above. OnDeny is called for at most 16 new denials at once and 64
// coalesced reports per Options.DenyInterval; the rest are counted in
// Stats.DenialsUnreported, and every denial in Stats.Denied or
// Stats.DNSRefused.
package guestnet

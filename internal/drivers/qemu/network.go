package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
	"github.com/hvkube/hvkube/internal/guestnet"
)

// Guest networks. A template built with a network (its spec.network.mode
// nat, the default, and an image that declares a network in image.json)
// has a virtio NIC in its snapshot, and so has every QEMU started from it:
// spares, clones started on demand, restores and cold-boot fallbacks. The
// NIC's frames go to a unix socket (net.sock in the VM's run directory) on
// which QEMU is a stream server; each such QEMU process has one
// guestnet.Network of its own in this process (a link), connected to that
// socket as its client and attached again whenever QEMU closes the stream,
// for as long as the process lives. The link ends with the process (kill,
// quit: stop, save, delete, the reset that swaps in a spare), or when the
// backend closes (the VMs keep running; the next backend's adoption
// connects new links to them).
//
// A link starts with noEgress and no DNS answers: a template build's and a
// spare's guest reach nothing. The sandbox that takes the process gives it
// its own policy (connectLink) and hears its denials. A sandbox with mode
// none on a template with a NIC keeps the NIC (its snapshot has it) and
// reaches nothing. A snapshot without a NIC (mode none, an image that
// declares no network, or built before guest networks) gives its clones
// none, whatever their spec says: a QEMU whose devices differ from its
// snapshot's cannot load it.

// netSocketName is the stream socket of a VM's NIC in its run directory.
const netSocketName = "net.sock"

// linkDialBound bounds the wait for a QEMU just started to make its
// net.sock (it makes it before its monitor answers, so the first try
// normally connects).
const linkDialBound = 10 * time.Second

// linkRedialMax is the longest pause between attempts to connect again
// after QEMU closed the stream.
const linkRedialMax = time.Second

// noEgress refuses every connection.
var noEgress = func() guestnet.Policy {
	p, err := guestnet.ParsePolicy(nil, []string{"0.0.0.0/0", "::/0"})
	if err != nil {
		panic(err)
	}
	return p
}()

// egressOf is the policy of a sandbox's network n, and whether its DNS
// questions are answered. Mode none reaches nothing. Rules that do not
// parse (the API checks them at admission) give noEgress and the error.
func egressOf(n api.Network) (pol guestnet.Policy, dns bool, err error) {
	if n.Mode == api.NetworkNone {
		return noEgress, false, nil
	}
	pol, err = guestnet.ParsePolicy(n.Egress.Allow, n.Egress.Deny)
	if err != nil {
		return noEgress, false, fmt.Errorf("spec.network.egress: %w", err)
	}
	return pol, true, nil
}

// config is the guest network's configuration for an image's declared
// NIC. Its errors wrap api.ErrInvalid.
func (n *imageNetwork) config(hostAddrs []netip.Addr) (guestnet.Config, error) {
	if n == nil {
		return guestnet.Config{HostAddrs: hostAddrs}, nil
	}
	if n.Model != "" && n.Model != "virtio-net-pci" {
		return guestnet.Config{}, fmt.Errorf("image.json network.model %q: hvkube gives guests a virtio-net-pci NIC: %w", n.Model, api.ErrInvalid)
	}
	cfg := guestnet.Config{HostAddrs: hostAddrs}
	var err error
	if n.MAC != "" {
		if cfg.GuestMAC, err = net.ParseMAC(n.MAC); err != nil {
			return cfg, fmt.Errorf("image.json network.mac %q: %w", n.MAC, api.ErrInvalid)
		}
	}
	if n.Address != "" {
		a, err := netip.ParseAddr(n.Address)
		if err != nil || n.PrefixLength <= 0 {
			return cfg, fmt.Errorf("image.json network.address %q/%d: %w", n.Address, n.PrefixLength, api.ErrInvalid)
		}
		cfg.Guest = netip.PrefixFrom(a, n.PrefixLength)
	}
	for _, f := range []struct {
		name, v string
		to      *netip.Addr
	}{{"gateway", n.Gateway, &cfg.Gateway}, {"dns", n.DNS, &cfg.DNS}} {
		if f.v == "" {
			continue
		}
		if *f.to, err = netip.ParseAddr(f.v); err != nil {
			return cfg, fmt.Errorf("image.json network.%s %q: %w", f.name, f.v, api.ErrInvalid)
		}
	}
	return cfg, nil
}

// mac is the NIC's MAC address: the image's, else the guest network's
// default.
func (n *imageNetwork) mac() string {
	if n != nil && n.MAC != "" {
		return n.MAC
	}
	return guestnet.DefaultGuestMAC
}

// address is the guest's address: the image's, else the guest network's
// default.
func (n *imageNetwork) address() string {
	if n != nil && n.Address != "" {
		return n.Address
	}
	return strings.SplitN(guestnet.DefaultGuest, "/", 2)[0]
}

// checkHosts normalizes Config.NetworkHosts: names in lower case without
// a trailing dot, each a host name (no wildcard, no port); addresses
// valid, the loopback range only as 127.0.0.1 (which the guest reaches as
// its gateway).
func checkHosts(in map[string][]netip.Addr) (map[string][]netip.Addr, error) {
	out := make(map[string][]netip.Addr, len(in))
	for name, addrs := range in {
		key := strings.TrimSuffix(strings.ToLower(name), ".")
		r, err := guestnet.ParseRule(key)
		if err != nil || !r.IsName() || r.Port() != 0 || strings.HasPrefix(key, "*") {
			return nil, fmt.Errorf("network hosts: %q is not a host name: %w", name, api.ErrInvalid)
		}
		for _, a := range addrs {
			a = a.Unmap()
			if !a.IsValid() || a.IsLoopback() && a != netip.MustParseAddr("127.0.0.1") {
				return nil, fmt.Errorf("network hosts: %q: %s: want an address (of the loopback range only 127.0.0.1): %w", name, a, api.ErrInvalid)
			}
			out[key] = append(out[key], a)
		}
	}
	return out, nil
}

// errNoDNS answers a question while a link's DNS is shut (SERVFAIL to the
// guest, which a resolver does not remember as it does NXDOMAIN).
var errNoDNS = errors.New("no DNS answers for this guest")

// dnsGate resolves the guest's questions while it is open: the backend's
// static hosts first, then the host's resolver. Shut, it answers nothing:
// a template build's and a spare's guest learn no names.
type dnsGate struct {
	open  atomic.Bool
	hosts map[string][]netip.Addr // read only
	next  guestnet.Resolver
}

// LookupNetIP implements guestnet.Resolver; host comes lower case with a
// trailing dot.
func (g *dnsGate) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if !g.open.Load() {
		return nil, errNoDNS
	}
	if addrs, ok := g.hosts[strings.TrimSuffix(strings.ToLower(host), ".")]; ok {
		return addrs, nil
	}
	return g.next.LookupNetIP(ctx, network, host)
}

// denials are a sandbox's egress denials: how many, and the latest. They
// outlive its QEMU processes (each link tells the sandbox that owns it).
type denials struct {
	mu    sync.Mutex // guards the following fields
	count int64
	last  *api.NetworkDenial
}

func (d *denials) add(dn guestnet.Denial) {
	rec := &api.NetworkDenial{Time: dn.Time.UTC(), Destination: dn.Dest.String(), Name: dn.Name, Reason: string(dn.Reason), Rule: dn.Rule}
	if dn.Proto == "dns" {
		rec.Destination = dn.Name + " (DNS)"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.count += int64(max(dn.Count, 1))
	if d.last == nil || !rec.Time.Before(d.last.Time) {
		d.last = rec
	}
}

// get returns the count and a copy of the latest denial.
func (d *denials) get() (int64, *api.NetworkDenial) {
	if d == nil {
		return 0, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		return d.count, nil
	}
	last := *d.last
	return d.count, &last
}

// link is the guest network of one QEMU process and its connection to
// the process's net.sock.
type link struct {
	nw    *guestnet.Network
	sock  *pathRef // net.sock: moves with a spare's files
	dns   *dnsGate
	owner atomic.Pointer[denials] // nil for a build or a spare
	log   *slog.Logger

	cancel context.CancelFunc
	done   chan struct{} // closed when run has ended and nw is closed
}

// startLink creates p's guest network for its image's declared NIC, with
// noEgress and no DNS, connects it to sock (waiting up to linkDialBound
// for QEMU to make it) and keeps it attached while p lives. Close ends it.
func (b *Backend) startLink(ctx context.Context, p *proc, sock string, in *imageNetwork) (*link, error) {
	cfg, err := in.config(b.hostAddrs)
	if err != nil {
		return nil, err
	}
	l := &link{sock: &pathRef{path: sock}, dns: &dnsGate{hosts: b.netHosts, next: b.resolver}, log: b.log.With("pid", p.pid)}
	l.nw, err = guestnet.New(cfg, noEgress, guestnet.Options{Resolver: l.dns, OnDeny: l.onDeny, Logger: l.log})
	if err != nil {
		return nil, err
	}
	conn, err := dialLink(ctx, sock, p)
	if err != nil {
		l.nw.Close()
		return nil, fmt.Errorf("connect the guest network to QEMU: %w", err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan struct{})
	go l.run(lctx, p, conn)
	return l, nil
}

// dialLink connects to sock, trying again until QEMU has made it, for up
// to linkDialBound or while p lives.
func dialLink(ctx context.Context, sock string, p *proc) (net.Conn, error) {
	deadline := time.Now().Add(linkDialBound)
	var d net.Dialer
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		c, err := d.DialContext(ctx, "unix", sock)
		if err == nil {
			return c, nil
		}
		if !p.alive() {
			return nil, errors.New("qemu exited")
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(delay)
	}
}

// run attaches the network to conn, and after QEMU closed the stream
// connects and attaches again, until the link is closed or p has ended;
// then it closes the network.
func (l *link) run(ctx context.Context, p *proc, conn net.Conn) {
	defer close(l.done)
	defer l.nw.Close()
	for {
		err := l.nw.Attach(ctx, conn)
		if ctx.Err() != nil || errors.Is(err, guestnet.ErrClosed) {
			return
		}
		if err != nil {
			l.log.Warn("guest network link broke; connecting again", "err", err)
		}
		conn = nil
		var d net.Dialer
		for delay := time.Millisecond; conn == nil; delay = min(2*delay, linkRedialMax) {
			if !p.alive() {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			conn, _ = d.DialContext(ctx, "unix", l.sock.get())
		}
	}
}

// onDeny tells the sandbox that owns the link of a denial.
func (l *link) onDeny(d guestnet.Denial) {
	if o := l.owner.Load(); o != nil {
		o.add(d)
	}
}

// close ends the link and its network and waits for them, the last
// denials reported. It is idempotent; a nil link does nothing.
func (l *link) close() {
	if l == nil {
		return
	}
	l.cancel()
	<-l.done
}

// network is the sandbox's network spec (nat by default, as for a
// sandbox recorded before guest networks).
func (v *vm) network() api.Network {
	if v.meta.Network != nil {
		return *v.meta.Network
	}
	return api.EffectiveNetwork(api.Network{}, api.Network{})
}

// connectLink hands v's process's guest network to v: its egress policy
// and DNS, and its denials from now on. Create checked the rules; a
// record whose rules do not parse reaches nothing.
func (v *vm) connectLink() {
	if v.p == nil || v.p.link == nil {
		return
	}
	pol, dns, _ := egressOf(v.network())
	l := v.p.link
	l.nw.SetPolicy(pol)
	l.dns.open.Store(dns)
	l.owner.Store(v.denials)
}

// networkInfo is what Inspect reports of v's network.
func (v *vm) networkInfo() *backend.NetworkInfo {
	info := &backend.NetworkInfo{Mode: api.NetworkNone}
	info.Denied, info.LastDenied = v.denials.get()
	want := v.network()
	switch {
	case want.Mode == api.NetworkNone:
	case !v.tpl.Network || v.tpl.Image.Network == nil:
		info.Unavailable = fmt.Sprintf("template snapshot %s has no network device (it was built before guest networks, with network mode none, or from an image that declares no network): rebuild the template", v.meta.TemplateID)
	default:
		info.Mode, info.Address = api.NetworkNAT, v.tpl.Image.Network.address()
	}
	return info
}

// DialPort implements backend.PortDialer: a TCP connection from the
// guest network's gateway to port on the guest's address, made inside
// this process (guestnet.Network.DialGuest), with no listener on the host.
func (b *Backend) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	v, err := b.rlockVM(id)
	if err != nil {
		return nil, err
	}
	if port < 1 || port > 65535 {
		v.mu.RUnlock()
		return nil, api.Invalid("port", "%d is not a TCP port (1..65535)", port)
	}
	l, err := b.dialableLocked(ctx, v)
	v.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	c, err := l.nw.DialGuest(ctx, uint16(port))
	switch {
	case err == nil:
		return c, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("dial port %d of sandbox %s: %w", port, id, ctx.Err())
	case errors.Is(err, guestnet.ErrClosed):
		return nil, fmt.Errorf("dial port %d of sandbox %s: its QEMU ended: %w", port, id, api.ErrConflict)
	}
	// Nothing listens there, or the guest does not answer: an error of no
	// category. guestnet's wraps api.ErrUnavailable besides the dial's own
	// error, which would read as the host's fault; the dial's is kept.
	if multi, ok := err.(interface{ Unwrap() []error }); ok && len(multi.Unwrap()) > 0 {
		err = multi.Unwrap()[0]
	}
	return nil, fmt.Errorf("dial port %d of sandbox %s: %v", port, id, err)
}

// dialableLocked returns v's link if DialPort can use it: v runs, and has
// a network.
func (b *Backend) dialableLocked(ctx context.Context, v *vm) (*link, error) {
	if err := v.needProcess(); err != nil {
		return nil, err
	}
	why := ""
	switch info := v.networkInfo(); {
	case info.Unavailable != "":
		why = info.Unavailable
	case info.Mode != api.NetworkNAT:
		why = "its network mode is none"
	case v.p.link == nil:
		why = "its guest network could not be connected to its QEMU (the server's log says why)"
	}
	if why != "" {
		return nil, fmt.Errorf("sandbox %s has no network to reach its ports over: %s: %w", v.id, why, api.ErrUnsupported)
	}
	state := qmp.StatePaused
	if !v.paused {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := v.p.mon.Status(sctx)
		cancel()
		if err != nil {
			return nil, err
		}
		state = st.Status
	}
	if state != qmp.StateRunning {
		return nil, fmt.Errorf("sandbox %s is %s, not running: resume it first: %w", v.id, state, api.ErrConflict)
	}
	return v.p.link, nil
}

package guestnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// forward handles the guest's SYN to any address: it judges the
// destination and either resets at once, or dials the host, completes the
// handshake and splices. gVisor calls it on a goroutine of its own per
// connection attempt.
func (n *Network) forward(r *tcp.ForwarderRequest) {
	if !n.enter() {
		r.Complete(true)
		return
	}
	defer n.wg.Done()
	id := r.ID()
	dst, v, names := n.judge(netip.AddrPortFrom(fromAddr(id.LocalAddress), id.LocalPort))
	if !v.allow {
		n.refuse("tcp", dst, names, v)
		r.Complete(true)
		return
	}
	if n.conns.Add(1) > int64(n.opts.MaxConns) {
		n.conns.Add(-1)
		n.stats.limited.Add(1)
		n.refuse("tcp", dst, names, verdict{reason: ReasonLimit, rule: fmt.Sprintf("%d connections", n.opts.MaxConns)})
		r.Complete(true)
		return
	}
	defer n.conns.Add(-1)
	n.stats.allowed.Add(1)

	ctx, cancel := context.WithTimeout(n.ctx, n.opts.DialTimeout)
	host, err := n.opts.Dial(ctx, "tcp", dst.String())
	cancel()
	if err != nil {
		n.stats.dialFailed.Add(1)
		n.opts.Logger.Debug("guest connection: host dial failed", "dest", dst, "err", err)
		r.Complete(true)
		return
	}
	if n.ctx.Err() != nil {
		host.Close()
		r.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		// The guest went away during the handshake.
		host.Close()
		r.Complete(true)
		return
	}
	r.Complete(false)
	n.splice(gonet.NewTCPConn(&wq, ep), host)
}

// judge maps the guest's destination to the one the host dials (the gateway
// to the host's loopback) and decides on it.
func (n *Network) judge(dst netip.AddrPort) (netip.AddrPort, verdict, []string) {
	a := dst.Addr()
	switch {
	case a == n.cfg.Gateway:
		dst = netip.AddrPortFrom(hostLoopback, dst.Port())
	case n.cfg.Guest.Contains(a):
		return dst, verdict{reason: ReasonGuestNetwork, rule: n.cfg.Guest.Masked().String()}, nil
	}
	names := n.names.lookup(dst.Addr(), n.opts.Now())
	return dst, n.policy.Load().decide(dst, names, n.static(dst.Addr(), names), n.cfg.HostAddrs), names
}

// static returns those of names that Options.Hosts maps to a.
func (n *Network) static(a netip.Addr, names []string) []string {
	var out []string
	a = a.Unmap()
	for _, name := range names {
		if slices.Contains(n.opts.Hosts[name], a) {
			out = append(out, name)
		}
	}
	return out
}

// refuse counts and reports a refused connection.
func (n *Network) refuse(proto string, dst netip.AddrPort, names []string, v verdict) {
	n.stats.denied.Add(1)
	d := Denial{Time: n.opts.Now(), Proto: proto, Dest: dst, Reason: v.reason, Rule: v.rule}
	if len(names) > 0 {
		d.Name = names[0]
	}
	n.report.report(d)
}

var spliceBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// splice copies both ways between the guest's and the host's connection
// until both directions ended, either failed, the connection was idle for
// Options.IdleTimeout, or the Network closed. It closes both.
func (n *Network) splice(guest, host net.Conn) {
	closeBoth := func() {
		guest.Close()
		host.Close()
	}
	stop := context.AfterFunc(n.ctx, closeBoth)
	defer stop()
	var last atomic.Int64 // unix nanoseconds of the last byte either way
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Go(func() { n.copyIdle(host, guest, &last, &n.stats.bytesToHost, closeBoth) })
	n.copyIdle(guest, host, &last, &n.stats.bytesToGuest, closeBoth)
	wg.Wait()
	closeBoth()
}

// copyIdle copies src to dst. Every read and write has a deadline: a read
// that times out while the other direction moved a byte within IdleTimeout
// waits again; otherwise the connection is idle and both are closed, as
// when either side fails. At src's end, dst's write side is closed so the
// other side sees it.
func (n *Network) copyIdle(dst, src net.Conn, last *atomic.Int64, count *atomic.Uint64, closeBoth func()) {
	bp := spliceBufs.Get().(*[]byte)
	defer spliceBufs.Put(bp)
	buf := *bp
	idle := n.opts.IdleTimeout
	for {
		src.SetReadDeadline(time.Unix(0, last.Load()).Add(idle))
		nr, err := src.Read(buf)
		if nr > 0 {
			now := time.Now()
			last.Store(now.UnixNano())
			dst.SetWriteDeadline(now.Add(idle))
			nw, werr := dst.Write(buf[:nr])
			count.Add(uint64(nw))
			if werr != nil {
				closeBoth()
				return
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded) || isTimeout(err):
			if time.Since(time.Unix(0, last.Load())) < idle {
				continue
			}
			closeBoth()
			return
		case errors.Is(err, io.EOF):
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
			return
		default:
			closeBoth()
			return
		}
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

package guestnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// maxDNSMessage is the largest query read and answer sent: plain UDP DNS
// without EDNS. MaxDNSAnswers keeps every answer below it.
const maxDNSMessage = 512

// serveDNS answers the guest's questions on the DNS address until the
// Network closes. Each question is answered on a goroutine of its own, at
// most MaxDNSInFlight at once; past that a question is dropped and the
// guest's resolver asks again.
func (n *Network) serveDNS() {
	buf := make([]byte, 2*maxDNSMessage)
	for {
		nr, from, err := n.dns.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		n.stats.dnsQueries.Add(1)
		if nr > maxDNSMessage {
			n.stats.dnsDropped.Add(1)
			continue
		}
		select {
		case n.dnsSlots <- struct{}{}:
		default:
			n.stats.dnsDropped.Add(1)
			continue
		}
		if !n.enter() {
			return
		}
		query := append([]byte(nil), buf[:nr]...)
		go func() {
			defer n.wg.Done()
			defer func() { <-n.dnsSlots }()
			if resp := n.answer(query); resp != nil {
				n.dns.WriteTo(resp, from)
			}
		}()
	}
}

// answer returns the response to one query, or nil to send none.
func (n *Network) answer(query []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return reply(h, nil, dnsmessage.RCodeFormatError, nil)
	}
	if _, err := p.Question(); !errors.Is(err, dnsmessage.ErrSectionDone) {
		return reply(h, nil, dnsmessage.RCodeFormatError, nil)
	}
	if h.OpCode != 0 || q.Class != dnsmessage.ClassINET {
		return reply(h, &q, dnsmessage.RCodeNotImplemented, nil)
	}
	name, err := normalizeName(q.Name.String())
	if err != nil {
		return reply(h, &q, dnsmessage.RCodeNameError, nil)
	}
	if r, ok := n.policy.Load().denyName(name); ok {
		n.stats.dnsRefused.Add(1)
		n.report.report(Denial{Time: n.opts.Now(), Proto: "dns", Name: name, Reason: ReasonDenyRule, Rule: r.text})
		return reply(h, &q, dnsmessage.RCodeRefused, nil)
	}
	if q.Type != dnsmessage.TypeA {
		// No records: the guest network has no IPv6, and other types are
		// not served.
		return reply(h, &q, dnsmessage.RCodeSuccess, nil)
	}
	addrs, rcode := n.resolve(name)
	if rcode != dnsmessage.RCodeSuccess {
		return reply(h, &q, rcode, nil)
	}
	now := n.opts.Now()
	answers := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		n.names.remember(a, name, now, now.Add(NameMemory))
		if a == hostLoopback {
			a = n.cfg.Gateway
		}
		answers = append(answers, a)
	}
	return reply(h, &q, dnsmessage.RCodeSuccess, answers)
}

// resolve returns name's IPv4 addresses, at most MaxDNSAnswers, from
// Options.Hosts or else Options.Resolver.
func (n *Network) resolve(name string) ([]netip.Addr, dnsmessage.RCode) {
	var addrs []netip.Addr
	if hosts, ok := n.opts.Hosts[name]; ok {
		addrs = hosts
	} else {
		ctx, cancel := context.WithTimeout(n.ctx, dnsTimeout)
		defer cancel()
		// The trailing dot keeps the host's search domains out of it.
		var err error
		addrs, err = n.opts.Resolver.LookupNetIP(ctx, "ip4", name+".")
		if err != nil {
			var de *net.DNSError
			if errors.As(err, &de) && de.IsNotFound {
				return nil, dnsmessage.RCodeNameError
			}
			return nil, dnsmessage.RCodeServerFailure
		}
	}
	out := make([]netip.Addr, 0, min(len(addrs), MaxDNSAnswers))
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() && len(out) < MaxDNSAnswers {
			out = append(out, a)
		}
	}
	return out, dnsmessage.RCodeSuccess
}

// reply builds a response to h with q (if any), rcode and A records.
func reply(h dnsmessage.Header, q *dnsmessage.Question, rcode dnsmessage.RCode, answers []netip.Addr) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, maxDNSMessage), dnsmessage.Header{
		ID:                 h.ID,
		Response:           true,
		OpCode:             h.OpCode,
		RecursionDesired:   h.RecursionDesired,
		RecursionAvailable: true,
		RCode:              rcode,
	})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	if q != nil {
		if err := b.Question(*q); err != nil {
			return nil
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil
	}
	for _, a := range answers {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: uint32(AnswerTTL / time.Second)}
		if err := b.AResource(rh, dnsmessage.AResource{A: a.As4()}); err != nil {
			return nil
		}
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	return msg
}

package guestnet

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
)

// hostLoopback is the host address the gateway stands for.
var hostLoopback = netip.MustParseAddr("127.0.0.1")

// Rule is one entry of a Policy's Allow or Deny list; the package doc gives
// its forms. The zero Rule matches nothing.
type Rule struct {
	text string
	// prefix is set for address and CIDR rules.
	prefix netip.Prefix
	// name is the name of a name rule, or for a wildcard the suffix below
	// which it matches.
	name     string
	wildcard bool
	// port is 0 for every port.
	port uint16
}

// String returns the rule as it was written.
func (r Rule) String() string { return r.text }

// Port returns the rule's port, 0 when it matches every port.
func (r Rule) Port() uint16 { return r.port }

// IsName reports whether r matches by host name rather than by address.
func (r Rule) IsName() bool { return r.name != "" }

// ParseRule parses one rule. Its error wraps api.ErrInvalid and quotes the
// rule.
func ParseRule(s string) (Rule, error) {
	r, err := parseRule(strings.TrimSpace(s))
	if err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", s, err)
	}
	r.text = s
	return r, nil
}

func parseRule(s string) (Rule, error) {
	if s == "" {
		return Rule{}, fmt.Errorf("empty: %w", api.ErrInvalid)
	}
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return Rule{}, fmt.Errorf("no closing bracket: %w", api.ErrInvalid)
		}
		host, rest := s[1:end], s[end+1:]
		var port uint16
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return Rule{}, fmt.Errorf("after the brackets comes a port (:443) or nothing: %w", api.ErrInvalid)
			}
			var err error
			if port, err = parsePort(rest[1:]); err != nil {
				return Rule{}, err
			}
		}
		if !strings.Contains(host, ":") {
			return Rule{}, fmt.Errorf("brackets are for IPv6 addresses: %w", api.ErrInvalid)
		}
		p, err := parsePrefix(host)
		if err != nil {
			return Rule{}, err
		}
		return Rule{prefix: p, port: port}, nil
	}
	// A bare IPv6 address or prefix has colons but no port.
	if strings.Count(s, ":") > 1 {
		p, err := parsePrefix(s)
		if err != nil {
			return Rule{}, fmt.Errorf("%w (an IPv6 address with a port is written [addr]:port)", err)
		}
		return Rule{prefix: p}, nil
	}
	host, port := s, uint16(0)
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		var err error
		if port, err = parsePort(s[i+1:]); err != nil {
			return Rule{}, err
		}
		host = s[:i]
	}
	if looksLikeAddress(host) {
		p, err := parsePrefix(host)
		if err != nil {
			return Rule{}, err
		}
		return Rule{prefix: p, port: port}, nil
	}
	name, wildcard := strings.ToLower(strings.TrimSuffix(host, ".")), false
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		name, wildcard = rest, true
	}
	if strings.Contains(name, "*") {
		return Rule{}, fmt.Errorf("a wildcard is only a leading \"*.\": %w", api.ErrInvalid)
	}
	if err := checkName(name); err != nil {
		return Rule{}, err
	}
	return Rule{name: name, wildcard: wildcard, port: port}, nil
}

// looksLikeAddress tells an IPv4 address or prefix from a name: digits, dots
// and a slash only.
func looksLikeAddress(s string) bool {
	return s != "" && strings.Trim(s, "0123456789./") == ""
}

// parsePrefix parses an address (a single-address prefix) or a CIDR prefix
// that is its network's address.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "%") {
		return netip.Prefix{}, fmt.Errorf("an address with a zone: %w", api.ErrInvalid)
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not an address: %w", api.ErrInvalid)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not a CIDR prefix: %w", api.ErrInvalid)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("an IPv4-mapped prefix; write it as IPv4: %w", api.ErrInvalid)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("host bits set; the network is %s: %w", p.Masked(), api.ErrInvalid)
	}
	return p, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q is not 1-65535: %w", s, api.ErrInvalid)
	}
	return uint16(n), nil
}

// matches reports whether r matches a connection to dst, whose address was
// resolved from names.
func (r Rule) matches(dst netip.AddrPort, names []string) bool {
	if r.port != 0 && r.port != dst.Port() {
		return false
	}
	if r.prefix.IsValid() {
		return r.prefix.Contains(dst.Addr().Unmap())
	}
	for _, n := range names {
		if r.matchesName(n) {
			return true
		}
	}
	return false
}

// matchesName reports whether name (normalized) is r's name or, for a
// wildcard, below it.
func (r Rule) matchesName(name string) bool {
	if r.name == "" {
		return false
	}
	if r.wildcard {
		return len(name) > len(r.name) && strings.HasSuffix(name, r.name) && name[len(name)-len(r.name)-1] == '.'
	}
	return name == r.name
}

// Policy decides which connections a guest may open; the package doc gives
// the order. The zero Policy permits the public internet and refuses the
// built-in blocked set.
type Policy struct {
	Allow []Rule
	Deny  []Rule
}

// RuleError is ParsePolicy's error: it names the list and index of the rule,
// so a caller can place it under its own field path
// ("spec.network.egress." + Field()).
type RuleError struct {
	List  string // "allow" or "deny"
	Index int
	Err   error // ParseRule's error
}

// Field returns the rule's place, such as "allow[2]".
func (e *RuleError) Field() string { return fmt.Sprintf("%s[%d]", e.List, e.Index) }

func (e *RuleError) Error() string { return e.Field() + ": " + e.Err.Error() }

// Unwrap returns ParseRule's error, which wraps api.ErrInvalid.
func (e *RuleError) Unwrap() error { return e.Err }

// ParsePolicy parses the Allow and Deny lists. It reports every bad rule, each
// a *RuleError (joined with errors.Join), all wrapping api.ErrInvalid.
func ParsePolicy(allow, deny []string) (Policy, error) {
	var p Policy
	var errs []error
	parse := func(list string, in []string) []Rule {
		out := make([]Rule, 0, len(in))
		for i, s := range in {
			r, err := ParseRule(s)
			if err != nil {
				errs = append(errs, &RuleError{List: list, Index: i, Err: err})
				continue
			}
			out = append(out, r)
		}
		return out
	}
	p.Allow = parse("allow", allow)
	p.Deny = parse("deny", deny)
	if err := errors.Join(errs...); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// clone copies p's lists, so a caller's later change to them is not seen.
func (p Policy) clone() *Policy {
	return &Policy{Allow: append([]Rule(nil), p.Allow...), Deny: append([]Rule(nil), p.Deny...)}
}

// Reason is why a connection or DNS question was refused. Its values are
// stable, for events and metrics.
type Reason string

const (
	// ReasonDenyRule: a Deny rule matched; Denial.Rule is the rule.
	ReasonDenyRule Reason = "DenyRule"
	// ReasonBlocked: the destination is in the built-in blocked set;
	// Denial.Rule names the range or host address.
	ReasonBlocked Reason = "Blocked"
	// ReasonNotAllowed: the Allow list is not empty and no rule of it
	// matched.
	ReasonNotAllowed Reason = "NotAllowed"
	// ReasonGuestNetwork: an address of the guest network other than the
	// gateway, which the Network does not serve on that port.
	ReasonGuestNetwork Reason = "GuestNetwork"
	// ReasonLimit: the guest has Options.MaxConns connections already.
	ReasonLimit Reason = "ConnectionLimit"
)

// verdict is a policy decision; rule says which rule or range decided.
type verdict struct {
	allow  bool
	reason Reason // set when !allow
	rule   string
}

// blockedRange is a range of the built-in blocked set.
type blockedRange struct {
	prefix netip.Prefix
	what   string
}

// blocked is the built-in blocked set, besides the host's own addresses:
// every range of IANA's special-purpose address registries (IPv4 and IPv6)
// that is not globally reachable, and those that lead to one (6to4 and
// NAT64 prefixes embed an IPv4 address). docs/resources.md has it as a
// table; keep the two alike.
var blocked = func() []blockedRange {
	var out []blockedRange
	for _, b := range []struct{ cidr, what string }{
		{"0.0.0.0/8", "this network"},
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "shared address space"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "IETF protocol assignments"},
		{"192.0.2.0/24", "documentation"},
		{"192.88.99.0/24", "6to4 relay anycast"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "benchmarking"},
		{"198.51.100.0/24", "documentation"},
		{"203.0.113.0/24", "documentation"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved and broadcast"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible"},
		{"64:ff9b::/96", "NAT64"},
		{"64:ff9b:1::/48", "local NAT64"},
		{"100::/64", "discard-only"},
		{"2001::/23", "IETF protocol assignments"},
		{"2001:db8::/32", "documentation"},
		{"2002::/16", "6to4"},
		{"3fff::/20", "documentation"},
		{"5f00::/16", "segment routing"},
		{"fc00::/7", "unique local"},
		{"fe80::/10", "link-local"},
		{"ff00::/8", "multicast"},
	} {
		out = append(out, blockedRange{netip.MustParsePrefix(b.cidr), b.what})
	}
	return out
}()

// blockedBy returns the refusal of an address of the blocked set or of
// the host's own, and false for any other address.
func blockedBy(a netip.Addr, hostAddrs []netip.Addr) (verdict, bool) {
	for _, b := range blocked {
		if b.prefix.Contains(a) {
			return verdict{reason: ReasonBlocked, rule: b.prefix.String() + " (" + b.what + ")"}, true
		}
	}
	for _, h := range hostAddrs {
		if h.Unmap() == a {
			return verdict{reason: ReasonBlocked, rule: "host address " + a.String()}, true
		}
	}
	return verdict{}, false
}

// decide judges a connection to dst, whose address was resolved from
// names; static are those of names whose address is the operator's
// (Options.Hosts), not a DNS answer; hostAddrs are the host's own
// addresses.
//
// A name rule opens only what the name's public answer is: an address of
// the blocked set or of the host is opened by an address or CIDR rule, or
// by a name rule through a static name, never by a name's DNS answer (a
// name the guest may make resolve anywhere: 127.0.0.1.nip.io, or a name
// re-pointed after its first answer).
func (p *Policy) decide(dst netip.AddrPort, names, static []string, hostAddrs []netip.Addr) verdict {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	for _, r := range p.Deny {
		if r.matches(dst, names) {
			return verdict{reason: ReasonDenyRule, rule: r.text}
		}
	}
	block, isBlocked := blockedBy(dst.Addr(), hostAddrs)
	opening := names
	if isBlocked {
		opening = static
	}
	for _, r := range p.Allow {
		if r.matches(dst, opening) {
			return verdict{allow: true, rule: r.text}
		}
	}
	if isBlocked {
		return block
	}
	if len(p.Allow) > 0 {
		return verdict{reason: ReasonNotAllowed}
	}
	return verdict{allow: true}
}

// denyName returns the first Deny rule without a port that matches name: a
// name no connection could be allowed to, which DNS refuses to resolve.
func (p *Policy) denyName(name string) (Rule, bool) {
	for _, r := range p.Deny {
		if r.port == 0 && r.matchesName(name) {
			return r, true
		}
	}
	return Rule{}, false
}

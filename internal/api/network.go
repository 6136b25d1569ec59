package api

import (
	"fmt"
	"strings"
	"time"
)

// Network is a desktop's network: spec.network of a Template, a Sandbox
// and a pool's sandbox template.
//
// A Template's mode decides whether its snapshot has a network device:
// clones of a template without one have none. A Sandbox's mode and egress
// rules, when set, replace its template's; a sandbox of a nat template
// with mode none keeps the device and reaches nothing.
type Network struct {
	// Mode is nat (a user-mode network of the sandbox's own, behind the
	// egress policy; the default) or none.
	Mode string `json:"mode,omitempty"`
	// Egress limits what the guest may connect to.
	Egress Egress `json:"egress,omitzero"`
}

// Egress is a network's egress policy. A rule is a CIDR or an address
// (10.0.0.0/8, 127.0.0.1, [::1]), a host name (example.com) or a
// wildcard (*.example.com), each with an optional port (127.0.0.1:8080,
// example.com:443). A Deny rule refuses; then an Allow rule permits; then
// loopback, link-local, private and CGNAT ranges, multicast and the host's
// own addresses are refused; then, when Allow is empty, the rest (the
// public internet) is permitted, and when it is not, refused. The guest's
// gateway (10.0.2.2) stands for the host's loopback: allow 127.0.0.1:PORT
// to let the guest reach a service on the host.
type Egress struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Network modes.
const (
	NetworkNAT  = "nat"
	NetworkNone = "none"
)

// Bounds on egress rules.
const (
	MaxEgressRules    = 64
	MaxEgressRuleSize = 255
)

// IsZero reports whether n says nothing (the template's, or the default).
func (n Network) IsZero() bool {
	return n.Mode == "" && len(n.Egress.Allow) == 0 && len(n.Egress.Deny) == 0
}

// EffectiveNetwork is the network a sandbox of template tpl runs with:
// the sandbox's mode and egress rules where it sets them, else the
// template's; nat when neither says.
func EffectiveNetwork(tpl, sb Network) Network {
	out := tpl
	if sb.Mode != "" {
		out.Mode = sb.Mode
	}
	if len(sb.Egress.Allow) > 0 || len(sb.Egress.Deny) > 0 {
		out.Egress = sb.Egress
	}
	if out.Mode == "" {
		out.Mode = NetworkNAT
	}
	return out
}

// validateNetwork checks a network's structure; the rules' syntax is the
// guest network's to parse (the server checks it at admission).
func validateNetwork(p string, n Network) error {
	switch n.Mode {
	case "", NetworkNAT, NetworkNone:
	default:
		return Invalid(p+".mode", "%q: want nat or none", n.Mode)
	}
	if n.Mode == NetworkNone && (len(n.Egress.Allow) > 0 || len(n.Egress.Deny) > 0) {
		return Invalid(p+".egress", "egress rules need mode nat (mode none has no network)")
	}
	for _, l := range []struct {
		name  string
		rules []string
	}{{"allow", n.Egress.Allow}, {"deny", n.Egress.Deny}} {
		if len(l.rules) > MaxEgressRules {
			return Invalid(p+".egress."+l.name, "%d rules: at most %d", len(l.rules), MaxEgressRules)
		}
		for i, r := range l.rules {
			f := fmt.Sprintf("%s.egress.%s[%d]", p, l.name, i)
			switch {
			case r == "":
				return Invalid(f, "empty rule")
			case len(r) > MaxEgressRuleSize:
				return Invalid(f, "%d bytes: at most %d", len(r), MaxEgressRuleSize)
			case strings.ContainsFunc(r, func(c rune) bool { return c <= ' ' || c == 0x7f || c > 0x7e }):
				return Invalid(f, "%q has spaces, control or non-ASCII characters (write names in their ASCII form)", r)
			}
		}
	}
	return nil
}

// SandboxNetworkStatus is what the node reports of a sandbox's network.
type SandboxNetworkStatus struct {
	// Mode is the network the sandbox runs with: nat or none.
	Mode string `json:"mode,omitempty"`
	// Address is the guest's address on its network.
	Address string `json:"address,omitempty"`
	// DeniedConnections counts the connections the egress policy refused.
	DeniedConnections int64 `json:"deniedConnections,omitempty"`
	// LastDenied is the latest refused connection.
	LastDenied *NetworkDenial `json:"lastDenied,omitempty"`
}

// NetworkDenial is one refused connection.
type NetworkDenial struct {
	Time        time.Time `json:"time"`
	Destination string    `json:"destination"`
	// Name is the host name the guest resolved the destination from, if
	// known.
	Name string `json:"name,omitempty"`
	// Reason says what refused it: a deny rule, a blocked range, or an
	// allow list that does not name it.
	Reason string `json:"reason"`
	Rule   string `json:"rule,omitempty"`
}

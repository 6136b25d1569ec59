package guestnet

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

func TestParseRule(t *testing.T) {
	tests := []struct {
		in       string
		prefix   string // "" for a name rule
		name     string
		wildcard bool
		port     uint16
	}{
		{"10.0.0.0/8", "10.0.0.0/8", "", false, 0},
		{"127.0.0.1", "127.0.0.1/32", "", false, 0},
		{"127.0.0.1:8443", "127.0.0.1/32", "", false, 8443},
		{"10.0.0.0/8:443", "10.0.0.0/8", "", false, 443},
		{"::1", "::1/128", "", false, 0},
		{"fe80::/10", "fe80::/10", "", false, 0},
		{"[::1]:80", "::1/128", "", false, 80},
		{"[fc00::/7]:443", "fc00::/7", "", false, 443},
		{"[2001:db8::1]", "2001:db8::1/128", "", false, 0},
		{"::ffff:10.1.2.3", "10.1.2.3/32", "", false, 0},
		{" 192.168.0.0/16 ", "192.168.0.0/16", "", false, 0},
		{"0.0.0.0/0", "0.0.0.0/0", "", false, 0},
		{"example.com", "", "example.com", false, 0},
		{"Example.COM.", "", "example.com", false, 0},
		{"example.com:443", "", "example.com", false, 443},
		{"*.example.com", "", "example.com", true, 0},
		{"*.example.com:8080", "", "example.com", true, 8080},
		{"localhost", "", "localhost", false, 0},
		{"_acme.example.com", "", "_acme.example.com", false, 0},
		{"1password.com", "", "1password.com", false, 0},
	}
	for _, tt := range tests {
		r, err := ParseRule(tt.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tt.in, err)
			continue
		}
		var gotPrefix string
		if r.prefix.IsValid() {
			gotPrefix = r.prefix.String()
		}
		if gotPrefix != tt.prefix || r.name != tt.name || r.wildcard != tt.wildcard || r.Port() != tt.port {
			t.Errorf("ParseRule(%q) = prefix %q name %q wildcard %v port %d; want %q %q %v %d",
				tt.in, gotPrefix, r.name, r.wildcard, r.Port(), tt.prefix, tt.name, tt.wildcard, tt.port)
		}
		if r.String() != tt.in {
			t.Errorf("ParseRule(%q).String() = %q", tt.in, r.String())
		}
		if r.IsName() != (tt.name != "") {
			t.Errorf("ParseRule(%q).IsName() = %v", tt.in, r.IsName())
		}
	}
}

func TestParseRuleErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", "empty"},
		{"10.0.0.1/8", "host bits set; the network is 10.0.0.0/8"},
		{"10.0.0.0/33", "not a CIDR prefix"},
		{"300.1.2.3", "not an address"},
		{"10.0.0", "not an address"},
		{"127.0.0.1:0", `port "0" is not 1-65535`},
		{"127.0.0.1:65536", `port "65536" is not 1-65535`},
		{"example.com:", `port "" is not 1-65535`},
		{"example.com:http", `port "http" is not 1-65535`},
		{"::1:80:x", "an IPv6 address with a port is written [addr]:port"},
		{"[::1", "no closing bracket"},
		{"[::1]80", "after the brackets"},
		{"[10.0.0.1]:80", "brackets are for IPv6"},
		{"fe80::1%eth0", "zone"},
		{"*", "only a leading"},
		{"*example.com", "only a leading"},
		{"a.*.example.com", "only a leading"},
		{"exa mple.com", "not allowed in a host name"},
		{"a..b", "a label is empty"},
		{"1.2.3.4.5", "not an address"},
		{"host.123", "neither an address nor a host name"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		{"::ffff:10.0.0.0/104", "IPv4-mapped"},
	}
	for _, tt := range tests {
		_, err := ParseRule(tt.in)
		if err == nil {
			t.Errorf("ParseRule(%q) succeeded, want an error with %q", tt.in, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "rule \""+tt.in+"\"") {
			t.Errorf("ParseRule(%q) error %q, want it to quote the rule and say %q", tt.in, err, tt.want)
		}
		if !errors.Is(err, api.ErrInvalid) {
			t.Errorf("ParseRule(%q) error is not ErrInvalid", tt.in)
		}
	}
}

func TestParsePolicyNamesFields(t *testing.T) {
	_, err := ParsePolicy([]string{"10.0.0.0/8", "example.com", "10.0.0.1/8"}, []string{"bad rule"})
	if err == nil {
		t.Fatal("ParsePolicy succeeded")
	}
	if !errors.Is(err, api.ErrInvalid) {
		t.Errorf("error is not ErrInvalid: %v", err)
	}
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var re *RuleError
		if !errors.As(e, &re) {
			t.Fatalf("error %v is not a RuleError", e)
		}
		fields = append(fields, re.Field())
	}
	if got := strings.Join(fields, " "); got != "allow[2] deny[0]" {
		t.Errorf("fields = %q, want allow[2] deny[0]", got)
	}
	if !strings.Contains(err.Error(), `allow[2]: rule "10.0.0.1/8": host bits set`) {
		t.Errorf("error = %q", err)
	}

	p, err := ParsePolicy([]string{"10.0.0.0/8"}, nil)
	if err != nil || len(p.Allow) != 1 || len(p.Deny) != 0 {
		t.Errorf("ParsePolicy = %+v, %v", p, err)
	}
}

func TestDecide(t *testing.T) {
	host := []netip.Addr{netip.MustParseAddr("203.0.114.10"), netip.MustParseAddr("2a00:1450::10")}
	tests := []struct {
		name        string
		allow, deny []string
		dst         string
		names       []string
		allowed     bool
		reason      Reason
		rule        string
		static      []string // of names: from Options.Hosts
	}{
		{"public by default", nil, nil, "93.184.216.34:443", nil, true, "", "", nil},
		{"loopback blocked", nil, nil, "127.0.0.1:8080", nil, false, ReasonBlocked, "127.0.0.0/8 (loopback)", nil},
		{"loopback v6 blocked", nil, nil, "[::1]:8080", nil, false, ReasonBlocked, "::1/128 (loopback)", nil},
		{"this network", nil, nil, "0.1.2.3:80", nil, false, ReasonBlocked, "0.0.0.0/8 (this network)", nil},
		{"private 172.16", nil, nil, "172.20.1.1:80", nil, false, ReasonBlocked, "172.16.0.0/12 (private)", nil},
		{"172.32 is public", nil, nil, "172.32.0.1:80", nil, true, "", "", nil},
		{"link-local", nil, nil, "169.254.169.254:80", nil, false, ReasonBlocked, "169.254.0.0/16 (link-local)", nil},
		{"link-local v6", nil, nil, "[fe80::1]:80", nil, false, ReasonBlocked, "fe80::/10 (link-local)", nil},
		{"unique local", nil, nil, "[fd00::1]:80", nil, false, ReasonBlocked, "fc00::/7 (unique local)", nil},
		{"CGNAT", nil, nil, "100.100.1.1:80", nil, false, ReasonBlocked, "100.64.0.0/10 (shared address space)", nil},
		{"multicast", nil, nil, "239.1.1.1:80", nil, false, ReasonBlocked, "224.0.0.0/4 (multicast)", nil},
		{"broadcast", nil, nil, "255.255.255.255:80", nil, false, ReasonBlocked, "240.0.0.0/4 (reserved and broadcast)", nil},
		{"host address", nil, nil, "203.0.114.10:22", nil, false, ReasonBlocked, "host address 203.0.114.10", nil},
		{"host address v6", nil, nil, "[2a00:1450::10]:22", nil, false, ReasonBlocked, "host address 2a00:1450::10", nil},
		{"host address allowed", []string{"203.0.114.10:22"}, nil, "203.0.114.10:22", nil, true, "", "203.0.114.10:22", nil},
		{"IETF protocol assignments", nil, nil, "192.0.0.8:80", nil, false, ReasonBlocked, "192.0.0.0/24 (IETF protocol assignments)", nil},
		{"documentation", nil, nil, "192.0.2.1:80", nil, false, ReasonBlocked, "192.0.2.0/24 (documentation)", nil},
		{"benchmarking", nil, nil, "198.19.1.1:80", nil, false, ReasonBlocked, "198.18.0.0/15 (benchmarking)", nil},
		{"NAT64 of loopback", nil, nil, "[64:ff9b::7f00:1]:80", nil, false, ReasonBlocked, "64:ff9b::/96 (NAT64)", nil},
		{"6to4 of loopback", nil, nil, "[2002:7f00:1::1]:80", nil, false, ReasonBlocked, "2002::/16 (6to4)", nil},
		{"IPv6 public", nil, nil, "[2a00:1450::1]:443", nil, true, "", "", nil},
		{"mapped address judged as IPv4", nil, nil, "[::ffff:127.0.0.1]:80", nil, false, ReasonBlocked, "127.0.0.0/8 (loopback)", nil},
		{"allow opens loopback port", []string{"127.0.0.1:8443"}, nil, "127.0.0.1:8443", nil, true, "", "127.0.0.1:8443", nil},
		{"allow list excludes the rest", []string{"127.0.0.1:8443"}, nil, "93.184.216.34:443", nil, false, ReasonNotAllowed, "", nil},
		{"allow port only", []string{"127.0.0.1:8443"}, nil, "127.0.0.1:8444", nil, false, ReasonBlocked, "127.0.0.0/8 (loopback)", nil},
		{"deny beats allow", []string{"10.0.0.0/8"}, []string{"10.1.2.3"}, "10.1.2.3:80", nil, false, ReasonDenyRule, "10.1.2.3", nil},
		{"deny public", nil, []string{"93.184.216.0/24"}, "93.184.216.34:443", nil, false, ReasonDenyRule, "93.184.216.0/24", nil},
		{"deny port only", nil, []string{"0.0.0.0/0:25"}, "93.184.216.34:443", nil, true, "", "", nil},
		{"name allows", []string{"example.com"}, nil, "93.184.216.34:443", []string{"example.com"}, true, "", "example.com", nil},
		{"a name's answer does not open private", []string{"intranet.corp"}, nil, "10.5.5.5:443", []string{"intranet.corp"}, false, ReasonBlocked, "10.0.0.0/8 (private)", nil},
		{"a CIDR opens private", []string{"intranet.corp", "10.5.0.0/16"}, nil, "10.5.5.5:443", []string{"intranet.corp"}, true, "", "10.5.0.0/16", nil},
		{"a static name opens private", []string{"intranet.corp"}, nil, "10.5.5.5:443", []string{"intranet.corp"}, true, "", "intranet.corp", []string{"intranet.corp"}},
		{"a name's answer does not open loopback", []string{"*.nip.io"}, nil, "127.0.0.1:8080", []string{"127.0.0.1.nip.io"}, false, ReasonBlocked, "127.0.0.0/8 (loopback)", nil},
		{"a static name opens loopback", []string{"api.test:8080"}, nil, "127.0.0.1:8080", []string{"api.test"}, true, "", "api.test:8080", []string{"api.test"}},
		{"a name's answer does not open the metadata address", []string{"meta.example"}, nil, "169.254.169.254:80", []string{"meta.example"}, false, ReasonBlocked, "169.254.0.0/16 (link-local)", nil},
		{"a name's answer does not open a host address", []string{"*.example"}, nil, "203.0.114.10:22", []string{"h.example"}, false, ReasonBlocked, "host address 203.0.114.10", nil},
		{"a name's answer does not open special-purpose", []string{"*.example"}, nil, "198.18.0.1:80", []string{"b.example"}, false, ReasonBlocked, "198.18.0.0/15 (benchmarking)", nil},
		{"name unknown", []string{"example.com"}, nil, "93.184.216.34:443", nil, false, ReasonNotAllowed, "", nil},
		{"one of several names", []string{"b.example"}, nil, "93.184.216.34:443", []string{"a.example", "b.example"}, true, "", "b.example", nil},
		{"name with port", []string{"example.com:443"}, nil, "93.184.216.34:80", []string{"example.com"}, false, ReasonNotAllowed, "", nil},
		{"wildcard", []string{"*.example.com"}, nil, "93.184.216.34:443", []string{"a.b.example.com"}, true, "", "*.example.com", nil},
		{"wildcard not apex", []string{"*.example.com"}, nil, "93.184.216.34:443", []string{"example.com"}, false, ReasonNotAllowed, "", nil},
		{"wildcard not suffix of label", []string{"*.example.com"}, nil, "93.184.216.34:443", []string{"badexample.com"}, false, ReasonNotAllowed, "", nil},
		{"deny name", nil, []string{"*.ads.example"}, "93.184.216.34:443", []string{"x.ads.example"}, false, ReasonDenyRule, "*.ads.example", nil},
		{"deny name beats allow address", []string{"0.0.0.0/0"}, []string{"evil.example"}, "93.184.216.34:443", []string{"evil.example"}, false, ReasonDenyRule, "evil.example", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPolicy(t, tt.allow, tt.deny)
			v := p.decide(netip.MustParseAddrPort(tt.dst), tt.names, tt.static, host)
			if v.allow != tt.allowed || v.reason != tt.reason || v.rule != tt.rule {
				t.Errorf("decide(%s, %q) = %+v, want allow %v reason %q rule %q", tt.dst, tt.names, v, tt.allowed, tt.reason, tt.rule)
			}
		})
	}
}

func TestDenyName(t *testing.T) {
	p := mustPolicy(t, []string{"allowed.example"}, []string{"evil.example", "*.ads.example", "mail.example:25", "10.0.0.0/8"})
	tests := []struct {
		name string
		rule string
	}{
		{"evil.example", "evil.example"},
		{"www.evil.example", ""},
		{"x.ads.example", "*.ads.example"},
		{"ads.example", ""},
		{"mail.example", ""}, // a port: connections are refused, not the name
		{"allowed.example", ""},
	}
	for _, tt := range tests {
		r, ok := p.denyName(tt.name)
		if ok != (tt.rule != "") || r.String() != tt.rule {
			t.Errorf("denyName(%q) = %q %v, want %q", tt.name, r, ok, tt.rule)
		}
	}
}

func TestSetPolicyCopies(t *testing.T) {
	p := mustPolicy(t, []string{"10.0.0.0/8"}, nil)
	n := newTestNetwork(t, p, Options{})
	p.Allow[0] = mustRule(t, "192.168.0.0/16")
	if got := n.Policy().Allow[0].String(); got != "10.0.0.0/8" {
		t.Errorf("the Network saw the caller's change: %q", got)
	}
}

func mustRule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestConfigDefaultsAndChecks(t *testing.T) {
	c, err := Config{HostAddrs: []netip.Addr{}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Guest.String() != DefaultGuest || c.Gateway.String() != DefaultGateway || c.DNS.String() != DefaultDNS ||
		c.GuestMAC.String() != DefaultGuestMAC || c.GatewayMAC.String() != DefaultGatewayMAC || c.MTU != DefaultMTU {
		t.Errorf("defaults = %+v", c)
	}
	bad := []Config{
		{Guest: netip.MustParsePrefix("10.0.3.15/24")},
		{Gateway: netip.MustParseAddr("10.0.2.15")},
		{DNS: netip.MustParseAddr("10.0.2.255")},
		{Guest: netip.MustParsePrefix("fd00::15/64")},
		{MTU: 100},
		{MTU: 70000},
	}
	for _, b := range bad {
		b.HostAddrs = []netip.Addr{}
		if _, err := New(b, Policy{}, Options{}); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("New(%+v) = %v, want ErrInvalid", b, err)
		}
	}
	if _, err := New(Config{HostAddrs: []netip.Addr{}}, Policy{}, Options{Hosts: map[string][]netip.Addr{"x.test": {netip.MustParseAddr("127.0.0.2")}}}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("Hosts with 127.0.0.2: %v, want ErrInvalid", err)
	}
	if _, err := New(Config{HostAddrs: []netip.Addr{}}, Policy{}, Options{Hosts: map[string][]netip.Addr{"bad name": nil}}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("Hosts with a bad name: %v, want ErrInvalid", err)
	}
}

func TestHostAddrs(t *testing.T) {
	addrs, err := HostAddrs()
	if err != nil {
		t.Skipf("no interface addresses here: %v", err)
	}
	for _, a := range addrs {
		if !a.IsValid() || a.Is4In6() {
			t.Errorf("host address %v", a)
		}
	}
}

package qemu

import (
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/guestnet"
)

func ruleTexts(rules []guestnet.Rule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.String())
	}
	return out
}

// TestEgressOf: a sandbox's policy is its rules; mode none, and rules that
// do not parse, reach nothing and answer no name.
func TestEgressOf(t *testing.T) {
	tests := []struct {
		name             string
		in               api.Network
		allow, deny      []string
		dns, invalidRule bool
	}{
		{"default nat", api.Network{}, nil, nil, true, false},
		{"nat with rules", api.Network{Mode: api.NetworkNAT, Egress: api.Egress{Allow: []string{"127.0.0.1:8080", "*.example.com"}, Deny: []string{"10.0.0.0/8"}}},
			[]string{"127.0.0.1:8080", "*.example.com"}, []string{"10.0.0.0/8"}, true, false},
		{"mode none on a snapshot with a NIC", api.Network{Mode: api.NetworkNone}, nil, []string{"0.0.0.0/0", "::/0"}, false, false},
		{"a rule that does not parse", api.Network{Egress: api.Egress{Allow: []string{"*.*"}}}, nil, []string{"0.0.0.0/0", "::/0"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol, dns, err := egressOf(tt.in)
			if tt.invalidRule != (err != nil) || err != nil && !errors.Is(err, api.ErrInvalid) {
				t.Fatalf("err %v, want invalid: %v", err, tt.invalidRule)
			}
			if got := ruleTexts(pol.Allow); !slices.Equal(got, tt.allow) {
				t.Errorf("allow %q, want %q", got, tt.allow)
			}
			if got := ruleTexts(pol.Deny); !slices.Equal(got, tt.deny) {
				t.Errorf("deny %q, want %q", got, tt.deny)
			}
			if dns != tt.dns {
				t.Errorf("dns %v, want %v", dns, tt.dns)
			}
		})
	}
}

// TestMachineFollowsTheSnapshot: a VM's NIC is its template snapshot's
// record, whatever the image says now; the socket is in its run
// directory.
func TestMachineFollowsTheSnapshot(t *testing.T) {
	b := &Backend{}
	img := image{Network: &imageNetwork{MAC: "52:54:00:12:34:56", Address: "10.0.2.15", PrefixLength: 24}}
	for _, tt := range []struct {
		name    string
		network bool
		want    string
	}{{"snapshot without a NIC", false, ""}, {"snapshot with a NIC", true, "/run/hvkube/abc/net.sock"}} {
		t.Run(tt.name, func(t *testing.T) {
			m := b.machineFor(tplMeta{ID: "t", Image: img, Network: tt.network}, "n", "/d", "/run/hvkube/abc", "/d/disk.qcow2")
			if m.NetSocket != tt.want {
				t.Errorf("NetSocket %q, want %q", m.NetSocket, tt.want)
			}
			if got := containsRun(m.args(), []string{"-nic", "none"}); got == tt.network {
				t.Errorf("-nic none in the args: %v, want %v", got, !tt.network)
			}
		})
	}
}

// TestImageNetworkConfig: the guest network takes the image's addresses;
// a declaration it cannot serve is invalid.
func TestImageNetworkConfig(t *testing.T) {
	cfg, err := (&imageNetwork{Model: "virtio-net-pci", MAC: "52:54:00:12:34:57", Address: "10.0.3.15", PrefixLength: 24, Gateway: "10.0.3.2", DNS: "10.0.3.3"}).config([]netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GuestMAC.String() != "52:54:00:12:34:57" || cfg.Guest != netip.MustParsePrefix("10.0.3.15/24") ||
		cfg.Gateway != netip.MustParseAddr("10.0.3.2") || cfg.DNS != netip.MustParseAddr("10.0.3.3") {
		t.Errorf("config %+v", cfg)
	}
	for _, bad := range []imageNetwork{{Model: "e1000"}, {MAC: "nope"}, {Address: "10.0.2.15"}, {Address: "x", PrefixLength: 24}, {Gateway: "gw"}} {
		if _, err := bad.config(nil); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	if got := (*imageNetwork)(nil).address(); got != "10.0.2.15" {
		t.Errorf("default address %q", got)
	}
}

// TestCheckHosts: static names are host names; loopback answers are
// 127.0.0.1 only.
func TestCheckHosts(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	got, err := checkHosts(map[string][]netip.Addr{"API.Test.": {lo}})
	if err != nil || !slices.Equal(got["api.test"], []netip.Addr{lo}) {
		t.Fatalf("checkHosts: %v %v", got, err)
	}
	for _, bad := range []map[string][]netip.Addr{
		{"*.test": {lo}},
		{"a.test:80": {lo}},
		{"10.0.0.1": {lo}},
		{"a.test": {netip.MustParseAddr("127.0.0.2")}},
		{"a.test": {{}}},
	} {
		if _, err := checkHosts(bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%v: %v, want ErrInvalid", bad, err)
		}
	}
}

// TestDenialsCount: every denial a link reports counts (a coalesced
// report for all it stands for), the latest is kept, and a link owned by
// no sandbox (a spare's) counts for none.
func TestDenialsCount(t *testing.T) {
	d := &denials{}
	l := &link{}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l.onDeny(guestnet.Denial{Time: t0, Proto: "tcp", Dest: netip.MustParseAddrPort("127.0.0.1:80"), Reason: guestnet.ReasonBlocked, Count: 1})
	l.owner.Store(d)
	l.onDeny(guestnet.Denial{Time: t0.Add(time.Second), Proto: "tcp", Dest: netip.MustParseAddrPort("127.0.0.1:80"), Reason: guestnet.ReasonBlocked, Rule: "127.0.0.0/8 (loopback)", Count: 1})
	l.onDeny(guestnet.Denial{Time: t0.Add(2 * time.Second), Proto: "dns", Name: "bad.test", Reason: guestnet.ReasonDenyRule, Rule: "bad.test", Count: 3})
	n, last := d.get()
	if n != 4 || last == nil || last.Destination != "bad.test (DNS)" || last.Reason != "DenyRule" || last.Rule != "bad.test" {
		t.Fatalf("count %d, latest %+v; want 4, the DNS refusal", n, last)
	}
	v := &vm{denials: d, meta: vmMeta{ID: "a"}, dir: t.TempDir()}
	if err := v.save(); err != nil {
		t.Fatal(err)
	}
	var back vmMeta
	if err := readJSON(filepath.Join(v.dir, "vm.json"), &back); err != nil || back.Denied != 4 || back.LastDenied == nil || back.LastDenied.Destination != "bad.test (DNS)" {
		t.Fatalf("recorded %+v %v", back, err)
	}
}

// TestNetworkInfo: what Inspect says of a sandbox's network, from its
// spec and its snapshot's record.
func TestNetworkInfo(t *testing.T) {
	withNIC := tplMeta{ID: "t", Network: true, Image: image{Network: &imageNetwork{Address: "10.0.2.15", PrefixLength: 24}}}
	none := api.Network{Mode: api.NetworkNone}
	for _, tt := range []struct {
		name          string
		tpl           tplMeta
		spec          *api.Network
		mode, address string
		unavailable   bool
	}{
		{"nat", withNIC, &api.Network{Mode: api.NetworkNAT}, api.NetworkNAT, "10.0.2.15", false},
		{"recorded before networks", withNIC, nil, api.NetworkNAT, "10.0.2.15", false},
		{"mode none on a snapshot with a NIC", withNIC, &none, api.NetworkNone, "", false},
		{"nat on a snapshot without a NIC", tplMeta{ID: "old"}, &api.Network{Mode: api.NetworkNAT}, api.NetworkNone, "", true},
		{"none on a snapshot without a NIC", tplMeta{ID: "old"}, &none, api.NetworkNone, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := &vm{tpl: tt.tpl, meta: vmMeta{TemplateID: tt.tpl.ID, Network: tt.spec}}
			got := v.networkInfo()
			if got.Mode != tt.mode || got.Address != tt.address || (got.Unavailable != "") != tt.unavailable {
				t.Fatalf("%+v, want mode %s, address %q, unavailable %v", got, tt.mode, tt.address, tt.unavailable)
			}
			if tt.unavailable && (!strings.Contains(got.Unavailable, tt.tpl.ID) || !strings.Contains(got.Unavailable, "rebuild the template")) {
				t.Errorf("unavailable %q, want it to name the snapshot and say rebuild the template", got.Unavailable)
			}
		})
	}
}

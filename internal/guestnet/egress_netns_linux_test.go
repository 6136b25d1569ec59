package guestnet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// rebinder answers each name from a list, one answer per question, the
// last one for ever after: a DNS server the guest's owner controls.
type rebinder struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr
}

func (r *rebinder) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	as, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	a := as[0]
	if len(as) > 1 {
		r.answers[host] = as[1:]
	}
	return []netip.Addr{a}, nil
}

// TestEgressNamesInANetworkNamespace: an allowed wildcard name opens only
// what its public answer is. In a network namespace of the test's own, a
// dummy interface (or its loopback one) holds a public address (the internet: a real dial
// reaches it) and one that stands for the host's; the guest's names
// resolve through a DNS the guest's owner controls. A name answering
// loopback, link-local (the metadata address), the NAT gateway, the host's
// address or a special-purpose range is refused and counted, also when it
// answered a public address first (DNS rebinding); the public one is
// reached.
//
// The namespace is the test binary run again under unshare(1).
func TestEgressNamesInANetworkNamespace(t *testing.T) {
	if os.Getenv("HVKUBE_NETNS_CHILD") != "1" {
		if os.Geteuid() != 0 {
			t.Skip("a network namespace of the test's own needs root")
		}
		if out, err := exec.Command("unshare", "--net", "true").CombinedOutput(); err != nil {
			t.Skipf("this host makes no network namespace: %v: %s", err, out)
		}
		cmd := exec.Command("unshare", "--net", "--", os.Args[0], "-test.run=^TestEgressNamesInANetworkNamespace$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "HVKUBE_NETNS_CHILD=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in the namespace:\n%s", out)
		if err != nil {
			t.Fatalf("in the network namespace: %v", err)
		}
		return
	}
	// A dummy interface where the kernel has them, else the namespace's
	// own loopback interface: either holds addresses nothing else has.
	dev := "pub0"
	if err := exec.Command("ip", "link", "add", dev, "type", "dummy").Run(); err != nil {
		dev = "lo"
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", "198.41.0.10/32", "dev", dev},
		{"addr", "add", "198.41.0.20/32", "dev", dev},
		{"link", "set", dev, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	serve := func(addr, body string) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
		go s.Serve(ln)
		t.Cleanup(func() { s.Close() })
	}
	serve("198.41.0.10:80", "public")
	serve("127.0.0.1:80", "host loopback")
	serve("198.41.0.20:80", "host address")

	a := netip.MustParseAddr
	dns := &rebinder{answers: map[string][]netip.Addr{
		"pub.wild.test.":    {a("198.41.0.10")},
		"loop.wild.test.":   {a("127.0.0.1")},
		"meta.wild.test.":   {a("169.254.169.254")},
		"gw.wild.test.":     {a("10.0.2.2")},
		"host.wild.test.":   {a("198.41.0.20")},
		"bench.wild.test.":  {a("198.18.0.1")},
		"rebind.wild.test.": {a("198.41.0.10"), a("127.0.0.1")},
	}}
	var mu sync.Mutex
	var denials []Denial
	n, err := New(Config{HostAddrs: []netip.Addr{a("198.41.0.20")}}, mustPolicy(t, []string{"*.wild.test"}, nil), Options{
		Resolver: dns, DenyInterval: time.Hour,
		OnDeny: func(d Denial) { mu.Lock(); denials = append(denials, d); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	g := newTestGuest(t)
	g.plug(n)
	resolve := func(name string) netip.Addr {
		t.Helper()
		rcode, addrs := g.query(name, dnsmessage.TypeA)
		if rcode != dnsmessage.RCodeSuccess || len(addrs) != 1 {
			t.Fatalf("%s A = %v %v, want one address", name, rcode, addrs)
		}
		return addrs[0]
	}

	g.mustGet(fmt.Sprintf("http://%s:80/", resolve("pub.wild.test.")), "public")
	first := resolve("rebind.wild.test.")
	g.mustGet(fmt.Sprintf("http://%s:80/", first), "public")
	refused := []string{"loop.wild.test.", "meta.wild.test.", "gw.wild.test.", "host.wild.test.", "bench.wild.test.", "rebind.wild.test."}
	before := n.Stats().Denied
	for _, name := range refused {
		g.mustRefuse(netip.AddrPortFrom(resolve(name), 80))
	}
	if got := n.Stats().Denied - before; got != uint64(len(refused)) {
		t.Errorf("%d connections counted as denied, want %d", got, len(refused))
	}
	n.Close() // reports what is pending
	mu.Lock()
	defer mu.Unlock()
	rules := map[string]bool{}
	for _, d := range denials {
		if d.Reason != ReasonBlocked {
			t.Errorf("denial %+v, want reason %s", d, ReasonBlocked)
		}
		rules[d.Rule] = true
	}
	for _, want := range []string{"127.0.0.0/8 (loopback)", "169.254.0.0/16 (link-local)", "host address 198.41.0.20", "198.18.0.0/15 (benchmarking)"} {
		if !rules[want] {
			t.Errorf("no denial by %q among %v", want, rules)
		}
	}
}

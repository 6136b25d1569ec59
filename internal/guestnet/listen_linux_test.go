//go:build linux

package guestnet

import (
	"bufio"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
)

// listeningSockets returns the inodes of this process's listening TCP
// sockets and bound UDP sockets.
func listeningSockets(t *testing.T) map[string]bool {
	t.Helper()
	mine := make(map[string]bool)
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	out := make(map[string]bool)
	for _, table := range []string{"tcp", "tcp6", "udp", "udp6"} {
		f, err := os.Open("/proc/self/net/" + table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local rem st ... inode (field 9)
			if len(fields) < 10 || fields[0] == "sl" {
				continue
			}
			listening := fields[3] == "0A" || strings.HasPrefix(table, "udp")
			if listening && mine[fields[9]] {
				out[table+" "+fields[1]+" inode "+fields[9]] = true
			}
		}
		f.Close()
	}
	return out
}

func TestNothingListensOnTheHost(t *testing.T) {
	echo := hostEcho(t) // the test's own server, there before
	before := listeningSockets(t)
	n := newTestNetwork(t, mustPolicy(t, []string{"127.0.0.1"}, nil), Options{Hosts: map[string][]netip.Addr{"h.test": {hostLoopback}}})
	g := newTestGuest(t)
	g.plug(n)
	l, err := gonet.ListenTCP(g.stack, tcpip.FullAddress{NIC: 1, Addr: addr4(guestAddr), Port: 9222}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	// Traffic every way: a splice out, DNS, a port forward in.
	c, terr := g.connect(gw(echo))
	if terr != nil {
		t.Fatalf("connect: %s", terr)
	}
	defer c.Close()
	mustEcho(t, c, "out")
	g.resolver().LookupNetIP(context.Background(), "ip4", "h.test")
	in, err := n.DialGuest(context.Background(), 9222)
	if err != nil {
		t.Fatal(err)
	}
	in.Close()

	after := listeningSockets(t)
	for s := range after {
		if !before[s] {
			t.Errorf("a socket listens on the host: %s", s)
		}
	}
}

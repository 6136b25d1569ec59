package guestnet

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// BenchmarkGuestDownload measures a download by the guest from the host
// through the link, the forwarder and a splice.
func BenchmarkGuestDownload(b *testing.B) {
	const size = 8 << 20
	body := make([]byte, size)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer s.Close()
	port := netip.MustParseAddrPort(s.Listener.Addr().String()).Port()
	pol, err := ParsePolicy([]string{"127.0.0.1"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	n, err := New(Config{HostAddrs: []netip.Addr{}}, pol, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	g := newTestGuest(b)
	g.plug(n)
	url := fmt.Sprintf("http://%s/", gw(port))
	b.SetBytes(size)
	for b.Loop() {
		resp, err := g.client().Get(url)
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := io.Copy(io.Discard, resp.Body); n != size {
			b.Fatalf("read %d bytes", n)
		}
		resp.Body.Close()
	}
	// Segments lost on the link (a full queue drops) come back as
	// retransmissions, and each costs throughput.
	b.ReportMetric(float64(n.stack.Stats().TCP.Retransmits.Value())/float64(b.N), "retransmits/op")
}

package nodeca

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestReplicasAgree: two API servers with the same key make the same
// authority, and one with another key a different one.
func TestReplicasAgree(t *testing.T) {
	a, _ := New(bytes.Repeat([]byte("s"), 32))
	b, _ := New(bytes.Repeat([]byte("s"), 32))
	c, _ := New(bytes.Repeat([]byte("o"), 32))
	if !bytes.Equal(a.PEM(), b.PEM()) {
		t.Error("two replicas with the same key disagree on the authority")
	}
	if bytes.Equal(a.PEM(), c.PEM()) {
		t.Error("another key makes the same authority")
	}
	if _, err := New([]byte("short")); err == nil {
		t.Error("a short seed was taken")
	}
}

// TestNodeCertificates: a node's certificate, signed when it joins as
// node-a, serves node-a to an API server; the same certificate is refused
// for node-b (a node taken over that answers on another's address), and
// so is one the node signed itself, or one of another authority. A
// request asking for more names gets only the node's.
func TestNodeCertificates(t *testing.T) {
	ca, _ := New(bytes.Repeat([]byte("s"), 32))
	other, _ := New(bytes.Repeat([]byte("o"), 32))
	now := time.Now()
	key, csr, err := NewRequest("node-a")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.Sign(csr, "node-a", now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := KeyPair(certPEM, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := cert.Leaf.DNSNames; len(got) != 1 || got[0] != "node-a" || cert.Leaf.IsCA {
		t.Errorf("names %v, CA %v: want node-a alone, no CA", got, cert.Leaf.IsCA)
	}
	// A request for a wildcard and another node's name still gets the
	// authenticated node's name alone.
	_, greedy, _ := NewRequest("*")
	gPEM, err := ca.Sign(greedy, "node-a", now)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(gPEM), "*") {
		t.Error("the request's names leaked into the certificate")
	}
	otherPEM, _ := other.Sign(csr, "node-a", now)
	otherCert, _ := KeyPair(otherPEM, key)
	for _, c := range []struct {
		name  string
		cert  *tls.Certificate
		as    string
		works bool
	}{
		{"its own name", cert, "node-a", true},
		{"another node's name", cert, "node-b", false},
		{"another authority's", otherCert, "node-a", false},
	} {
		if err := handshake(t, c.cert, ca.ClientConfig(c.as)); (err == nil) != c.works {
			t.Errorf("%s: handshake %v, want working %v", c.name, err, c.works)
		}
	}
	if _, err := ca.Sign([]byte("junk"), "node-a", now); err == nil {
		t.Error("junk was signed")
	}
	tampered := bytes.Replace(csr, []byte("A"), []byte("B"), 1)
	if _, err := ca.Sign(tampered, "node-a", now); err == nil {
		t.Error("a tampered request was signed")
	}
	k2, _, _ := NewRequest("node-a")
	if _, err := KeyPair(certPEM, k2); err == nil {
		t.Error("a certificate was paired with another key")
	}
}

// handshake serves cert on a loopback listener and connects with cfg.
func handshake(t *testing.T, cert *tls.Certificate, cfg *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.(*tls.Conn).Handshake()
		io.Copy(io.Discard, c)
		c.Close()
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return tls.Client(conn, cfg).Handshake()
}

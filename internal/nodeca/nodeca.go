// Package nodeca is the certificate authority of the node API: the API
// servers sign each node's serving certificate when it joins, for the
// node's name and no other, and verify that name on every connection
// they open to it. The node makes its own private key; only its
// certificate request leaves it.
//
// The authority's key is derived from the API servers' key, and its
// certificate is made the same way from it on every replica (fixed serial,
// validity and subject, Ed25519's deterministic signature), so replicas
// agree on it without sharing anything but the key they already hold.
package nodeca

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CertTTL is how long a node's certificate is good for; a node renews
// it at half its life.
const CertTTL = 7 * 24 * time.Hour

// CA signs and checks nodes' serving certificates.
type CA struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
	pool *x509.CertPool
}

// New makes the authority from seed (32 bytes derived from the API
// servers' key).
func New(seed []byte) (*CA, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("node CA: a seed of %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	key := ed25519.NewKeyFromSeed(seed)
	pub := key.Public().(ed25519.PublicKey)
	ski := sha256.Sum256(pub)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hvkube CA"},
		NotBefore:             time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski[:20],
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("node CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("node CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{key: key, cert: cert, pool: pool}, nil
}

// PEM is the authority's certificate.
func (c *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})
}

// Sign checks the certificate request csrPEM (its own signature) and
// returns a serving certificate for node, whatever names the request
// asks for: the node's name is the one thing the certificate says.
func (c *CA) Sign(csrPEM []byte, node string, now time.Time) ([]byte, error) {
	blk, _ := pem.Decode(csrPEM)
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("no PEM CERTIFICATE REQUEST block")
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the request's signature: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: node},
		DNSNames:       []string{node},
		NotBefore:      now.Add(-5 * time.Minute),
		NotAfter:       now.Add(CertTTL),
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		AuthorityKeyId: c.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, csr.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// ClientConfig is the TLS configuration an API server reaches node by:
// the node's certificate must be this authority's, for that node's name.
func (c *CA) ClientConfig(node string) *tls.Config {
	return &tls.Config{RootCAs: c.pool, ServerName: node, MinVersion: tls.VersionTLS13}
}

// NewRequest makes a node's private key and its certificate request.
func NewRequest(node string) (ed25519.PrivateKey, []byte, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: node}, DNSNames: []string{node}}, key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// KeyPair is a node's serving certificate with its key.
func KeyPair(certPEM []byte, key ed25519.PrivateKey) (*tls.Certificate, error) {
	blk, _ := pem.Decode(certPEM)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, err
	}
	if !key.Public().(ed25519.PublicKey).Equal(leaf.PublicKey) {
		return nil, errors.New("the certificate is not for this node's key")
	}
	return &tls.Certificate{Certificate: [][]byte{blk.Bytes}, PrivateKey: key, Leaf: leaf}, nil
}

// Issue makes a key and a serving certificate for names (host names, or
// IP addresses) signed by the authority: for a server of the API servers'
// own (the admission webhook), whose key never leaves them.
func (c *CA) Issue(names []string, now time.Time) (*tls.Certificate, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: names[0]},
		NotBefore:      now.Add(-5 * time.Minute),
		NotAfter:       now.Add(CertTTL),
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		AuthorityKeyId: c.cert.SubjectKeyId,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

package authtoken

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Node-API requests: an API server reaches a node agent (hvkube node)
// with a credential made for one request. It names the node, the method
// and the path (so the sandbox), lives NodeRequestTTL, and carries a
// random ID the node remembers until it expires, so a captured one opens
// nothing else and nothing twice. It is signed with Ed25519 under a key
// derived from the API servers' key: the nodes hold only the public half
// (NodeVerifier), so a node, and whoever takes one over, can check the API
// servers' requests but mint none, for itself or for another node.
//
// Node identities: a node proves who it is to the API servers (to get its
// agents' tokens) with a credential that names it and only it. Outside a
// cluster it is a NodeIdentity token, minted once by whoever holds the
// key (hvkube token node NAME) and handed to that node alone; it is checked
// under the key, which stays on the API servers, so it mints nothing.

// Prefixes of the node tokens. hvkn1 (a token for a whole node, signed
// under the key the nodes held too) is refused.
const (
	nodeRequestPrefix  = "hvkn2."
	nodeIdentityPrefix = "hvki1."
)

// NodeRequestTTL is how long a node-API request's credential lives: long
// enough for clocks a little apart, short enough that one seen is soon
// worth nothing.
const NodeRequestTTL = 30 * time.Second

// maxNodeToken bounds the token text the verifiers look at.
const maxNodeToken = 4096

// nodeRequestClaims are what a node-API request's credential says.
type nodeRequestClaims struct {
	Node    string `json:"node"`
	Method  string `json:"m"`
	Path    string `json:"p"`
	ID      string `json:"id"`
	Expires int64  `json:"exp"`
}

// NodeSigner mints node-API request credentials: the API servers hold it.
type NodeSigner struct{ priv ed25519.PrivateKey }

// NodeVerifier checks them: the public half, what a node holds.
type NodeVerifier struct{ pub ed25519.PublicKey }

// NodeSigner is k's node-API signing key, the same on every API server
// that holds k.
func (k Key) NodeSigner() NodeSigner {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("hvkube node API request key v2"))
	return NodeSigner{priv: ed25519.NewKeyFromSeed(m.Sum(nil))}
}

// Verifier is the public half of s.
func (s NodeSigner) Verifier() NodeVerifier {
	return NodeVerifier{pub: s.priv.Public().(ed25519.PublicKey)}
}

// MintRequest returns a credential for one request: method on path of
// node, until now+NodeRequestTTL.
func (s NodeSigner) MintRequest(node, method, path string, now time.Time) string {
	id := make([]byte, 16)
	rand.Read(id)
	body, _ := json.Marshal(nodeRequestClaims{Node: node, Method: method, Path: path,
		ID: hex.EncodeToString(id), Expires: now.Add(NodeRequestTTL).Unix()})
	return signRequestBody(s, base64.RawURLEncoding.EncodeToString(body))
}

// signRequestBody signs the encoded claims b: the prefix is signed too.
func signRequestBody(s NodeSigner, b string) string {
	return nodeRequestPrefix + b + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.priv, []byte(nodeRequestPrefix+b)))
}

// VerifyRequest checks that tok is a credential for method on path of
// node, signed by an API server and not expired; it returns the
// credential's ID and expiry, for the node to refuse it a second time.
// Anything else is ErrInvalid.
func (v NodeVerifier) VerifyRequest(tok, node, method, path string, now time.Time) (string, time.Time, error) {
	if len(tok) > maxNodeToken || node == "" || len(v.pub) != ed25519.PublicKeySize {
		return "", time.Time{}, ErrInvalid
	}
	rest, ok := strings.CutPrefix(tok, nodeRequestPrefix)
	if !ok {
		return "", time.Time{}, ErrInvalid
	}
	b, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return "", time.Time{}, ErrInvalid
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !ed25519.Verify(v.pub, []byte(nodeRequestPrefix+b), got) {
		return "", time.Time{}, ErrInvalid
	}
	body, err := base64.RawURLEncoding.DecodeString(b)
	var c nodeRequestClaims
	if err == nil {
		err = json.Unmarshal(body, &c)
	}
	exp := time.Unix(c.Expires, 0)
	switch {
	case err != nil, c.Node != node, c.Method != method, c.Path != path, c.ID == "",
		!now.Before(exp),
		// Minted with a longer life than any API server gives: refused,
		// whoever signed it.
		exp.Sub(now) > 2*NodeRequestTTL:
		return "", time.Time{}, ErrInvalid
	}
	return c.ID, exp, nil
}

// PEM is the verifier as a PEM "PUBLIC KEY" block, the file a node is
// given (--api-key-file).
func (v NodeVerifier) PEM() []byte {
	der, _ := x509.MarshalPKIXPublicKey(v.pub)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// ParseNodeVerifier reads a verifier from its PEM form.
func ParseNodeVerifier(b []byte) (NodeVerifier, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return NodeVerifier{}, errors.New("no PEM PUBLIC KEY block")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return NodeVerifier{}, err
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return NodeVerifier{}, fmt.Errorf("a %T key, not Ed25519", k)
	}
	return NodeVerifier{pub: pub}, nil
}

// nodeIdentityClaims are what a node identity says.
type nodeIdentityClaims struct {
	Node    string `json:"node"`
	Expires int64  `json:"exp"`
}

func (k Key) identityMAC(b string) []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("hvkube node identity v1"))
	m = hmac.New(sha256.New, m.Sum(nil))
	m.Write([]byte(b))
	return m.Sum(nil)
}

// MintNodeIdentity returns node's identity, valid until now+ttl: what
// that node, and only it, is given to prove who it is.
func (k Key) MintNodeIdentity(node string, now time.Time, ttl time.Duration) string {
	body, _ := json.Marshal(nodeIdentityClaims{Node: node, Expires: now.Add(ttl).Unix()})
	b := base64.RawURLEncoding.EncodeToString(body)
	return nodeIdentityPrefix + b + "." + base64.RawURLEncoding.EncodeToString(k.identityMAC(b))
}

// IsNodeIdentity reports whether tok looks like a node identity.
func IsNodeIdentity(tok string) bool { return strings.HasPrefix(tok, nodeIdentityPrefix) }

// VerifyNodeIdentity returns the node tok names if k signed it and it has
// not expired; else ErrInvalid.
func (k Key) VerifyNodeIdentity(tok string, now time.Time) (string, error) {
	if len(tok) > maxNodeToken {
		return "", ErrInvalid
	}
	rest, ok := strings.CutPrefix(tok, nodeIdentityPrefix)
	if !ok {
		return "", ErrInvalid
	}
	b, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return "", ErrInvalid
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, k.identityMAC(b)) {
		return "", ErrInvalid
	}
	body, err := base64.RawURLEncoding.DecodeString(b)
	var c nodeIdentityClaims
	if err == nil {
		err = json.Unmarshal(body, &c)
	}
	if err != nil || c.Node == "" || now.Unix() >= c.Expires {
		return "", ErrInvalid
	}
	return c.Node, nil
}

// NodeCASeed is the seed of the node API's certificate authority
// (internal/nodeca), derived from k: the same on every API server that
// holds k, and nothing a node can compute.
func (k Key) NodeCASeed() []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("hvkube node API CA v1"))
	return m.Sum(nil)
}

// APICASeed is the seed of the authority of the API servers' own TLS
// certificate (internal/nodeca), derived from k: the one nodes, clients
// and the Kubernetes API server (for the admission webhook) check them by.
func (k Key) APICASeed() []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("hvkube API servers CA v1"))
	return m.Sum(nil)
}

// SecretSeed is the key that seals the values of hvkube's Secrets
// (internal/secrets), derived from k: the same on every API server that
// holds k, and nothing a node or the store can compute.
func (k Key) SecretSeed() []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("hvkube Secret values v1"))
	return m.Sum(nil)
}

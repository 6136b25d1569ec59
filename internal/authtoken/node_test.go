package authtoken

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestNodeRequest: a node-API credential opens the one request it names
// (node, method, path) until it expires, and nothing else passes for one:
// another node's, method's or path's, another key's, an edited, re-signed
// or oversized one, one minted for too long, an agent's or display token.
func TestNodeRequest(t *testing.T) {
	k := Key([]byte(strings.Repeat("k", 32)))
	other := Key([]byte(strings.Repeat("o", 32)))
	s, v := k.NodeSigner(), k.NodeSigner().Verifier()
	now := time.Unix(1_800_000_000, 0)
	const path = "/node/v1/sandboxes/sb/exec"
	tok := s.MintRequest("node-a", "POST", path, now)
	id, exp, err := v.VerifyRequest(tok, "node-a", "POST", path, now.Add(NodeRequestTTL-time.Second))
	if err != nil || id == "" || !exp.Equal(now.Add(NodeRequestTTL)) {
		t.Fatalf("verify: %q %v %v", id, exp, err)
	}
	if again := s.MintRequest("node-a", "POST", path, now); again == tok {
		t.Error("two credentials for the same request are the same: a node could not tell a replay")
	}
	// A node holds only v: the best it can sign with is a key of its own.
	forged := other.NodeSigner().MintRequest("node-a", "POST", path, now)
	scoped := k.Mint(Scope{Sandbox: "sb", Agent: "a", UID: "u", Attempt: 1}, now, time.Minute)
	display, _ := k.MintDisplay(DisplayClaims{Sandbox: "sb"}, now, time.Minute)
	ident := k.MintNodeIdentity("node-a", now, time.Hour)
	for name, tt := range map[string]struct {
		v            NodeVerifier
		tok          string
		node, method string
		path         string
		at           time.Time
	}{
		"expired":         {v, tok, "node-a", "POST", path, now.Add(NodeRequestTTL)},
		"other node":      {v, tok, "node-b", "POST", path, now},
		"other method":    {v, tok, "node-a", "GET", path, now},
		"other path":      {v, tok, "node-a", "POST", "/node/v1/sandboxes/sb2/exec", now},
		"other verb path": {v, tok, "node-a", "POST", "/node/v1/sandboxes/sb/reset", now},
		"other key":       {other.NodeSigner().Verifier(), tok, "node-a", "POST", path, now},
		"signed by other": {v, forged, "node-a", "POST", path, now},
		"tampered":        {v, tampered(tok), "node-a", "POST", path, now},
		"claims edited":   {v, edited(t, tok, func(c *nodeRequestClaims) { c.Path = "/node/v1/sandboxes/sb2/exec" }), "node-a", "POST", "/node/v1/sandboxes/sb2/exec", now},
		"no prefix":       {v, strings.TrimPrefix(tok, nodeRequestPrefix), "node-a", "POST", path, now},
		"oversized":       {v, tok + strings.Repeat("A", maxNodeToken), "node-a", "POST", path, now},
		"scoped token":    {v, scoped, "node-a", "POST", path, now},
		"display token":   {v, display, "node-a", "POST", path, now},
		"node identity":   {v, ident, "node-a", "POST", path, now},
		"empty":           {v, "", "node-a", "POST", path, now},
		"no verifier":     {NodeVerifier{}, tok, "node-a", "POST", path, now},
	} {
		if _, _, err := tt.v.VerifyRequest(tt.tok, tt.node, tt.method, tt.path, tt.at); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// One minted with too long a life is refused even when well signed.
	tooLong := mintWith(s, nodeRequestClaims{Node: "node-a", Method: "POST", Path: path, ID: "x", Expires: now.Add(time.Hour).Unix()})
	if _, _, err := v.VerifyRequest(tooLong, "node-a", "POST", path, now); err == nil {
		t.Error("a credential living an hour was accepted")
	}
	if _, err := k.Verify(tok, now); err == nil {
		t.Error("a node-API credential passed for an agent's scoped token")
	}
	if _, err := k.VerifyNodeIdentity(tok, now); err == nil {
		t.Error("a node-API credential passed for a node identity")
	}
}

// TestNodeVerifierPEM: the public key a node is given reads back, and a
// private key or another block is refused.
func TestNodeVerifierPEM(t *testing.T) {
	k := Key([]byte(strings.Repeat("k", 32)))
	v := k.NodeSigner().Verifier()
	got, err := ParseNodeVerifier(v.PEM())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, _, err := got.VerifyRequest(k.NodeSigner().MintRequest("n", "GET", "/p", now), "n", "GET", "/p", now); err != nil {
		t.Errorf("the parsed key does not verify: %v", err)
	}
	for _, bad := range []string{"", "junk", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", string(k)} {
		if _, err := ParseNodeVerifier([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if strings.Contains(string(v.PEM()), base64.StdEncoding.EncodeToString(k)) {
		t.Error("the public key file holds the key")
	}
}

// TestNodeIdentity: a node's identity names it until it expires; another
// key's, an edited one, or any other token is not one.
func TestNodeIdentity(t *testing.T) {
	k := Key([]byte(strings.Repeat("k", 32)))
	other := Key([]byte(strings.Repeat("o", 32)))
	now := time.Unix(1_800_000_000, 0)
	tok := k.MintNodeIdentity("node-a", now, time.Hour)
	if n, err := k.VerifyNodeIdentity(tok, now); err != nil || n != "node-a" {
		t.Fatalf("verify = %q, %v", n, err)
	}
	if !IsNodeIdentity(tok) || Is(tok) {
		t.Error("a node identity is not told apart from a scoped token")
	}
	for name, tt := range map[string]struct {
		k   Key
		tok string
		at  time.Time
	}{
		"expired":       {k, tok, now.Add(time.Hour)},
		"other key":     {other, tok, now},
		"tampered":      {k, tampered(tok), now},
		"no node":       {k, k.MintNodeIdentity("", now, time.Hour), now},
		"scoped token":  {k, k.Mint(Scope{Sandbox: "sb", Agent: "a", UID: "u", Attempt: 1}, now, time.Minute), now},
		"node request":  {k, k.NodeSigner().MintRequest("node-a", "GET", "/", now), now},
		"oversized":     {k, tok + strings.Repeat("A", maxNodeToken), now},
		"claims edited": {k, strings.Replace(tok, nodeIdentityPrefix+"e", nodeIdentityPrefix+"f", 1), now},
	} {
		if _, err := tt.k.VerifyNodeIdentity(tt.tok, tt.at); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// mintWith signs claims as MintRequest does, whatever they say.
func mintWith(s NodeSigner, c nodeRequestClaims) string {
	body, _ := json.Marshal(c)
	b := base64.RawURLEncoding.EncodeToString(body)
	return signRequestBody(s, b)
}

// edited changes tok's claims and keeps its signature.
func edited(t *testing.T, tok string, f func(*nodeRequestClaims)) string {
	t.Helper()
	b, sig, _ := strings.Cut(strings.TrimPrefix(tok, nodeRequestPrefix), ".")
	body, err := base64.RawURLEncoding.DecodeString(b)
	if err != nil {
		t.Fatal(err)
	}
	var c nodeRequestClaims
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	f(&c)
	nb, _ := json.Marshal(c)
	return nodeRequestPrefix + base64.RawURLEncoding.EncodeToString(nb) + "." + sig
}

// BenchmarkNodeRequest is what each request to a node costs its two ends:
// the API server's signature, and the node's check.
func BenchmarkNodeRequest(b *testing.B) {
	k := Key([]byte(strings.Repeat("k", 32)))
	s, v := k.NodeSigner(), k.NodeSigner().Verifier()
	const path = "/node/v1/sandboxes/sb/input"
	now := time.Now()
	b.Run("mint", func(b *testing.B) {
		for b.Loop() {
			s.MintRequest("node-a", "POST", path, now)
		}
	})
	tok := s.MintRequest("node-a", "POST", path, now)
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := v.VerifyRequest(tok, "node-a", "POST", path, now); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// tampered is tok with one character of its signature changed: one in
// the middle, every bit of which counts (the last character of unpadded
// base64 carries padding bits a decoder may ignore).
func tampered(tok string) string {
	i := len(tok) - 10
	c := byte('A')
	if tok[i] == 'A' {
		c = 'B'
	}
	return tok[:i] + string(c) + tok[i+1:]
}

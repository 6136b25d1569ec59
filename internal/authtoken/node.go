package authtoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// Node tokens let an API server reach one node agent (hvkube node): the
// agent answers only requests that carry a token naming it, signed under
// the key the API servers and the nodes share and still valid. They are
// short-lived, so that one seen on the wire is soon worth nothing, and
// signed under a key derived with a label of its own, so that no other
// token of hvkube can stand for one.

// nodePrefix starts every node token.
const nodePrefix = "hvkn1."

// maxNodeToken bounds the token text VerifyNode looks at.
const maxNodeToken = 1024

// nodeClaims are what a node token says.
type nodeClaims struct {
	Node    string `json:"node"`
	Expires int64  `json:"exp"`
}

func (k Key) nodeKey() []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("hvkube node token v1"))
	return m.Sum(nil)
}

func (k Key) nodeMAC(b string) []byte {
	m := hmac.New(sha256.New, k.nodeKey())
	m.Write([]byte(b))
	return m.Sum(nil)
}

// MintNode returns a token that reaches the node agent of node until
// now+ttl.
func (k Key) MintNode(node string, now time.Time, ttl time.Duration) string {
	body, _ := json.Marshal(nodeClaims{Node: node, Expires: now.Add(ttl).Unix()})
	b := base64.RawURLEncoding.EncodeToString(body)
	return nodePrefix + b + "." + base64.RawURLEncoding.EncodeToString(k.nodeMAC(b))
}

// VerifyNode checks that tok is a node token for node, signed under k and
// not expired; else it returns ErrInvalid.
func (k Key) VerifyNode(tok, node string, now time.Time) error {
	if len(tok) > maxNodeToken || node == "" {
		return ErrInvalid
	}
	rest, ok := strings.CutPrefix(tok, nodePrefix)
	if !ok {
		return ErrInvalid
	}
	b, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return ErrInvalid
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, k.nodeMAC(b)) {
		return ErrInvalid
	}
	body, err := base64.RawURLEncoding.DecodeString(b)
	var c nodeClaims
	if err == nil {
		err = json.Unmarshal(body, &c)
	}
	if err != nil || c.Node != node || now.Unix() >= c.Expires {
		return ErrInvalid
	}
	return nil
}

// Package authtoken mints and checks scoped API tokens: what the server
// hands an agent's program so that it reaches its own sandbox and agent
// and nothing else. A token is the scope and its expiry, signed with
// HMAC-SHA256 under a key only the server holds; nothing is stored.
package authtoken

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// prefix starts every scoped token, so that it is never mistaken for the
// server's own token.
const prefix = "hvks1."

// Scope is what a token reaches.
type Scope struct {
	Sandbox string `json:"sb,omitempty"`
	Agent   string `json:"ag,omitempty"`
	Expires int64  `json:"exp"`
}

// Key signs tokens.
type Key []byte

// Is reports whether tok looks like a scoped token.
func Is(tok string) bool { return strings.HasPrefix(tok, prefix) }

// Mint returns a token for scope, valid until now+ttl.
func (k Key) Mint(s Scope, now time.Time, ttl time.Duration) string {
	s.Expires = now.Add(ttl).Unix()
	body, _ := json.Marshal(s)
	b := base64.RawURLEncoding.EncodeToString(body)
	return prefix + b + "." + base64.RawURLEncoding.EncodeToString(k.mac(b))
}

func (k Key) mac(b string) []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte(b))
	return m.Sum(nil)
}

// ErrInvalid is a token that is malformed, forged or expired.
var ErrInvalid = errors.New("invalid or expired token")

// Verify returns the scope of tok if its signature holds and it has not
// expired.
func (k Key) Verify(tok string, now time.Time) (Scope, error) {
	rest, ok := strings.CutPrefix(tok, prefix)
	if !ok {
		return Scope{}, ErrInvalid
	}
	b, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return Scope{}, ErrInvalid
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, k.mac(b)) {
		return Scope{}, ErrInvalid
	}
	body, err := base64.RawURLEncoding.DecodeString(b)
	var s Scope
	if err == nil {
		err = json.Unmarshal(body, &s)
	}
	if err != nil || now.Unix() >= s.Expires {
		return Scope{}, ErrInvalid
	}
	return s, nil
}

// LoadOrCreate reads the key in path, or makes a new random one there
// (mode 0600). Keeping it lets tokens outlive a restart of the server.
func LoadOrCreate(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) >= 32 {
		return Key(b), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("token key %s: %w", path, err)
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, k, 0o600); err != nil {
		return nil, fmt.Errorf("token key %s: %w", path, err)
	}
	return Key(k), nil
}

// Package authtoken mints and checks scoped API tokens: what the server
// hands an agent's program so that it reaches its own sandbox and agent
// and nothing else. A token is the scope and its expiry, signed with
// HMAC-SHA256 under a key only the server holds; nothing is stored.
//
// A scope names one attempt of one agent: the agent's name and UID (so a
// deleted agent's token never reaches one re-created under its name), the
// attempt's number (so a token of attempt 1 never acts for attempt 2) and
// the sandbox the attempt is bound to. The server checks at every use that
// the attempt still holds the sandbox; the signature only says the server
// issued the token.
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

	"github.com/hvkube/hvkube/internal/api"
)

// prefix starts every scoped token, so that it is never mistaken for the
// server's own token. hvks1 tokens named no attempt and are refused.
const prefix = "hvks2."

// Scope is what a token reaches: one attempt of one agent, and the
// sandbox that attempt is bound to.
type Scope struct {
	Sandbox string `json:"sb"`
	Agent   string `json:"ag"`
	// UID is the agent's metadata.uid.
	UID string `json:"uid"`
	// Attempt is the number of the attempt (status.attempts while it
	// runs).
	Attempt int   `json:"at"`
	Expires int64 `json:"exp"`
}

// ForAttempt is the scope of agent a's attempt number attempt on its
// bound sandbox.
func ForAttempt(a *api.Agent, attempt int) Scope {
	return Scope{Sandbox: a.Status.Sandbox, Agent: a.Metadata.Name, UID: a.Metadata.UID, Attempt: attempt}
}

// complete reports whether s names everything a scope must.
func (s Scope) complete() bool {
	return s.Sandbox != "" && s.Agent != "" && s.UID != "" && s.Attempt > 0
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
	if err != nil || now.Unix() >= s.Expires || !s.complete() {
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

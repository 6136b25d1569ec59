package authtoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// Display tokens let a browser open one sandbox's live view: browsers
// cannot set headers on a WebSocket, so the token travels in the URL and
// must be short-lived and narrow. They are JSON Web Tokens (RFC 7519)
// signed with HS256 under a key derived from the server's key, so that
// other tools can read them; only the server can make or check one.

// DisplayAudience is the aud claim of every display token.
const DisplayAudience = "display"

// Bounds on a display token's lifetime.
const (
	DefaultDisplayTTL = 5 * time.Minute
	MaxDisplayTTL     = time.Hour
)

// maxDisplayToken bounds the token text that Verify looks at.
const maxDisplayToken = 4096

// DisplayClaims are what a display token says.
type DisplayClaims struct {
	// Sandbox is the sandbox whose display the token opens (sub).
	Sandbox string `json:"sub"`
	// Audience is always DisplayAudience.
	Audience  string `json:"aud"`
	IssuedAt  int64  `json:"iat"`
	ExpiresAt int64  `json:"exp"`
	// Control, when set, is the take-over ID whose holder may send input
	// through the display (ctl); input passes only while it is the
	// sandbox's current status.control.id.
	Control string `json:"ctl,omitempty"`
	// Agent, AgentUID and Attempt bind a token minted with an agent's
	// scoped token to that attempt (agt, auid, att): the view lasts only
	// while the attempt holds the sandbox.
	Agent    string `json:"agt,omitempty"`
	AgentUID string `json:"auid,omitempty"`
	Attempt  int    `json:"att,omitempty"`
}

// AgentScope returns the attempt a token is bound to, if it is.
func (c DisplayClaims) AgentScope() (Scope, bool) {
	if c.Agent == "" {
		return Scope{}, false
	}
	return Scope{Sandbox: c.Sandbox, Agent: c.Agent, UID: c.AgentUID, Attempt: c.Attempt}, true
}

// ForScope binds claims to the attempt of sc.
func (c DisplayClaims) ForScope(sc Scope) DisplayClaims {
	c.Agent, c.AgentUID, c.Attempt = sc.Agent, sc.UID, sc.Attempt
	return c
}

// Errors of VerifyDisplay. A malformed or forged token is ErrInvalid.
var (
	ErrExpired = errors.New("the display token has expired")
)

// jwtHeader is the fixed JOSE header of display tokens, encoded.
var jwtHeader = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))

// displayKey is the key that signs display tokens: the server's key run
// through HMAC with a label, so that a display token's signature can never
// stand for a scoped token's or the other way round.
func (k Key) displayKey() []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("hvkube display token v1"))
	return m.Sum(nil)
}

// IsDisplay reports whether tok is shaped like a display token (a JWT).
func IsDisplay(tok string) bool {
	return strings.HasPrefix(tok, "eyJ") && strings.Count(tok, ".") == 2
}

// MintDisplay returns a display token with the claims c (the sandbox, and
// the take-over or the attempt it carries, if any), valid for ttl from now
// (DefaultDisplayTTL when 0; the caller bounds it by MaxDisplayTTL), and
// its expiry.
func (k Key) MintDisplay(c DisplayClaims, now time.Time, ttl time.Duration) (string, time.Time) {
	if ttl <= 0 {
		ttl = DefaultDisplayTTL
	}
	return k.mintJWT(DisplayAudience, c, now, ttl)
}

// mintJWT signs c for audience aud, valid for ttl from now.
func (k Key) mintJWT(aud string, c DisplayClaims, now time.Time, ttl time.Duration) (string, time.Time) {
	exp := now.Add(ttl).Truncate(time.Second)
	c.Audience, c.IssuedAt, c.ExpiresAt = aud, now.Unix(), exp.Unix()
	body, _ := json.Marshal(c)
	signing := jwtHeader + "." + base64.RawURLEncoding.EncodeToString(body)
	return signing + "." + base64.RawURLEncoding.EncodeToString(k.signDisplay(signing)), exp
}

func (k Key) signDisplay(signing string) []byte {
	m := hmac.New(sha256.New, k.displayKey())
	m.Write([]byte(signing))
	return m.Sum(nil)
}

// VerifyDisplay checks tok's signature, header, audience and expiry and
// returns its claims: ErrInvalid for a token that is malformed, not HS256,
// not for the display or signed with another key; ErrExpired for one whose
// time is up. It does not check which sandbox the token is for.
func (k Key) VerifyDisplay(tok string, now time.Time) (DisplayClaims, error) {
	return k.verifyJWT(DisplayAudience, tok, now)
}

// TerminalAudience is the aud claim of terminal tokens: what a browser
// opens a sandbox's terminal WebSocket with (it cannot set the header).
// A display token, which a live-view link carries and which may be
// shared, never opens a terminal, nor a terminal token a display.
const TerminalAudience = "terminal"

// TerminalTTL is a terminal token's life: long enough to open the
// WebSocket it was minted for.
const TerminalTTL = time.Minute

// MintTerminal returns a token that opens sandbox's terminal for
// TerminalTTL, and its expiry.
func (k Key) MintTerminal(sandbox string, now time.Time) (string, time.Time) {
	return k.mintJWT(TerminalAudience, DisplayClaims{Sandbox: sandbox}, now, TerminalTTL)
}

// VerifyTerminal checks a terminal token as VerifyDisplay checks a
// display token, and returns the sandbox it opens.
func (k Key) VerifyTerminal(tok string, now time.Time) (string, error) {
	c, err := k.verifyJWT(TerminalAudience, tok, now)
	return c.Sandbox, err
}

// verifyJWT checks tok as a token of audience aud.
func (k Key) verifyJWT(aud, tok string, now time.Time) (DisplayClaims, error) {
	if len(tok) > maxDisplayToken {
		return DisplayClaims{}, ErrInvalid
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return DisplayClaims{}, ErrInvalid
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, k.signDisplay(parts[0]+"."+parts[1])) {
		return DisplayClaims{}, ErrInvalid
	}
	// The signature holds, so the header is one this server wrote; check
	// it anyway, so that a token is never read under another algorithm.
	hb, err := base64.RawURLEncoding.DecodeString(parts[0])
	var h struct {
		Alg string `json:"alg"`
	}
	if err != nil || json.Unmarshal(hb, &h) != nil || h.Alg != "HS256" {
		return DisplayClaims{}, ErrInvalid
	}
	body, err := base64.RawURLEncoding.DecodeString(parts[1])
	var c DisplayClaims
	if err != nil || json.Unmarshal(body, &c) != nil || c.Audience != aud || c.Sandbox == "" || c.ExpiresAt == 0 {
		return DisplayClaims{}, ErrInvalid
	}
	if now.Unix() >= c.ExpiresAt {
		return c, ErrExpired
	}
	return c, nil
}

// ControlKey is the secret that proves input comes from the holder of
// take-over id of sandbox (the X-Hvkube-Control header): status.control.id
// names a take-over where anyone who reads the sandbox sees it, so the key
// is derived from it under the server's key and handed only to the person
// who took control.
func (k Key) ControlKey(sandbox, id string) string {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("hvkube control key v1\x00" + sandbox + "\x00" + id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// CheckControlKey reports whether key is the control key of take-over id
// of sandbox.
func (k Key) CheckControlKey(sandbox, id, key string) bool {
	return id != "" && hmac.Equal([]byte(key), []byte(k.ControlKey(sandbox, id)))
}

package authtoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDisplayToken(t *testing.T) {
	k := Key([]byte(strings.Repeat("k", 32)))
	now := time.Unix(1_800_000_000, 0)
	tok, exp := k.MintDisplay(DisplayClaims{Sandbox: "sb-1", Control: "take-1"}, now, 2*time.Minute)
	if !IsDisplay(tok) {
		t.Fatalf("%q is not shaped like a JWT", tok)
	}
	if want := now.Add(2 * time.Minute); !exp.Equal(want) {
		t.Fatalf("expiry %s, want %s", exp, want)
	}
	c, err := k.VerifyDisplay(tok, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := DisplayClaims{Sandbox: "sb-1", Audience: "display", IssuedAt: now.Unix(), ExpiresAt: exp.Unix(), Control: "take-1"}
	if c != want {
		t.Fatalf("claims %+v, want %+v", c, want)
	}
	if _, exp := k.MintDisplay(DisplayClaims{Sandbox: "sb-1", Control: ""}, now, 0); exp.Sub(now) != DefaultDisplayTTL {
		t.Fatalf("default ttl %s", exp.Sub(now))
	}

	// A standard HS256 JWT: header and signature as any JWT library makes
	// them, under the derived key.
	parts := strings.Split(tok, ".")
	if parts[0] != "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" {
		t.Fatalf("header %s", parts[0])
	}
	m := hmac.New(sha256.New, k.displayKey())
	m.Write([]byte(parts[0] + "." + parts[1]))
	if got := base64.RawURLEncoding.EncodeToString(m.Sum(nil)); got != parts[2] {
		t.Fatalf("signature %s, want %s", parts[2], got)
	}

	sign := func(header, claims string) string {
		s := base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + base64.RawURLEncoding.EncodeToString([]byte(claims))
		return s + "." + base64.RawURLEncoding.EncodeToString(k.signDisplay(s))
	}
	claims := func(c DisplayClaims) string { b, _ := json.Marshal(c); return string(b) }
	other := Key([]byte(strings.Repeat("o", 32)))
	for _, tt := range []struct {
		name string
		k    Key
		tok  string
		at   time.Time
		want error
	}{
		{"expired", k, tok, exp, ErrExpired},
		{"long expired", k, tok, exp.Add(time.Hour), ErrExpired},
		{"other key", other, tok, now, ErrInvalid},
		{"signature changed", k, tok[:len(tok)-3] + "AAA", now, ErrInvalid},
		{"claims changed", k, parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"sb-2","aud":"display","exp":9999999999}`)) + "." + parts[2], now, ErrInvalid},
		{"alg none", k, parts[0][:0] + base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + parts[1] + ".", now, ErrInvalid},
		{"signed alg none", k, sign(`{"alg":"none"}`, parts[1]), now, ErrInvalid},
		{"wrong audience", k, sign(`{"alg":"HS256"}`, claims(DisplayClaims{Sandbox: "sb-1", Audience: "api", ExpiresAt: exp.Unix()})), now, ErrInvalid},
		{"no subject", k, sign(`{"alg":"HS256"}`, claims(DisplayClaims{Audience: "display", ExpiresAt: exp.Unix()})), now, ErrInvalid},
		{"no expiry", k, sign(`{"alg":"HS256"}`, claims(DisplayClaims{Sandbox: "sb-1", Audience: "display"})), now, ErrInvalid},
		{"two parts", k, parts[0] + "." + parts[1], now, ErrInvalid},
		{"scoped token", k, k.Mint(Scope{Sandbox: "sb-1"}, now, time.Minute), now, ErrInvalid},
		{"too long", k, tok + strings.Repeat("A", maxDisplayToken), now, ErrInvalid},
		{"empty", k, "", now, ErrInvalid},
	} {
		if _, err := tt.k.VerifyDisplay(tt.tok, tt.at); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
}

package authtoken

import (
	"strings"
	"testing"
	"time"
)

// TestNodeToken: a node token reaches the node it names until it expires,
// and nothing else passes for one: another node's, another key's, an
// edited or oversized one, an agent's scoped token or a display token.
func TestNodeToken(t *testing.T) {
	k := Key([]byte(strings.Repeat("k", 32)))
	other := Key([]byte(strings.Repeat("o", 32)))
	now := time.Unix(1_800_000_000, 0)
	tok := k.MintNode("node-a", now, time.Minute)
	if err := k.VerifyNode(tok, "node-a", now.Add(59*time.Second)); err != nil {
		t.Fatalf("verify: %v", err)
	}
	scoped := k.Mint(Scope{Sandbox: "sb", Agent: "a", UID: "u", Attempt: 1}, now, time.Minute)
	display, _ := k.MintDisplay(DisplayClaims{Sandbox: "sb"}, now, time.Minute)
	for name, tt := range map[string]struct {
		k    Key
		tok  string
		node string
		at   time.Time
	}{
		"expired":       {k, tok, "node-a", now.Add(time.Minute)},
		"other node":    {k, tok, "node-b", now},
		"no node":       {k, k.MintNode("", now, time.Minute), "", now},
		"other key":     {other, tok, "node-a", now},
		"tampered":      {k, tok[:len(tok)-2] + "AA", "node-a", now},
		"claims edited": {k, strings.Replace(tok, nodePrefix+"e", nodePrefix+"f", 1), "node-a", now},
		"no prefix":     {k, strings.TrimPrefix(tok, nodePrefix), "node-a", now},
		"oversized":     {k, tok + strings.Repeat("A", maxNodeToken), "node-a", now},
		"scoped token":  {k, scoped, "node-a", now},
		"display token": {k, display, "node-a", now},
		"empty":         {k, "", "node-a", now},
	} {
		if err := tt.k.VerifyNode(tt.tok, tt.node, tt.at); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := k.Verify(tok, now); err == nil {
		t.Error("a node token passed for an agent's scoped token")
	}
}

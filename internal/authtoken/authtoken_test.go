package authtoken

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMintVerify(t *testing.T) {
	k, err := LoadOrCreate(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	tok := k.Mint(Scope{Sandbox: "sb-1", Agent: "job", UID: "u-1", Attempt: 2}, now, time.Minute)
	s, err := k.Verify(tok, now.Add(30*time.Second))
	if err != nil || s.Sandbox != "sb-1" || s.Agent != "job" || s.UID != "u-1" || s.Attempt != 2 {
		t.Fatalf("verify: %+v %v", s, err)
	}
	other := Key([]byte(strings.Repeat("x", 32)))
	for name, tt := range map[string]struct {
		k   Key
		tok string
		at  time.Time
	}{
		"expired":      {k, tok, now.Add(time.Minute)},
		"other key":    {other, tok, now},
		"tampered":     {k, tampered(tok), now},
		"scope edited": {k, strings.Replace(tok, "hvks2.e", "hvks2.f", 1), now},
		"no prefix":    {k, strings.TrimPrefix(tok, prefix), now},
		"garbage":      {k, "hvks2.x", now},
		"no attempt":   {k, k.Mint(Scope{Sandbox: "sb-1", Agent: "job", UID: "u-1"}, now, time.Minute), now},
		"no uid":       {k, k.Mint(Scope{Sandbox: "sb-1", Agent: "job", Attempt: 1}, now, time.Minute), now},
		"old format":   {k, "hvks1." + strings.TrimPrefix(tok, prefix), now},
	} {
		if _, err := tt.k.Verify(tt.tok, tt.at); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

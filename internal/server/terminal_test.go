package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/display"
)

// TestTerminalRefusals is what a page or an agent would try first on the
// terminal: open it with no credential, with a display token (which a
// shared live-view link carries), with another sandbox's terminal token,
// a forged or an expired one, mint a terminal token with an agent's
// token, or open it as a plain GET.
func TestTerminalRefusals(t *testing.T) {
	d := &recordingDesk{}
	ts := start(t, Options{Token: "admin", ScopedKey: testKey, Sandboxes: d, Actions: display.NewActions(d)})
	for _, name := range []string{"desk", "other"} {
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = name
		api.Default(sb)
		if _, err := ts.st.Create(context.Background(), sb); err != nil {
			t.Fatal(err)
		}
	}
	bindAgent(t, ts.st, "loop", "desk", 1)
	agentTok := attemptToken(t, ts.st, testKey, "loop")
	now := time.Now()
	other, _ := testKey.MintTerminal("other", now)
	expired, _ := testKey.MintTerminal("desk", now.Add(-2*time.Minute))
	forged, _ := authtoken.Key(strings.Repeat("f", 32)).MintTerminal("desk", now)
	displayTok, _ := testKey.MintDisplay(authtoken.DisplayClaims{Sandbox: "desk"}, now, time.Minute)
	ws := func(q string) string { return "/api/v1/sandboxes/desk/terminal?" + q }
	for _, c := range []struct {
		name, tok, method, path string
		want                    int
	}{
		{"no credential", "", "GET", ws("command=sh"), http.StatusUnauthorized},
		{"a display token", "", "GET", ws("token=" + displayTok), http.StatusUnauthorized},
		{"another sandbox's terminal token", "", "GET", ws("token=" + other), http.StatusForbidden},
		{"an expired terminal token", "", "GET", ws("token=" + expired), http.StatusUnauthorized},
		{"a forged terminal token", "", "GET", ws("token=" + forged), http.StatusUnauthorized},
		{"a terminal token as a bearer token", other, "GET", "/api/v1/sandboxes/other", http.StatusUnauthorized},
		{"an agent mints a terminal token", agentTok, "POST", "/api/v1/sandboxes/desk/terminal/token", http.StatusForbidden},
		{"an agent's token on another sandbox", agentTok, "GET", "/api/v1/sandboxes/other/terminal", http.StatusForbidden},
		{"a plain GET", "admin", "GET", ws("rows=24"), http.StatusBadRequest},
		{"rows out of range", "admin", "GET", ws("rows=0"), http.StatusBadRequest},
	} {
		code, _, body := ts.do(t, c.method, c.path, "", "")
		if c.tok != "" {
			code, _, body = ts.doAuth(t, c.tok, c.method, c.path, "")
		}
		if code != c.want {
			t.Errorf("%s: %s %s: %d %s, want %d", c.name, c.method, c.path, code, body, c.want)
		}
	}
	// The server's token mints one, for that sandbox, for a minute.
	code, _, body := ts.doAuth(t, "admin", "POST", "/api/v1/sandboxes/desk/terminal/token", "")
	if code != http.StatusOK {
		t.Fatalf("mint: %d %s", code, body)
	}
	if seen := d.seen(); len(seen) != 0 {
		t.Errorf("refused requests reached the sandbox: %v", seen)
	}
}

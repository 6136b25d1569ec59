package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// TestAgentHeartbeat: a running mcp-agent with completion.heartbeatSeconds
// takes heartbeats from its own token (or the server's), each one moving
// its deadline; one without heartbeats, or not running, refuses them and
// changes nothing; another agent's token reaches none.
func TestAgentHeartbeat(t *testing.T) {
	ts, _ := scopeServer(t, "admin")
	ctx := context.Background()
	// loop2 takes heartbeats (30 s), loop1 (scopeServer's) does not.
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name = "loop2"
	a.Spec.SandboxName, a.Spec.Type = "spare", "mcp-agent"
	a.Spec.Completion.HeartbeatSeconds = 30
	api.Default(a)
	if _, err := ts.st.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	bindAgent(t, ts.st, "loop2", "spare", 1)
	own := attemptToken(t, ts.st, testKey, "loop2")
	other := attemptToken(t, ts.st, testKey, "loop1")

	var hb Heartbeat
	for _, tok := range []string{own, "admin"} {
		before := time.Now()
		code, _, body := ts.doAuth(t, tok, "POST", "/api/v1/agents/loop2/heartbeat", "")
		if code != http.StatusOK {
			t.Fatalf("heartbeat: %d %s", code, body)
		}
		if err := json.Unmarshal(body, &hb); err != nil {
			t.Fatal(err)
		}
		if hb.Agent != "loop2" || hb.Attempt != 1 || hb.Deadline.Before(before.Add(29*time.Second)) || hb.Deadline.After(time.Now().Add(31*time.Second)) {
			t.Errorf("heartbeat answer %+v: want the deadline 30 s from now", hb)
		}
	}
	if got := ts.agent(t, "loop2").Status.HeartbeatAt; got == nil || time.Since(*got) > 5*time.Second {
		t.Errorf("status.heartbeatAt %v, want about now", got)
	}

	before := rvOf(t, ts.st)
	for _, c := range []struct {
		tok, path string
		want      int
		says      string
	}{
		{other, "/api/v1/agents/loop2/heartbeat", http.StatusForbidden, ""},
		{"admin", "/api/v1/agents/loop1/heartbeat", http.StatusBadRequest, "spec.completion.heartbeatSeconds"},
		{"admin", "/api/v1/agents/nobody/heartbeat", http.StatusNotFound, ""},
	} {
		code, _, body := ts.doAuth(t, c.tok, "POST", c.path, "")
		if code != c.want || !strings.Contains(string(body), c.says) {
			t.Errorf("POST %s: %d %s, want %d saying %q", c.path, code, body, c.want, c.says)
		}
	}
	if code, _, body := ts.doAuth(t, "admin", "POST", "/api/v1/agents/loop2/heartbeat", `{"extra":1}`); code != http.StatusBadRequest {
		t.Errorf("a heartbeat with a body: %d %s, want 400", code, body)
	}
	if after := rvOf(t, ts.st); after != before {
		t.Fatalf("refused heartbeats changed the store (revision %d -> %d)", before, after)
	}

	// Completed: no more heartbeats.
	if code, _, body := ts.doAuth(t, own, "POST", "/api/v1/agents/loop2/complete", ""); code != http.StatusOK {
		t.Fatalf("complete: %d %s", code, body)
	}
	if code, _, body := ts.doAuth(t, "admin", "POST", "/api/v1/agents/loop2/heartbeat", ""); code != http.StatusConflict {
		t.Errorf("heartbeat after completion: %d %s, want 409", code, body)
	}
}

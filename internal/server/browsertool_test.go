package server

import (
	"net/http"
	"strings"
	"testing"
)

// TestBrowserToolsetRefused: a body that is not a browser member's
// tool_use is a 400 naming the field, and a sandbox whose guest has no
// browser says so; nothing reaches the sandbox.
func TestBrowserToolsetRefused(t *testing.T) {
	ts, desk := scopeServer(t, "admin")
	for _, tt := range []struct {
		body string
		code int
		say  string
	}{
		{``, http.StatusBadRequest, "tool_use"},
		{`"navigate"`, http.StatusBadRequest, "tool_use"},
		{`[]`, http.StatusBadRequest, "tool_use"},
		{`{"type":"tool_use","id":"t1","name":"left_click","toolset_name":"computer","input":{}}`, http.StatusBadRequest, "toolset_name"},
		{`{"type":"tool_use","name":"navigate","toolset_name":"browser","input":{}}`, http.StatusBadRequest, "id"},
		{`[{"type":"tool_use","id":"a","name":"screenshot","toolset_name":"browser"},{"type":"text","id":"b"}]`, http.StatusBadRequest, "[1].type"},
		{`{"type":"tool_use","id":"t1","name":"screenshot","toolset_name":"browser","input":{}}`, http.StatusNotImplemented, "reaches no guest ports"},
	} {
		code, _, body := ts.doAuth(t, "admin", "POST", "/api/v1/sandboxes/desk/browser", tt.body)
		if code != tt.code || !strings.Contains(string(body), tt.say) {
			t.Errorf("%s: %d %s, want %d saying %q", tt.body, code, body, tt.code, tt.say)
		}
	}
	if calls := desk.seen(); len(calls) != 0 {
		t.Errorf("refused requests reached the sandbox: %v", calls)
	}
}

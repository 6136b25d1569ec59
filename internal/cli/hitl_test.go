package cli

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

// TestHITLAndControl answers a question and takes a sandbox over with the
// CLI against a real server.
func TestHITLAndControl(t *testing.T) {
	t.Setenv("USER", "ana")
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Options{Store: st}).Handler())
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	for _, y := range []string{
		`{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"desk"},"spec":{}}`,
		`{"name":"booker","sandboxName":"desk","type":"mcp-agent"}`,
	} {
		o, err := api.DecodeOne([]byte(y), api.DecodeOptions{AgentShortForm: true})
		if err != nil {
			t.Fatal(err)
		}
		api.Default(o)
		if _, err := st.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	o, _ := st.Get(ctx, api.KindAgent, "booker")
	a := o.(*api.Agent)
	a.Status.Phase, a.Status.Sandbox = api.AgentRunning, "desk"
	if _, err := st.UpdateStatus(ctx, a); err != nil {
		t.Fatal(err)
	}

	var out, errOut string
	var code int
	if _, errOut, code = run(t, srv.URL, "hitl", "list"); code != 0 || !strings.Contains(errOut, "No questions") {
		t.Fatalf("empty list: %d %q", code, errOut)
	}
	if out, errOut, code = run(t, srv.URL, "hitl", "ask", "booker", "Window\nor aisle?"); code != 0 || !strings.HasPrefix(out, "request ") {
		t.Fatalf("ask: %d %q %q", code, out, errOut)
	}
	out, _, code = run(t, srv.URL, "hitl", "list")
	if code != 0 || !strings.Contains(out, "AGENT") || !strings.Contains(out, "booker") || !strings.Contains(out, "desk") || !strings.Contains(out, "Window or aisle?") {
		t.Fatalf("list: %d %q", code, out)
	}
	if out, errOut, code = run(t, srv.URL, "control", "take", "desk", "--agent", "booker"); code != 0 || !strings.Contains(out, "control taken by ana") {
		t.Fatalf("take: %d %q %q", code, out, errOut)
	}
	if _, errOut, code = run(t, srv.URL, "control", "take", "desk", "--holder", "bo"); code != 1 || !strings.Contains(errOut, "ana holds sandbox desk's input") {
		t.Fatalf("second take: %d %q", code, errOut)
	}
	if _, errOut, code = run(t, srv.URL, "control", "release", "desk", "--holder", "bo"); code != 1 || !strings.Contains(errOut, "pass --id or --force") {
		t.Fatalf("release by another: %d %q", code, errOut)
	}
	if out, errOut, code = run(t, srv.URL, "hitl", "answer", "booker", "window"); code != 0 || !strings.Contains(out, "agent/booker answered") {
		t.Fatalf("answer: %d %q %q", code, out, errOut)
	}
	if out, errOut, code = run(t, srv.URL, "control", "release", "desk"); code != 0 || !strings.Contains(out, "control released") {
		t.Fatalf("release: %d %q %q", code, out, errOut)
	}
	o, _ = st.Get(ctx, api.KindAgent, "booker")
	hr := o.(*api.Agent).Status.HumanRequest
	if hr == nil || hr.Answer != "window" || hr.AnsweredBy != "ana" {
		t.Fatalf("request after answer: %+v", hr)
	}
	if _, errOut, code = run(t, srv.URL, "hitl", "answer", "booker", "aisle"); code != 1 || !strings.Contains(errOut, "waits for no answer") {
		t.Fatalf("answer again: %d %q", code, errOut)
	}
	// ask --wait prints the answer once it comes.
	done := make(chan string, 1)
	go func() {
		out, errOut, _ := run(t, srv.URL, "hitl", "ask", "booker", "Meal?", "--wait", "60")
		done <- out + errOut
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		o, _ = st.Get(ctx, api.KindAgent, "booker")
		if hr := o.(*api.Agent).Status.HumanRequest; hr.Pending() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the question was not asked")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out, errOut, code = run(t, srv.URL, "hitl", "answer", "booker", "vegetarian"); code != 0 {
		t.Fatalf("answer: %d %q %q", code, out, errOut)
	}
	select {
	case got := <-done:
		if got != "vegetarian\n" {
			t.Fatalf("ask --wait printed %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ask --wait did not return on the answer")
	}
}

func TestLogsPath(t *testing.T) {
	for _, tt := range []struct{ arg, want string }{
		{"desk", "/api/v1/sandboxes/desk/logs"},
		{"sandbox/desk", "/api/v1/sandboxes/desk/logs"},
		{"agent/booker", "/api/v1/agents/booker/logs"},
		{"pool/x", ""},
	} {
		got, err := logsPath(tt.arg)
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("logsPath(%q) = %q, %v; want %q", tt.arg, got, err, tt.want)
		}
	}
}

//go:build linux

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/controller"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// TestSessionEnvOnQEMU: a Secret's value, named by an agent's spec.env,
// reaches the programs its workflow runs in a real desktop and the
// session's file (the desktop user's, 0600), and nothing else: not the
// Secret's own reads, not the agent, its result, its log or the events
// (the step that prints it shows ***). Once the agent is done, the next
// agent on the same desktop finds neither the file nor the variable.
func TestSessionEnvOnQEMU(t *testing.T) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d := deskOnQEMU(t, nil, func(m *reconcile.Manager, st *store.Store) {
		controller.RegisterAll(m, st, log, time.Now)
	})

	var created api.Secret
	d.call(t, "POST", "/api/v1/secrets", `{"apiVersion":"hvkube/v1","kind":"Secret","metadata":{"name":"site"},"spec":{"stringData":{"API_KEY":"`+secretValue+`"}}}`, &created)
	if strings.Join(created.Spec.Keys, ",") != "API_KEY" || created.Spec.Sealed != "" {
		t.Fatalf("created Secret: %+v", created.Spec)
	}
	agent := func(name, env, steps string) {
		t.Helper()
		d.call(t, "POST", "/api/v1/agents", `{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":"`+name+`"},
			"spec":{"type":"workflow","sandboxName":"desk","env":`+env+`,"task":{"steps":`+steps+`}}}`, nil)
	}
	wait := func(name string) *api.Agent {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
			o, err := d.st.Get(context.Background(), api.KindAgent, name)
			if err != nil {
				t.Fatal(err)
			}
			a := o.(*api.Agent)
			if a.Status.Phase == api.AgentCompleted {
				return a
			}
			if a.Status.Phase == api.AgentFailed || time.Now().After(deadline) {
				b, _ := json.Marshal(a.Status)
				t.Fatalf("agent %s: %s", name, b)
			}
		}
	}
	agent("reader", `[{"name":"API_KEY","valueFrom":{"secretKeyRef":{"name":"site","key":"API_KEY"}}},{"name":"PLAIN","value":"visible"}]`,
		`[{"action":"exec","command":["sh","-c","printenv API_KEY"]},
		  {"action":"exec","command":["sh","-c","test \"$PLAIN\" = visible && test -n \"$API_KEY\" && (unset API_KEY; . /run/hvkube/env && test -n \"$API_KEY\") && stat -c %U:%a /run/hvkube/env"]},
		  {"action":"assert","fileContains":{"path":"/run/hvkube/env","text":"export API_KEY="}},
		  `+typedInTerminal("/tmp/typed", `[$PLAIN] ${#API_KEY}`)+`]`)
	a := wait("reader")
	steps := a.Status.Result.Steps
	if got := strings.TrimSpace(steps[0].Output); got != "***" {
		t.Errorf("the step that prints the secret shows %q, want ***", got)
	}
	if got := strings.TrimSpace(steps[1].Output); got != "agent:600" {
		t.Errorf("the session file is %q, want the desktop user's, mode 600", got)
	}
	// The terminal the desktop opened before the claim has them too.
	if got, want := strings.TrimSpace(steps[len(steps)-1].Output), fmt.Sprintf("[visible] %d", len(secretValue)); got != want {
		t.Errorf("the desktop's open terminal ran with %q, want %q", got, want)
	}

	// Every answer of the API that could carry it.
	for _, path := range []string{
		"/api/v1/secrets", "/api/v1/secrets/site", "/api/v1/agents/reader", "/api/v1/agents/reader/result",
		"/api/v1/agents/reader/logs", "/api/v1/events", "/api/v1/sandboxes/desk", "/api/v1/agents",
	} {
		code, body := d.get(t, path, nil)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d %.300s", path, code, body)
		}
		if strings.Contains(body, secretValue) {
			t.Errorf("GET %s shows the secret: %.300s", path, body)
		}
		if path == "/api/v1/agents/reader/logs" {
			for _, l := range strings.Split(body, "\n") {
				if strings.Contains(l, "acquired in") || strings.Contains(l, "session variables resolved") || strings.Contains(l, "step 1") {
					t.Log(l)
				}
			}
		}
	}
	stored, err := d.st.Get(context.Background(), api.KindSecret, "site")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(stored); strings.Contains(string(b), secretValue) {
		t.Errorf("the store holds the value in the clear: %s", b)
	}

	// The next agent on the desktop: no file, no variable.
	agent("after", `[]`, `[{"action":"exec","command":["sh","-c","test ! -e /run/hvkube/env && test -z \"$API_KEY\""]},
		`+typedInTerminal("/tmp/typed-after", `[$PLAIN] ${API_KEY-unset}`)+`]`)
	after := wait("after").Status.Result.Steps
	if got := strings.TrimSpace(after[len(after)-1].Output); got != "[] unset" {
		t.Errorf("after the release, the desktop's open terminal ran with %q, want \"[] unset\"", got)
	}
	_, logs := d.get(t, "/api/v1/agents/after/logs", nil)
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "acquired in") || strings.Contains(l, "step 1") {
			t.Log(l)
		}
	}
}

// typedInTerminal is workflow steps (JSON, comma-separated) that type
// "echo WORDS > FILE" into the terminal the desktop opened at its start
// (linux-desktop's, at +40+40), as a person would, and print FILE once the
// terminal's shell wrote it (the last step's output).
func typedInTerminal(file, words string) string {
	line, _ := json.Marshal(`echo "` + words + `" > ` + file)
	wait, _ := json.Marshal([]string{"sh", "-c", `for i in $(seq 100); do [ -s "$1" ] && break; sleep 0.2; done; cat "$1"`, "sh", file})
	return `{"action":"left_click","coordinate":[300,200]},{"action":"type","text":` + string(line) + `},{"action":"key","text":"Return"},{"action":"exec","command":` + string(wait) + `}`
}

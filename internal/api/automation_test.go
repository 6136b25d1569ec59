package api

import (
	"strings"
	"testing"
)

// TestAutomationAgents: playwright and selenium agents run a command as
// custom ones do, so they take the same defaults (on the host, ended by
// the exit code) and the same checks, each naming its field.
func TestAutomationAgents(t *testing.T) {
	for _, typ := range []string{"playwright", "selenium"} {
		t.Run(typ, func(t *testing.T) {
			a := &Agent{TypeMeta: TypeMeta{APIVersion: Version, Kind: KindAgent}}
			a.Metadata.Name = "form"
			a.Spec.SandboxName = "desk"
			a.Spec.Type = typ
			a.Spec.Task.Command = []string{"node", "form.mjs"}
			Default(a)
			if got, want := a.Spec.Task.In, "host"; got != want {
				t.Errorf("task.in = %q, want %q", got, want)
			}
			if got, want := a.Spec.Completion.Type, "exit"; got != want {
				t.Errorf("completion.type = %q, want %q", got, want)
			}
			if err := Validate(a); err != nil {
				t.Fatalf("a %s agent with a command: %v", typ, err)
			}

			tests := []struct {
				name  string
				edit  func(*AgentSpec)
				field string
			}{
				{"no command", func(s *AgentSpec) { s.Task.Command = nil }, "spec.task.command"},
				{"an empty program", func(s *AgentSpec) { s.Task.Command = []string{" "} }, "spec.task.command"},
				{"nowhere to run", func(s *AgentSpec) { s.Task.In = "cloud" }, "spec.task.in"},
			}
			for _, tt := range tests {
				b := DeepCopy(a)
				tt.edit(&b.Spec)
				err := Validate(b)
				if err == nil {
					t.Errorf("%s: accepted", tt.name)
					continue
				}
				wantInvalid(t, err, tt.field)
				if tt.field == "spec.task.command" && !strings.Contains(err.Error(), typ) {
					t.Errorf("%s: %v does not name the agent's type", tt.name, err)
				}
			}

			g := DeepCopy(a)
			g.Spec.Task.In = "guest"
			if err := Validate(g); err != nil {
				t.Errorf("in the guest: %v", err)
			}
		})
	}
}

// TestAgentTypes: every type hvkube runs is accepted, an unknown one is
// refused with the list of those it knows.
func TestAgentTypes(t *testing.T) {
	tests := []struct {
		typ string
		ok  bool
	}{
		{"mcp-agent", true},
		{"workflow", true},
		{"custom", true},
		{"playwright", true},
		{"selenium", true},
		{"puppeteer", false},
		{"Playwright", false},
	}
	for _, tt := range tests {
		a := &Agent{TypeMeta: TypeMeta{APIVersion: Version, Kind: KindAgent}}
		a.Metadata.Name = "typed"
		a.Spec.SandboxName = "desk"
		a.Spec.Type = tt.typ
		switch tt.typ {
		case "workflow":
			a.Spec.Task.Steps = []Action{{Action: "screenshot"}}
		case "mcp-agent":
		default:
			a.Spec.Task.Command = []string{"true"}
		}
		Default(a)
		err := Validate(a)
		if got := err == nil; got != tt.ok {
			t.Errorf("type %q: %v, want ok=%v", tt.typ, err, tt.ok)
			continue
		}
		if err != nil {
			wantInvalid(t, err, "spec.type")
			if !strings.Contains(err.Error(), "playwright, selenium") {
				t.Errorf("type %q: %v does not list the types", tt.typ, err)
			}
		}
	}
}

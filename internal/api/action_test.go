package api

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestWorkflowStepsInEveryVocabulary: a workflow agent's steps take the
// vocabularies of the input API; bad steps are refused at admission naming
// the field, and what is taken reads back unchanged.
func TestWorkflowStepsInEveryVocabulary(t *testing.T) {
	const agent = `apiVersion: hvkube/v1
kind: Agent
metadata: {name: vocab}
spec:
  type: workflow
  sandboxSelector: {pool: p}
  task:
    steps:
      - {action: left_click, coordinate: [10, 20], keys: [CTRL], intent: open it in a tab}
      - {type: click, button: left, x: 10, "y": 20, keys: [CTRL, SHIFT]}
      - {type: computer_call, call_id: c1, actions: [{type: move, x: 1, "y": 2}, {type: keypress, keys: [ENTER]}]}
      - {name: type_text_at, args: {x: 500, "y": 100, text: hello, press_enter: false, intent: fill the search box}}
      - {name: key_combination, args: {keys: control+a}}
      - {name: hotkey, args: {keys: [Control, C]}}
      - {type: function_call, id: fc1, name: scroll, arguments: {x: 0, "y": 999, direction: down, magnitude_in_pixels: 200}}
      - {actions: [{action: key, text: Return}, {name: wait, args: {seconds: 2}}]}
      - {action: exec, command: [/bin/true], intent: check}
`
	objs, err := decodeValid(agent, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	steps := objs[0].(*Agent).Spec.Task.Steps
	forms := make([]string, len(steps))
	for i, st := range steps {
		forms[i] = st.Form()
	}
	if got := strings.Join(forms, " "); got != "anthropic openai batch gemini gemini gemini gemini batch anthropic" {
		t.Errorf("forms %s", got)
	}
	if got := steps[3].Intents(); !slices.Equal(got, []string{"fill the search box"}) {
		t.Errorf("intents of a Gemini step: %q", got)
	}
	if got := steps[4].Args.Keys.Names(); !slices.Equal(got, []string{"control+a"}) {
		t.Errorf("key_combination's keys %q", got)
	}
	// A stored agent reads back the same.
	b, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"keys":"control+a"`) || !strings.Contains(string(b), `"keys":["Control","C"]`) {
		t.Errorf("keys are not written back as they came: %s", b)
	}
	var back []Action
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, steps) {
		t.Errorf("steps changed through JSON:\n%s", b)
	}

	for _, tt := range []struct {
		step, field string
		category    error
	}{
		{`{name: click, args: {x: 1000, "y": 1}}`, "spec.task.steps[0].args.x", ErrInvalid},
		{`{type: click, x: 1}`, "spec.task.steps[0].x", ErrInvalid},
		{`{type: computer_call, actions: [{type: wait}, {type: drag, path: [{x: 1, "y": 1}]}]}`, "spec.task.steps[0].actions[1].path", ErrInvalid},
		{`{actions: [{action: exec, command: [/bin/true]}]}`, "spec.task.steps[0].actions[0].action", ErrInvalid},
		{`{name: open_web_browser}`, "spec.task.steps[0].name", ErrUnsupported},
		{`{name: click, args: {x: 1, "y": 1, colour: red}}`, "spec.task.steps[0].args.colour", ErrInvalid},
		{`{type: click, x: 1, "y": 1, action: left_click}`, "spec.task.steps[0].action", ErrInvalid},
		{`{type: computer_call, action: {type: wait}}`, "spec.task.steps[0].action", ErrInvalid},
		{`{action: wait, duration: 1, keys: [CTRL]}`, "spec.task.steps[0].keys", ErrInvalid},
	} {
		doc := strings.Replace(agent, "    steps:\n", "    steps:\n      - "+tt.step+"\n", 1)
		_, err := decodeValid(doc, DecodeOptions{})
		if !errors.Is(err, tt.category) || FieldOf(err) != tt.field {
			t.Errorf("step %s: got %v (field %q), want %v naming %s", tt.step, err, FieldOf(err), tt.category, tt.field)
		}
	}
}

// TestDecodeAction: one body in any vocabulary; what the JSON gets wrong is
// named by its path.
func TestDecodeAction(t *testing.T) {
	for _, tt := range []struct {
		body, form string
	}{
		{`{"action":"left_click","coordinate":[1,2]}`, FormAnthropic},
		{`{"type":"click","x":1,"y":2}`, FormOpenAI},
		{`{"type":"computer_call","action":{"type":"click","x":1,"y":2}}`, FormBatch},
		{`{"type":"computer_call","actions":[{"type":"click","x":1,"y":2}]}`, FormBatch},
		{`{"name":"click","args":{"x":1,"y":2}}`, FormGemini},
		{`{"type":"function_call","name":"click","arguments":{"x":1,"y":2}}`, FormGemini},
		{`{"actions":[{"name":"go_back"}]}`, FormBatch},
	} {
		a, err := DecodeAction([]byte(tt.body))
		if err != nil {
			t.Errorf("%s: %v", tt.body, err)
			continue
		}
		if a.Form() != tt.form {
			t.Errorf("%s: form %s, want %s", tt.body, a.Form(), tt.form)
		}
		if err := ValidateAction("", a, 100, 100, false); err != nil {
			t.Errorf("%s: %v", tt.body, err)
		}
		// What the MCP server sends over REST reads back the same.
		b, _ := json.Marshal(a)
		back, err := DecodeAction(b)
		if err != nil || !reflect.DeepEqual(back, a) {
			t.Errorf("%s: through JSON %s: %+v, %v", tt.body, b, back, err)
		}
	}
	for _, tt := range []struct{ body, field string }{
		{``, ""},
		{`[]`, ""},
		{`{"action":"left_click","coords":[1,1]}`, "coords"},
		{`{"action":"left_click","coordinate":"1,1"}`, "coordinate"},
		{`{"action":"mouse_move","action":"left_click"}`, "action"},
		{`{"name":"click","args":{"x":1,"y":2,"z":3}}`, "args.z"},
		{`{"name":"hotkey","args":{"keys":5}}`, "args.keys"},
		{`{"actions":[{"type":"click","x":"1"}]}`, "actions[0].x"},
		{`{"type":"click","x":1.5,"y":1}`, "x"},
	} {
		_, err := DecodeAction([]byte(tt.body))
		if !errors.Is(err, ErrInvalid) || FieldOf(err) != tt.field {
			t.Errorf("%s: got %v (field %q), want ErrInvalid naming %q", tt.body, err, FieldOf(err), tt.field)
		}
	}
	// A refused function is refused as such, with the arguments Gemini
	// gives it, alone or in a batch.
	for _, tt := range []struct{ body, field string }{
		{`{"name":"open_app","args":{"app_name":"Chrome","intent":"open it"}}`, "name"},
		{`{"actions":[{"name":"click","args":{"x":1,"y":2}},{"name":"long_press","args":{"x":1,"y":2,"duration_ms":500}}]}`, "actions[1].name"},
	} {
		_, err := DecodeAction([]byte(tt.body))
		if !errors.Is(err, ErrUnsupported) || FieldOf(err) != tt.field {
			t.Errorf("%s: got %v (field %q), want ErrUnsupported naming %q", tt.body, err, FieldOf(err), tt.field)
		}
	}
}

// TestGeminiNames: every name hvkube knows is either run or refused with a
// reason.
func TestGeminiNames(t *testing.T) {
	for _, n := range GeminiActions() {
		a := Action{Name: n, Args: &GeminiArgs{}}
		err := ValidateAction("", a, 0, 0, false)
		if GeminiRefused(n) != "" {
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), GeminiRefused(n)) {
				t.Errorf("%s: %v, want ErrUnsupported with the reason", n, err)
			}
			continue
		}
		if errors.Is(err, ErrUnsupported) {
			t.Errorf("%s is run, yet: %v", n, err)
		}
	}
}

package node

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/fake"
)

// TestWorkflowStepsInEveryVocabulary: a workflow's steps in OpenAI's and
// Gemini's words (and a batch) run through the action layer; the step
// results and the agent's log keep their intents.
func TestWorkflowStepsInEveryVocabulary(t *testing.T) {
	c := newClusterWith(t, clusterOptions{fake: fake.Options{Exec: guestShell}})
	c.smallBox(t)
	c.create(t, yamlObj(t, `apiVersion: hvkube/v1
kind: Agent
metadata: {name: job}
spec:
  sandboxName: box
  task:
    steps:
    - {type: click, button: left, x: 10, "y": 20, keys: [CTRL]}
    - {name: click, args: {x: 999, "y": 999, intent: press the corner}}
    - {type: function_call, name: type, arguments: {text: hi, press_enter: true, intent: say hi}}
    - {type: computer_call, call_id: c1, actions: [{type: move, x: 5, "y": 6}, {type: keypress, keys: [ESCAPE]}]}
    - {name: take_screenshot, args: {intent: look}}
    - {action: cursor_position, intent: where}
`))
	a := c.waitAgent(t, "job", api.AgentCompleted)

	var evs []string
	for _, e := range c.be.Events("box") {
		switch e.Kind {
		case backend.EventMove:
			evs = append(evs, fmt.Sprintf("m%d,%d", e.X, e.Y))
		case backend.EventButton:
			evs = append(evs, fmt.Sprintf("b%v%s", e.Down, e.Button))
		case backend.EventKey:
			evs = append(evs, fmt.Sprintf("k%v%s", e.Down, e.Key))
		}
	}
	want := "m10,20 ktruectrl btrueleft bfalseleft kfalsectrl " + // the ctrl+click
		"m319,199 btrueleft bfalseleft " + // Gemini's (999, 999): the last pixel
		"ktrueh kfalseh ktruei kfalsei ktrueret kfalseret " +
		"m5,6 ktrueesc kfalseesc"
	if got := strings.Join(evs, " "); got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
	res := a.Status.Result
	if res == nil || len(res.Steps) != 6 {
		t.Fatalf("result %+v", res)
	}
	for i, want := range []struct{ action, output string }{
		{"OpenAI click", ""}, {"Gemini click", "intent: press the corner"}, {"Gemini type", "intent: say hi"},
		{"a batch of 2 actions", ""}, {"Gemini take_screenshot", "intent: look"}, {"cursor_position", "intent: where\n5,6"},
	} {
		if got := res.Steps[i]; got.Action != want.action || got.Output != want.output || !got.OK {
			t.Errorf("step %d: %q ok %v, output %q, want %q output %q", i+1, got.Action, got.OK, got.Output, want.action, want.output)
		}
	}
	// Gemini's take_screenshot is a screenshot like Anthropic's.
	if got := res.Steps[4].Screenshot; got != "screenshots/step-05.png" || !slices.Contains(res.Screenshots, got) {
		t.Errorf("take_screenshot's step screenshot %q, result's %v", got, res.Screenshots)
	}
	dir := c.attemptDir("job", 1)
	if b, err := os.ReadFile(filepath.Join(dir, "screenshots", "step-05.png")); err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
		t.Errorf("take_screenshot's image: %v", err)
	}
	if b, err := c.attemptLog("job", 1); err != nil || !strings.Contains(string(b), "intent: press the corner") {
		t.Errorf("agent.log keeps no intent: %v, %q", err, b)
	}
}

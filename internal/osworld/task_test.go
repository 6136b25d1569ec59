package osworld

import (
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
)

func TestImport(t *testing.T) {
	task := `{"id": "ABC-123", "instruction": "do it", "config": [
		{"type": "launch", "parameters": {"command": ["xterm"]}},
		{"type": "execute", "parameters": {"command": "touch ~/a", "shell": true, "until": {"returncode": 0}}},
		{"type": "sleep", "parameters": {"seconds": 2}},
		{"type": "open", "parameters": {"path": "~/doc.txt"}},
		{"type": "activate_window", "parameters": {"window_name": "doc", "strict": true}},
		{"type": "download", "parameters": {"files": [{"url": "http://example.com/x", "path": "~/x"}]}},
		{"type": "googledrive", "parameters": {}}],
		"evaluator": {"func": ["exact_match", "compare_text_file"],
			"result": [{"type": "vm_command_line", "command": ["cat", "~/a"]}, {"type": "vm_file", "path": "~/a"}],
			"expected": [{"type": "rule", "rules": {"expected": "x"}}, {"type": "cloud_file", "path": "http://x"}]}}`
	a, notes, err := Import([]byte(task), ImportOptions{Pool: "desk", Steps: []api.Action{{Action: "key", Text: "Return"}}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Metadata.Name != "osworld-abc-123" || a.Spec.Type != "workflow" || a.Spec.SandboxSelector.Pool != "desk" || a.Metadata.Labels[TaskLabel] != "ABC-123" {
		t.Errorf("agent %s type %s selector %+v labels %v", a.Metadata.Name, a.Spec.Type, a.Spec.SandboxSelector, a.Metadata.Labels)
	}
	var kinds []string
	for _, s := range a.Spec.Task.Steps {
		kinds = append(kinds, s.Action)
	}
	if got := strings.Join(kinds, " "); got != "exec exec wait exec exec exec key assert" {
		t.Errorf("steps %s", got)
	}
	for _, s := range a.Spec.Task.Steps {
		if s.Action == "exec" || s.Action == "assert" {
			if s.Command[0] != "/usr/bin/setpriv" || s.Command[1] != "--reuid=agent" {
				t.Errorf("%s runs %q, not as the desktop's user", s.Intent, s.Command[:2])
			}
		}
	}
	want := []string{"until", `"googledrive" is not mapped`, `expected getter "cloud_file"`}
	if len(notes) != len(want) {
		t.Fatalf("notes %q", notes)
	}
	for i, w := range want {
		if !strings.Contains(notes[i], w) {
			t.Errorf("note %d %q, want it to say %q", i, notes[i], w)
		}
	}
	if ann := a.Metadata.Annotations[UnmappedAnnotation]; !strings.Contains(ann, "googledrive") || !strings.Contains(ann, "cloud_file") {
		t.Errorf("annotation %q", ann)
	}
	if !strings.Contains(string(a.Spec.Task.Input), `"instruction":"do it"`) {
		t.Errorf("input %s", a.Spec.Task.Input)
	}
	// The agent passes the API's validation.
	c := *a
	api.Default(&c)
	if err := api.Validate(&c); err != nil {
		t.Errorf("the imported agent is not valid: %v", err)
	}
}

func TestImportRefuses(t *testing.T) {
	for _, c := range []struct{ task, pool, field string }{
		{`not json`, "p", ""},
		{`{"instruction": "x"}`, "p", "id"},
		{`{"id": "a"}`, "p", "instruction"},
		{`{"id": "a", "instruction": "x"}`, "", "pool"},
	} {
		_, _, err := Import([]byte(c.task), ImportOptions{Pool: c.pool})
		if err == nil || api.FieldOf(err) != c.field {
			t.Errorf("Import(%s, pool %q): %v (field %q), want field %q", c.task, c.pool, err, api.FieldOf(err), c.field)
		}
	}
	// An "or" of metrics maps to nothing, and says so.
	a, notes, err := Import([]byte(`{"id": "a", "instruction": "x", "evaluator": {"func": ["exact_match", "exact_match"], "conj": "or"}}`), ImportOptions{Pool: "p"})
	if err != nil || len(a.Spec.Task.Steps) != 0 || len(notes) != 1 || !strings.Contains(notes[0], "or") {
		t.Errorf("an or of metrics: %v steps, notes %q, %v", len(a.Spec.Task.Steps), notes, err)
	}
}

// TestImportWithOSWorld: with OSWorld's own code, a task becomes a custom
// Agent whose host command runs hvkube.osworld_task on the task file,
// whatever its evaluator is; paths must be absolute; a source may be a
// list.
func TestImportWithOSWorld(t *testing.T) {
	task := `{"id": "T1", "instruction": "do it", "source": ["https://a.example", "https://b.example"],
		"config": [{"type": "googledrive", "parameters": {}}],
		"evaluator": {"func": "compare_pptx_files", "result": {"type": "vm_file", "path": "/home/user/a.pptx"}}}`
	run := &OSWorldRun{Dir: "/opt/OSWorld", Task: "/tasks/t1.json", Steps: "/tasks/t1.steps.json", PythonPath: "/opt/hvkube/sdk/python"}
	a, notes, err := Import([]byte(task), ImportOptions{Pool: "ow", OSWorld: run})
	if err != nil || len(notes) != 0 {
		t.Fatalf("import: %v, notes %q", err, notes)
	}
	want := "/usr/bin/env PYTHONPATH=/opt/hvkube/sdk/python python3 -m hvkube.osworld_task --osworld /opt/OSWorld --steps /tasks/t1.steps.json -- /tasks/t1.json"
	if a.Spec.Type != "custom" || a.Spec.Task.In != "host" || strings.Join(a.Spec.Task.Command, " ") != want {
		t.Errorf("agent %s in %s runs %q, want custom on the host running %q", a.Spec.Type, a.Spec.Task.In, a.Spec.Task.Command, want)
	}
	if !strings.Contains(string(a.Spec.Task.Input), `"source":["https://a.example","https://b.example"]`) {
		t.Errorf("input %s", a.Spec.Task.Input)
	}
	c := *a
	api.Default(&c)
	if err := api.Validate(&c); err != nil {
		t.Errorf("the imported agent is not valid: %v", err)
	}
	for _, bad := range []*OSWorldRun{{Dir: "OSWorld", Task: "/t.json"}, {Dir: "/o", Task: "t.json"}, {Dir: "/o", Task: "/t.json", Cache: "cache"}} {
		if _, _, err := Import([]byte(task), ImportOptions{Pool: "ow", OSWorld: bad}); err == nil {
			t.Errorf("a relative path %+v was taken", bad)
		}
	}
	if _, _, err := Import([]byte(`{"id": "a", "instruction": "x", "source": 42}`), ImportOptions{Pool: "p"}); api.FieldOf(err) != "source" {
		t.Errorf("a source of a number: %v", err)
	}
}

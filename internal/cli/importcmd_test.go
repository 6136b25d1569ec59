package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportOSWorldChecked: a task whose check does not map is refused
// (its Agent could pass without it) unless --unchecked; with OSWorld's own
// code (--evaluator osworld) every task imports, as a custom Agent that
// runs it on the host.
func TestImportOSWorldChecked(t *testing.T) {
	dir := t.TempDir()
	task := filepath.Join(dir, "t1.json")
	os.WriteFile(task, []byte(`{"id": "t1", "instruction": "make the slides",
		"evaluator": {"func": "compare_pptx_files", "result": {"type": "vm_file", "path": "/home/user/a.pptx"},
			"expected": {"type": "cloud_file", "path": "https://x/a.pptx"}}}`), 0o644)
	osw := filepath.Join(dir, "OSWorld")
	os.MkdirAll(filepath.Join(osw, "desktop_env"), 0o755)

	out, errOut, code := run(t, "http://127.0.0.1:1", "import", "osworld", "--pool", "ow", task)
	if code == 0 || out != "" || !strings.Contains(errOut, "--evaluator osworld") || !strings.Contains(errOut, "compare_pptx_files") {
		t.Errorf("an unmapped check: exit %d, out %q, err %q; want a refusal naming the metric and --evaluator osworld", code, out, errOut)
	}
	out, _, code = run(t, "http://127.0.0.1:1", "import", "osworld", "--pool", "ow", "--unchecked", task)
	if code != 0 || !strings.Contains(out, "hvkube.io/osworld-unmapped") {
		t.Errorf("--unchecked: exit %d, %s", code, out)
	}
	out, errOut, code = run(t, "http://127.0.0.1:1", "import", "osworld", "--pool", "ow", "--evaluator", "osworld", "--osworld", osw, task)
	if code != 0 || !strings.Contains(out, "type: custom") || !strings.Contains(out, "hvkube.osworld_task") || !strings.Contains(out, task) {
		t.Errorf("--evaluator osworld: exit %d, %s %s", code, out, errOut)
	}
	for _, args := range [][]string{
		{"--evaluator", "osworld"},
		{"--evaluator", "osworld", "--osworld", dir},
		{"--evaluator", "nope"},
		{"--osworld", osw},
	} {
		if _, errOut, code := run(t, "http://127.0.0.1:1", append([]string{"import", "osworld", "--pool", "ow", task}, args...)...); code == 0 {
			t.Errorf("%q: taken (%s)", args, errOut)
		}
	}
}

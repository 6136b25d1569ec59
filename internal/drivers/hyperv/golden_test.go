package hyperv

import (
	"bytes"
	"github.com/hvkube/hvkube/internal/powershell/pstest"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/powershell"
)

// TestGoldenScripts drives every operation of the backend against the fake
// host and compares each script it ran, and the arguments of its last run,
// with testdata/golden (go test -update rewrites them). Host paths are
// written as on a Windows host with the backend's folder at D:\hvkube.
func TestGoldenScripts(t *testing.T) {
	r := newRig(t)
	r.host.gpus = []string{`\\?\PCI#VEN_10DE&DEV_2484&SUBSYS_146B10DE&REV_A1#4&2b7d0f0b&0&0008#{064092b3-625e-43bf-9eb5-dc845897dd59}`}
	r.template(t, backend.TemplateSpec{CPU: 2, MemoryMB: 4096, Resolution: "1280x800"})
	r.template(t, backend.TemplateSpec{ID: "win11-gpu", CPU: 4, MemoryMB: 8192, Resolution: "1920x1080", GPU: true})
	if _, err := r.b.Create(ctx, backend.SandboxSpec{ID: "web-1", UID: "0c5e2f9a-3b1d-4e8f-9a7c-6d2e1f0b4a93", TemplateID: "win11", Hostname: "web-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.b.Create(ctx, backend.SandboxSpec{ID: "render-1", UID: "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", TemplateID: "win11-gpu"}); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.b.Resume(ctx, "web-1"))
	_, err := r.b.Exec(ctx, "web-1", backend.ExecRequest{
		Path: `C:\Program Files\Git\bin\git.exe`, Args: []string{"commit", "-m", `fix "quoted" path C:\dir\`},
		Env: []string{"GIT_AUTHOR_NAME=hvkube"}, Stdin: []byte("input\n"),
	})
	must(err)
	_, err = r.b.Exec(ctx, "web-1", backend.ExecRequest{Path: `C:\Windows\notepad.exe`, Args: []string{`C:\Users\agent\notes.txt`}, Detach: true})
	must(err)
	must(r.b.CopyIn(ctx, "web-1", `C:\Users\agent\Desktop\task.json`, strings.NewReader(`{"task": 1}`)))
	must(r.b.CopyOut(ctx, "web-1", `C:\Users\agent\Desktop\task.json`, io.Discard))
	must(r.b.Save(ctx, "web-1"))
	must(r.b.Restore(ctx, "web-1"))
	must(r.b.Reset(ctx, "web-1"))
	must(r.b.Save(ctx, "web-1"))
	must(r.b.Stop(ctx, "web-1"))
	must(r.b.Reset(ctx, "web-1"))
	must(r.b.Stop(ctx, "web-1"))
	_, err = r.b.Capacity(ctx)
	must(err)
	_, err = r.b.List(ctx)
	must(err)
	must(r.b.Delete(ctx, "web-1"))

	root := filepath.Dir(r.dir)
	last := map[string]pstest.Call{}
	for _, c := range r.host.calls {
		last[c.Script.Name] = c
	}
	for _, s := range allScripts {
		c, ok := last[s.Name]
		if !ok {
			t.Errorf("script %s was never run", s.Name)
			continue
		}
		if c.Script != s {
			t.Errorf("script %s ran with other text than its constant", s.Name)
		}
		pstest.Golden(t, filepath.Join("testdata", "golden"), s.Name, c.Script, windowsPaths(c.Args, root))
	}
	if len(last) != len(allScripts) {
		t.Errorf("%d scripts ran, allScripts lists %d", len(last), len(allScripts))
	}
}

var scratchName = regexp.MustCompile(`\b(in|out)-[0-9a-z]+-[0-9]+$`)

// windowsPaths rewrites the host paths in args as on a Windows host whose
// test folder is D:\, and scratch files' unique names as name-1.
func windowsPaths(args powershell.Args, root string) powershell.Args {
	out := powershell.Args{}
	for k, v := range args {
		if s, ok := v.(string); ok && strings.HasPrefix(s, root) {
			s = `D:` + strings.ReplaceAll(strings.TrimPrefix(s, root), "/", `\`)
			v = scratchName.ReplaceAllString(s, "$1-1")
		}
		out[k] = v
	}
	return out
}

// The scripts are constants: none holds a Go format verb or a value, and
// every one begins with its param() block.
func TestScriptsAreConstants(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range allScripts {
		if seen[s.Name] {
			t.Errorf("two scripts are named %s", s.Name)
		}
		seen[s.Name] = true
		if !strings.HasPrefix(s.Text, "param(") {
			t.Errorf("%s does not begin with param(", s.Name)
		}
		if strings.Contains(s.Text, "%!") || bytes.ContainsAny([]byte(s.Text), "\x00`") {
			t.Errorf("%s holds a formatting error or a backtick", s.Name)
		}
		if _, _, err := powershell.Command(s, nil); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}

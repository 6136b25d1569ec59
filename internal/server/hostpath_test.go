package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/hostpath"
)

// TestHostPathsOfTheOtherOSAreStored applies the seed's Sandbox and
// SandboxPool, whose volumes name C:\workflows, to a server on Linux: a
// path of the other OS's syntax cannot be checked against this host's
// roots, so it is stored for the node that would use it to check. A path
// of this host's syntax outside the allowed roots is still refused, naming
// the field.
func TestHostPathsOfTheOtherOSAreStored(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the seed's paths are this host's own on Windows, and checked against its roots")
	}
	dir := t.TempDir()
	roots, err := hostpath.NewRoots(dir)
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, Options{AllowedRoots: roots})

	for _, f := range []struct{ file, path, name string }{
		{"sandbox.yaml", "/api/v1/sandboxes", "browser-agent-1"},
		{"sandboxpool.yaml", "/api/v1/sandboxpools", "browser-workers"},
	} {
		seed, err := os.ReadFile(filepath.Join("..", "api", "testdata", "seed", f.file))
		if err != nil {
			t.Fatal(err)
		}
		if code, _, body := ts.do(t, "POST", f.path, "application/yaml", string(seed)); code != http.StatusCreated {
			t.Fatalf("seed %s: status %d, want 201: %s", f.file, code, body)
		}
		code, _, body := ts.do(t, "GET", f.path+"/"+f.name, "", "")
		if code != http.StatusOK {
			t.Fatalf("get %s: status %d: %s", f.name, code, body)
		}
		if !strings.Contains(string(body), `"hostPath":"C:\\workflows"`) {
			t.Errorf("stored %s does not keep hostPath C:\\workflows: %s", f.name, body)
		}
	}
	// A Template's image paths are host paths too.
	tpl := "apiVersion: hvkube/v1\nkind: Template\nmetadata: {name: win}\nspec:\n  hyperv: {vhdxPath: 'D:\\templates\\win11.vhdx'}\n"
	if code, _, body := ts.do(t, "POST", "/api/v1/templates", "application/yaml", tpl); code != http.StatusCreated {
		t.Fatalf("template with a Windows vhdxPath: status %d, want 201: %s", code, body)
	}

	sb := func(name, hostPath string) string {
		return "apiVersion: hvkube/v1\nkind: Sandbox\nmetadata: {name: " + name + "}\nspec:\n  volumes:\n  - {name: w, hostPath: '" + hostPath + "', sandboxPath: /w, readOnly: true}\n"
	}
	refused := []struct {
		name, path, body, field string
	}{
		{"linux path outside the roots", "/api/v1/sandboxes", sb("etc", "/etc"), "spec.volumes[0].hostPath"},
		{"link out of the roots", "/api/v1/sandboxes", sb("link", filepath.Join(dir, "out")), "spec.volumes[0].hostPath"},
		{"pool linux path outside the roots", "/api/v1/sandboxpools",
			"apiVersion: hvkube/v1\nkind: SandboxPool\nmetadata: {name: p}\nspec:\n  replicas: 1\n  template:\n    spec:\n      volumes:\n      - {name: w, hostPath: /root, sandboxPath: /w, readOnly: true}\n",
			"spec.template.spec.volumes[0].hostPath"},
		{"template linux path outside the roots", "/api/v1/templates",
			"apiVersion: hvkube/v1\nkind: Template\nmetadata: {name: t}\nspec:\n  qemu: {disk: /etc/shadow, kernel: 'C:\\boot\\vmlinuz'}\n", "spec.qemu.disk"},
		{"windows path with ..", "/api/v1/sandboxes", sb("dotdot", `C:\workflows\..\Windows`), "spec.volumes[0].hostPath"},
		{"windows device path", "/api/v1/sandboxes", sb("device", `\\.\PhysicalDrive0`), "spec.volumes[0].hostPath"},
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := ts.do(t, "POST", tt.path, "application/yaml", tt.body)
			if code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", code, body)
			}
			var e struct {
				Error string `json:"error"`
				Field string `json:"field"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("error body %q: %v", body, err)
			}
			if e.Field != tt.field || !strings.Contains(e.Error, tt.field) {
				t.Errorf("field %q (error %q), want %s", e.Field, e.Error, tt.field)
			}
		})
	}
	// A path under the roots is admitted whether or not it exists yet:
	// whether it does is a fact of the node that would use it.
	for name, p := range map[string]string{"root": dir, "later": filepath.Join(dir, "not-made-yet")} {
		if code, _, body := ts.do(t, "POST", "/api/v1/sandboxes", "application/yaml", sb(name, p)); code != http.StatusCreated {
			t.Errorf("%s: status %d, want 201: %s", p, code, body)
		}
	}
}

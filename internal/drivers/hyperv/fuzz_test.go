package hyperv

import (
	"bytes"
	"github.com/hvkube/hvkube/internal/powershell/pstest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/powershell"
)

// FuzzValuesNeverChangeScripts drives the backend with a value in every
// place a user's text can reach a script (notes, host names, template
// paths, guest paths, programs' arguments, environment, input) and checks
// that every script run is one of the constants, unchanged, that its
// command line does not depend on its arguments, and that the value
// arrives intact.
func FuzzValuesNeverChangeScripts(f *testing.F) {
	for _, s := range []string{
		`'; Remove-VM -Name * -Force; '`, `$(Stop-Computer -Force)`, "`$env:PATH`n", `a;b & c | d`,
		"line one\nline two\r\n", `"double" 'single'`, `@{x=1}; ${function:x}`, `\\server\share\x`,
		"héllo ✓", `%SystemRoot%`, `^&|<>`, `' + (Get-Process) + '`, "</script>\x1b[0m", `C:\dir\`, "",
	} {
		f.Add(s)
	}
	known := map[string]powershell.Script{}
	for _, s := range allScripts {
		known[s.Name] = s
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := newRig(t)
		// A template from a file whose name holds the value.
		name := strings.Map(func(c rune) rune {
			if c == 0 || c == '/' || c == '\\' || c == utf8.RuneError {
				return -1
			}
			return c
		}, s)
		if name != "" && name != "." && name != ".." && len(name) < 200 {
			src := filepath.Join(filepath.Dir(r.src), name)
			if err := os.WriteFile(src, []byte("vhdx"), 0o600); err == nil {
				r.host.vhds[src] = vhdInfo{Path: src, VhdFormat: "VHDX", VhdType: "Dynamic"}
				if _, err := r.b.BuildTemplate(ctx, backend.TemplateSpec{ID: "named", HyperV: &api.HyperVImage{VHDXPath: src}}, nil); err != nil {
					t.Fatalf("template from %q: %v", src, err)
				}
				if got := r.call(t, "get-vhd").Args["Path"]; got != src {
					t.Fatalf("get-vhd got path %q, want %q", got, src)
				}
			}
		}
		r.template(t, backend.TemplateSpec{})
		hostname := strings.ReplaceAll(s, "\x00", "")
		wantHost := hostname
		if wantHost == "" {
			wantHost = "f" // the sandbox's ID
		}
		if _, err := r.b.Create(ctx, backend.SandboxSpec{ID: "f", UID: s, TemplateID: "win11", Hostname: hostname}); err != nil {
			t.Fatalf("create: %v", err)
		}
		if n, ok := parseNotes(r.host.vm("hvkube-f").notes); !ok || (utf8.ValidString(s) && (n.UID != s || n.Hostname != wantHost)) {
			t.Fatalf("notes %+v, want uid %q", n, s)
		}
		if err := r.b.Resume(ctx, "f"); err != nil {
			t.Fatal(err)
		}
		var gotArgs string
		r.host.exec = func(path, arguments string, env []string, stdin []byte) (int, string, string, string) {
			gotArgs = arguments
			return 0, "", "", ""
		}
		args := []string{s, s + s}
		_, err := r.b.Exec(ctx, "f", backend.ExecRequest{Path: `C:\Tools\tool.exe`, Args: args, Env: []string{"V=" + s}, Stdin: []byte(s)})
		if strings.ContainsRune(s, 0) {
			if err == nil {
				t.Fatal("an argument with NUL was taken")
			}
		} else {
			if err != nil {
				t.Fatal(err)
			}
			if p := parseCommandLine(gotArgs); len(p) != 2 || p[0] != s || p[1] != s+s {
				t.Fatalf("the guest program gets %q, want %q", p, args)
			}
		}
		r.b.Exec(ctx, "f", backend.ExecRequest{Path: `C:\Tools\tool.exe`, Args: []string{s}, Detach: true})
		guestPath := `C:\Users\agent\` + s
		errIn := r.b.CopyIn(ctx, "f", guestPath, strings.NewReader(s))
		var out bytes.Buffer
		errOut := r.b.CopyOut(ctx, "f", guestPath, &out)
		if !strings.ContainsRune(s, 0) {
			if errIn != nil || errOut != nil || out.String() != s {
				t.Fatalf("copy %q: %v %v %q", guestPath, errIn, errOut, out.String())
			}
			if got := r.call(t, "guest-copy-in").Args["Destination"]; got != guestPath {
				t.Fatalf("guest-copy-in got %q, want %q", got, guestPath)
			}
		}
		if err := r.b.Delete(ctx, "f"); err != nil {
			t.Fatal(err)
		}

		r.host.mu.Lock()
		calls := append([]pstest.Call(nil), r.host.calls...)
		r.host.mu.Unlock()
		for _, c := range calls {
			want, ok := known[c.Script.Name]
			if !ok || c.Script != want {
				t.Fatalf("script %s is not one of the constants", c.Script.Name)
			}
			pstest.CheckArgsInert(t, c.Script, c.Args)
		}
	})
}

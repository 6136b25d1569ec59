// Package pstest helps test code that runs PowerShell scripts without
// PowerShell: a Recorder that stands in for a powershell.Runner, golden
// files that keep every script and its arguments under review, and a check
// that a script's command line never depends on its arguments' values.
//
// It defines the -update flag of the test binaries that import it; such a
// test package reads it with flag.Lookup("update") rather than defining its
// own.
package pstest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hvkube/hvkube/internal/powershell"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Call is one script a Recorder was asked to run.
type Call struct {
	Script powershell.Script
	Args   powershell.Args
}

// Recorder is a powershell.Runner for tests: it runs nothing. It records
// every call and answers by script name from Errors (an error to return)
// or else Outputs (JSON text, decoded into out as powershell.Decode does;
// a script with neither gives no output). Like powershell.Local it refuses
// a script or arguments powershell.Command refuses, and a done context.
//
// A Recorder is safe for concurrent use. Set Outputs and Errors before the
// code under test runs, or change them with Set and Fail; read Calls once
// it has finished, or Recorded while it runs.
type Recorder struct {
	mu      sync.Mutex // guards the following fields
	Calls   []Call
	Outputs map[string]string
	Errors  map[string]error
}

var _ powershell.Runner = (*Recorder)(nil)

// Run implements powershell.Runner.
func (r *Recorder) Run(ctx context.Context, s powershell.Script, args powershell.Args, out any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	if _, _, err := powershell.Command(s, args); err != nil {
		return err
	}
	r.mu.Lock()
	r.Calls = append(r.Calls, Call{Script: s, Args: maps.Clone(args)})
	err, output := r.Errors[s.Name], r.Outputs[s.Name]
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if err := powershell.Decode([]byte(output), out); err != nil {
		return fmt.Errorf("%s: output: %w", s.Name, err)
	}
	return nil
}

// Set makes the script named name answer with the JSON text output.
func (r *Recorder) Set(name, output string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Outputs == nil {
		r.Outputs = map[string]string{}
	}
	r.Outputs[name] = output
}

// Fail makes the script named name fail with err (nil: succeed again).
func (r *Recorder) Fail(name string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Errors == nil {
		r.Errors = map[string]error{}
	}
	r.Errors[name] = err
}

// Recorded returns a copy of the calls so far.
func (r *Recorder) Recorded() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.Calls)
}

// Reset forgets the calls; the answers stay.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Calls = nil
}

// Golden compares s's text with dir/name.ps1 and args, as indented JSON
// with sorted keys, with dir/name.args.json; with -update it writes them
// instead. It also fails if powershell.Command refuses s or args. Golden
// files read with CRLF line ends (a Windows checkout) compare equal.
func Golden(t testing.TB, dir, name string, s powershell.Script, args powershell.Args) {
	t.Helper()
	if _, _, err := powershell.Command(s, args); err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	if args == nil {
		args = powershell.Args{}
	}
	js, err := json.MarshalIndent(args, "", "  ")
	if err != nil {
		t.Errorf("%s: arguments: %v", name, err)
		return
	}
	files := []struct {
		path string
		want string
	}{
		{filepath.Join(dir, name+".ps1"), s.Text},
		{filepath.Join(dir, name+".args.json"), string(js) + "\n"},
	}
	for _, f := range files {
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			if err := os.WriteFile(f.path, []byte(f.want), 0o644); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Errorf("%s: %v (run go test -update to write it)", name, err)
			continue
		}
		if got := strings.ReplaceAll(string(b), "\r\n", "\n"); got != f.want {
			t.Errorf("%s differs from the golden file (run go test -update to accept):\n%s", f.path, firstDiff(got, f.want))
		}
	}
}

// firstDiff describes the first line where the golden text and the new
// text part.
func firstDiff(golden, now string) string {
	a, b := strings.Split(golden, "\n"), strings.Split(now, "\n")
	for i := range max(len(a), len(b)) {
		var la, lb string
		if i < len(a) {
			la = a[i]
		}
		if i < len(b) {
			lb = b[i]
		}
		if la != lb || i >= len(a) || i >= len(b) {
			return fmt.Sprintf("line %d:\n  golden: %q\n  now:    %q", i+1, la, lb)
		}
	}
	return "(they differ only in line ends)"
}

// CheckArgsInert is for fuzz tests: the command line for s with args is
// identical to the one with every value zeroed (so no value is part of
// the script text), and the standard input decodes back to exactly args.
func CheckArgsInert(t testing.TB, s powershell.Script, args powershell.Args) {
	t.Helper()
	argv, stdin, err := powershell.Command(s, args)
	if err != nil {
		t.Fatalf("Command: %v", err)
		return
	}
	zeroed := powershell.Args{}
	for k, v := range args {
		if v != nil {
			zeroed[k] = reflect.Zero(reflect.TypeOf(v)).Interface()
		} else {
			zeroed[k] = nil
		}
	}
	argv0, _, err := powershell.Command(s, zeroed)
	if err != nil {
		t.Fatalf("Command with zeroed arguments: %v", err)
		return
	}
	if !slices.Equal(argv, argv0) {
		t.Errorf("the command line changes with the arguments' values:\n got %q\nwant %q", argv, argv0)
	}

	js, err := base64.StdEncoding.DecodeString(string(stdin))
	if err != nil {
		t.Fatalf("stdin is not base64: %v", err)
		return
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatalf("stdin is not a JSON object: %v", err)
		return
	}
	if len(got) != len(args) {
		t.Errorf("stdin has %d arguments, want %d: %s", len(got), len(args), js)
	}
	for k, want := range args {
		raw, ok := got[k]
		if !ok {
			t.Errorf("stdin lacks %s: %s", k, js)
			continue
		}
		if want == nil {
			if string(raw) != "null" {
				t.Errorf("%s: got %s, want null", k, raw)
			}
			continue
		}
		p := reflect.New(reflect.TypeOf(want))
		if err := json.Unmarshal(raw, p.Interface()); err != nil {
			t.Errorf("%s: %v", k, err)
			continue
		}
		if reflect.DeepEqual(p.Elem().Interface(), want) {
			continue
		}
		// Values typed only as any come back with JSON's types
		// (float64 for int); what PowerShell reads is the JSON.
		again, _ := json.Marshal(p.Elem().Interface())
		orig, _ := json.Marshal(want)
		if !bytes.Equal(again, orig) {
			t.Errorf("%s: stdin carries %s, want %#v", k, raw, want)
		}
	}
}

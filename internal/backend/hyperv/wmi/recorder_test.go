package wmi

// Test helpers with the API of internal/powershell/pstest: Recorder, Golden
// and CheckArgsInert.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/hvkube/hvkube/internal/powershell"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Call is one script run a Recorder saw.
type Call struct {
	Script powershell.Script
	Args   powershell.Args
}

// Recorder is a powershell.Runner for tests: it records every call and
// answers from Outputs (script name → JSON text) or Errors.
type Recorder struct {
	Outputs map[string]string
	Errors  map[string]error

	mu    sync.Mutex
	Calls []Call
}

// Run implements powershell.Runner.
func (r *Recorder) Run(ctx context.Context, s powershell.Script, args powershell.Args, out any) error {
	r.mu.Lock()
	r.Calls = append(r.Calls, Call{Script: s, Args: args})
	r.mu.Unlock()
	if _, _, err := powershell.Command(s, args); err != nil {
		return err
	}
	if err := r.Errors[s.Name]; err != nil {
		return err
	}
	return powershell.Decode([]byte(r.Outputs[s.Name]), out)
}

// Reset forgets the calls.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.Calls = nil
	r.mu.Unlock()
}

// Golden compares s.Text with dir/name.ps1 and the indented JSON of args
// with dir/name.args.json, rewriting them under -update.
func Golden(t *testing.T, dir, name string, s powershell.Script, args powershell.Args) {
	t.Helper()
	js, err := json.MarshalIndent(args, "", "  ")
	if err != nil {
		t.Fatalf("%s: arguments: %v", name, err)
	}
	js = append(js, '\n')
	for _, f := range []struct {
		path string
		data []byte
	}{
		{filepath.Join(dir, name+".ps1"), []byte(s.Text)},
		{filepath.Join(dir, name+".args.json"), js},
	} {
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f.path, f.data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatalf("%v (run go test -update to write it)", err)
		}
		if !bytes.Equal(f.data, want) {
			t.Errorf("%s differs from the golden file (run go test -update if the change is meant):\n--- got\n%s\n--- want\n%s", f.path, f.data, want)
		}
	}
}

// CheckArgsInert checks that the command line that runs s does not depend
// on args (it is the same with every value zeroed) and that standard input
// carries args back unchanged.
func CheckArgsInert(t *testing.T, s powershell.Script, args powershell.Args) {
	t.Helper()
	argv, stdin, err := powershell.Command(s, args)
	if err != nil {
		t.Fatalf("%s: %v", s.Name, err)
	}
	zero := powershell.Args{}
	for k, v := range args {
		if v == nil {
			zero[k] = nil
			continue
		}
		zero[k] = reflect.Zero(reflect.TypeOf(v)).Interface()
	}
	zargv, _, err := powershell.Command(s, zero)
	if err != nil {
		t.Fatalf("%s: %v", s.Name, err)
	}
	if !reflect.DeepEqual(argv, zargv) {
		t.Errorf("%s: the command line depends on the arguments", s.Name)
	}
	js, err := base64.StdEncoding.DecodeString(string(stdin))
	if err != nil {
		t.Fatalf("%s: stdin is not base64: %v", s.Name, err)
	}
	var got, want any
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatalf("%s: stdin: %v", s.Name, err)
	}
	wjs, _ := json.Marshal(args)
	if err := json.Unmarshal(wjs, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: stdin carries %v, want %v", s.Name, got, want)
	}
}

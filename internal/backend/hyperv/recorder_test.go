package hyperv

// A minimal recording Runner and golden-file helpers, with the names and
// shapes of internal/powershell/pstest (Recorder, Call, Golden,
// CheckArgsInert).

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

var update = flag.Bool("update", false, "rewrite the golden files")

// Call is one recorded script run.
type Call struct {
	Script powershell.Script
	Args   powershell.Args
}

// Recorder is a powershell.Runner for tests: it records every call and
// answers from Outputs (script name -> JSON text) or Errors.
type Recorder struct {
	mu      sync.Mutex
	Outputs map[string]string
	Errors  map[string]error
	Calls   []Call
}

// Run implements powershell.Runner.
func (r *Recorder) Run(ctx context.Context, s powershell.Script, args powershell.Args, out any) error {
	r.mu.Lock()
	r.Calls = append(r.Calls, Call{Script: s, Args: cloneArgs(args)})
	err := r.Errors[s.Name]
	text := r.Outputs[s.Name]
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return powershell.Decode([]byte(text), out)
}

// Reset forgets the recorded calls.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.Calls = nil
	r.mu.Unlock()
}

func cloneArgs(args powershell.Args) powershell.Args {
	c := powershell.Args{}
	for k, v := range args {
		c[k] = v
	}
	return c
}

// Golden compares dir/name.ps1 with s.Text and dir/name.args.json with
// args as indented JSON; -update rewrites them.
func Golden(t *testing.T, dir, name string, s powershell.Script, args powershell.Args) {
	t.Helper()
	if args == nil {
		args = powershell.Args{}
	}
	js, err := json.MarshalIndent(args, "", "  ")
	if err != nil {
		t.Fatalf("%s: arguments: %v", name, err)
	}
	js = append(js, '\n')
	files := map[string][]byte{
		filepath.Join(dir, name+".ps1"):       []byte(s.Text),
		filepath.Join(dir, name+".args.json"): js,
	}
	for path, got := range files {
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v (run go test -update to write it)", err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the golden file (run go test -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
		}
	}
}

// CheckArgsInert checks that args cannot change what PowerShell runs: the
// command line for s is the same with args as without, and standard input
// carries args back intact.
func CheckArgsInert(t *testing.T, s powershell.Script, args powershell.Args) {
	t.Helper()
	argv, stdin, err := powershell.Command(s, args)
	if err != nil {
		t.Fatalf("%s: %v", s.Name, err)
	}
	zero := powershell.Args{}
	for k := range args {
		zero[k] = nil
	}
	argv0, _, err := powershell.Command(s, zero)
	if err != nil {
		t.Fatalf("%s: %v", s.Name, err)
	}
	if !reflect.DeepEqual(argv, argv0) {
		t.Fatalf("%s: the command line depends on the arguments", s.Name)
	}
	raw, err := base64.StdEncoding.DecodeString(string(stdin))
	if err != nil {
		t.Fatalf("%s: stdin is not base64: %v", s.Name, err)
	}
	want, _ := json.Marshal(args)
	var got, wantV any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%s: stdin: %v", s.Name, err)
	}
	json.Unmarshal(want, &wantV)
	if !reflect.DeepEqual(got, wantV) {
		t.Fatalf("%s: stdin carries %s, want %s", s.Name, raw, want)
	}
}

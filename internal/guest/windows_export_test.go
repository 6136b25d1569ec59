package guest

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/powershell"
)

var exportScript = powershell.Script{Name: "export-test", Text: "param([string]$Text)\n$Text\n"}

// TestRunScript: RunScript runs the script itself, outside the session,
// and decodes its output.
func TestRunScript(t *testing.T) {
	rr := &recordingRunner{answer: func(backend.ExecRequest) backend.ExecResult { return backend.ExecResult{Stdout: []byte(`"out"`)} }}
	var out string
	if err := RunScript(context.Background(), rr, exportScript, powershell.Args{"Text": "x"}, &out); err != nil || out != "out" {
		t.Fatalf("%q %v", out, err)
	}
	if req := rr.reqs[0]; req.Path != "powershell.exe" || !reflect.DeepEqual(req.Args, argvOf(t, exportScript)) || decodeArgs(t, req)["Text"] != "x" {
		t.Fatalf("ran %s %v", req.Path, req.Args)
	}
}

// TestInSessionTimeout: InSession runs the script through the session's
// scheduled task, bounded by its timeout, 30 s by default.
func TestInSessionTimeout(t *testing.T) {
	for _, c := range []struct {
		timeout time.Duration
		want    float64
	}{{0, 30}, {-time.Second, 30}, {150 * time.Second, 150}} {
		rr := &recordingRunner{answer: func(backend.ExecRequest) backend.ExecResult {
			js, _ := json.Marshal(map[string]string{"out": `"done"`, "err": ""})
			return backend.ExecResult{Stdout: js}
		}}
		var out string
		if err := InSession(context.Background(), rr, c.timeout, exportScript, powershell.Args{"Text": "x"}, &out); err != nil || out != "done" {
			t.Fatalf("%v: %q %v", c.timeout, out, err)
		}
		req := rr.reqs[0]
		args := decodeArgs(t, req)
		if !reflect.DeepEqual(req.Args, argvOf(t, sessionScript)) || args["TimeoutSeconds"] != c.want {
			t.Errorf("%v: session arguments %v", c.timeout, args)
		}
		if argv := argvOf(t, exportScript); args["Command"] != argv[len(argv)-1] {
			t.Errorf("%v: the session runs another command", c.timeout)
		}
	}
}

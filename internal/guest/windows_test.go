package guest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/powershell"
	"github.com/hvkube/hvkube/internal/powershell/pstest"
)

// decodeArgs reads back the arguments a request hands its script.
func decodeArgs(t testing.TB, req backend.ExecRequest) map[string]any {
	t.Helper()
	js, err := base64.StdEncoding.DecodeString(string(req.Stdin))
	if err != nil {
		t.Fatalf("stdin is not base64: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatalf("stdin: %v", err)
	}
	return m
}

// argvOf is the command line that runs s, whatever its arguments.
func argvOf(t testing.TB, s powershell.Script) []string {
	t.Helper()
	argv, _, err := powershell.Command(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return argv
}

func TestWindowsScripts(t *testing.T) {
	ctx := context.Background()
	w := WindowsOS{}
	answer := backend.ExecResult{Stdout: []byte("null")}
	rr := &recordingRunner{answer: func(backend.ExecRequest) backend.ExecResult { return answer }}
	last := func() backend.ExecRequest { return rr.reqs[len(rr.reqs)-1] }

	if err := w.Ready(ctx, rr); err != nil {
		t.Fatal(err)
	}
	if req := last(); req.Path != "powershell.exe" || !reflect.DeepEqual(req.Args, argvOf(t, winReady)) {
		t.Fatalf("ready ran %v", req.Args)
	}
	answer = backend.ExecResult{ExitCode: 1, Stderr: []byte(`{"message":"no user is logged on to the desktop","category":"OperationStopped","errorId":"x"}` + "\n")}
	if err := w.Ready(ctx, rr); err == nil || !strings.Contains(err.Error(), "no user is logged on") {
		t.Fatalf("ready error: %v", err)
	}
	answer = backend.ExecResult{Stdout: []byte("null")}

	if err := w.Identity(ctx, rr, "a-sandbox-name-longer-than-fifteen"); err != nil {
		t.Fatal(err)
	}
	args := decodeArgs(t, last())
	if args["Hostname"] != "a-sandbox-name" || !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(args["MachineGuid"].(string)) {
		t.Fatalf("identity args %v", args)
	}
	if !reflect.DeepEqual(last().Args, argvOf(t, winIdentity)) {
		t.Fatal("identity runs another script")
	}

	if err := w.SetClock(ctx, rr, time.UnixMilli(1700000000123)); err != nil {
		t.Fatal(err)
	}
	if got := decodeArgs(t, last())["UnixMillis"]; got != float64(1700000000123) {
		t.Fatalf("clock args %v", got)
	}
	if err := w.SetResolution(ctx, rr, "1280x800"); !errors.Is(err, api.ErrUnsupported) {
		t.Fatalf("resolution: %v", err)
	}
}

func TestWindowsInSession(t *testing.T) {
	ctx := context.Background()
	w := WindowsOS{}
	var out, errText string
	rr := &recordingRunner{answer: func(backend.ExecRequest) backend.ExecResult {
		js, _ := json.Marshal(map[string]string{"out": out, "err": errText})
		return backend.ExecResult{Stdout: js}
	}}
	out = `"clip ✓ 'q'"`
	got, err := w.ClipboardGet(ctx, rr)
	if err != nil || got != "clip ✓ 'q'" {
		t.Fatalf("clipboard get: %q %v", got, err)
	}
	req := rr.reqs[0]
	if !reflect.DeepEqual(req.Args, argvOf(t, sessionScript)) {
		t.Fatal("the session runs through another script")
	}
	args := decodeArgs(t, req)
	if argv := argvOf(t, winClipboardGet); args["Command"] != argv[len(argv)-1] || args["TimeoutSeconds"] != float64(30) {
		t.Fatalf("session args %v", args)
	}

	out = `{"x":12,"y":34}`
	if x, y, err := w.Cursor(ctx, rr); err != nil || x != 12 || y != 34 {
		t.Fatalf("cursor: %d,%d %v", x, y, err)
	}

	out = "null"
	if err := w.ClipboardSet(ctx, rr, "text"); err != nil {
		t.Fatal(err)
	}
	inner, err := base64.StdEncoding.DecodeString(decodeArgs(t, rr.reqs[len(rr.reqs)-1])["ArgsBase64"].(string))
	if err != nil || string(inner) != `{"Text":"text"}` {
		t.Fatalf("inner args %q %v", inner, err)
	}

	out, errText = "", "\r\n"+`{"message":"Access is denied","category":"PermissionDenied","errorId":"y"}`+"\r\n"
	if err := w.TypeText(ctx, rr, "x"); err == nil || !strings.Contains(err.Error(), "Access is denied") {
		t.Fatalf("an error in the session: %v", err)
	}
}

// FuzzWindowsValuesNeverChangeScripts: whatever text, host names or paths
// hold, the command line a Windows guest runs is the script's own.
func FuzzWindowsValuesNeverChangeScripts(f *testing.F) {
	for _, s := range []string{"", "plain", `it's "quoted"`, "$(Remove-Item C:\\ -Recurse)", "`$env:PATH`", "a; b; c", "line\nbreak\r\n", "'); iex('x", "\x00nul", "héllo ✓ 😀"} {
		f.Add(s)
	}
	w := WindowsOS{}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, v string) {
		js, _ := json.Marshal(map[string]string{"out": "", "err": ""})
		rr := &recordingRunner{answer: func(backend.ExecRequest) backend.ExecResult { return backend.ExecResult{Stdout: js} }}
		w.ClipboardSet(ctx, rr, v)
		w.TypeText(ctx, rr, v)
		w.Identity(ctx, rr, v)
		p := w.Probes()
		reqs := append(rr.reqs, p.ReadFile(v), p.Touch(v), p.Exists(v))
		want := [][]string{argvOf(t, sessionScript), argvOf(t, sessionScript), argvOf(t, winIdentity), argvOf(t, probeRead), argvOf(t, probeTouch), argvOf(t, probeExists)}
		for i, req := range reqs {
			if !reflect.DeepEqual(req.Args, want[i]) {
				t.Fatalf("request %d: the value %q changed the command line", i, v)
			}
		}
		// The value reaches the script intact, as an argument.
		for i, name := range []string{"Text", "Text"} {
			inner, err := base64.StdEncoding.DecodeString(decodeArgs(t, reqs[i])["ArgsBase64"].(string))
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]string
			if err := json.Unmarshal(inner, &m); err != nil || m[name] != strings.ToValidUTF8(v, "\uFFFD") {
				t.Fatalf("request %d carries %q, want %q (%v)", i, m[name], v, err)
			}
		}
	})
}

// TestWindowsGolden keeps every script a Windows guest runs, and the
// arguments it is given, in testdata/windows (go test -update rewrites them).
func TestWindowsGolden(t *testing.T) {
	cases := []struct {
		s    powershell.Script
		args powershell.Args
	}{
		{winReady, nil},
		{winIdentity, powershell.Args{"Hostname": "desk-1", "MachineGuid": "0f8fad5b-d9cb-469f-a165-70867728950e"}},
		{winSetClock, powershell.Args{"UnixMillis": int64(1700000000123)}},
		{winTypeText, powershell.Args{"Text": "{a}+b"}},
		{winCursor, nil},
		{winClipboardGet, nil},
		{winClipboardSet, powershell.Args{"Text": "clip"}},
		{sessionScript, powershell.Args{"Command": "QQBCAEMA", "ArgsBase64": "e30=", "TimeoutSeconds": 30}},
		{winGlob, powershell.Args{"Pattern": `C:\Users\Public\*.txt`}},
		{winProcess, powershell.Args{"Name": "explorer"}},
		{winListening, powershell.Args{"Port": 3389}},
		{probeRead, powershell.Args{"Path": `C:\Users\Public\t`}},
		{probeTouch, powershell.Args{"Path": `C:\Users\Public\t`}},
		{probeExists, powershell.Args{"Path": `C:\Users\Public\t`}},
		{probeSync, nil},
		{probeHostname, nil},
		{probeIDs, nil},
	}
	for _, c := range cases {
		pstest.Golden(t, "testdata/windows", c.s.Name, c.s, c.args)
	}
}

func TestProbesText(t *testing.T) {
	w, l := WindowsOS{}.Probes(), NewLinux(nil).Probes()
	if got := w.Text([]byte("\xef\xbb\xbf\"h\\u00e9llo\\n\"")); got != "héllo\n" {
		t.Errorf("windows probe text %q", got)
	}
	if got := l.Text([]byte("plain\n")); got != "plain\n" {
		t.Errorf("linux probe text %q", got)
	}
	if got := w.TypedWrite("it's", `C:\x`); got != `[IO.File]::WriteAllText('C:\x', 'it''s' + [char]10)` {
		t.Errorf("windows typed line %q", got)
	}
	if got := l.TypedWrite("it's", "/tmp/x"); got != `echo 'it'\''s' > /tmp/x` {
		t.Errorf("linux typed line %q", got)
	}
}

func TestGuestChecks(t *testing.T) {
	ctx := context.Background()
	answers := map[string]backend.ExecResult{}
	rr := &recordingRunner{answer: func(req backend.ExecRequest) backend.ExecResult { return answers[req.Path] }}
	w, l := WindowsOS{}, NewLinux(nil)

	answers["powershell.exe"] = backend.ExecResult{Stdout: []byte(`"C:\\Users\\Public\\a.txt"`)}
	if files, err := w.Glob(ctx, rr, `C:\Users\Public\*.txt`); err != nil || len(files) != 1 || files[0] != `C:\Users\Public\a.txt` {
		t.Fatalf("windows glob: %q %v", files, err)
	}
	if got := decodeArgs(t, rr.reqs[len(rr.reqs)-1])["Pattern"]; got != `C:\Users\Public\*.txt` {
		t.Fatalf("glob pattern %v", got)
	}
	answers["powershell.exe"] = backend.ExecResult{Stdout: []byte("0")}
	if err := w.ProcessRunning(ctx, rr, "notepad.exe"); err == nil || !strings.Contains(err.Error(), `no process "notepad.exe"`) {
		t.Fatalf("windows process: %v", err)
	}
	if got := decodeArgs(t, rr.reqs[len(rr.reqs)-1])["Name"]; got != "notepad" {
		t.Fatalf("process name %v", got)
	}
	answers["powershell.exe"] = backend.ExecResult{Stdout: []byte("false")}
	if err := w.Listening(ctx, rr, 8080); err == nil || !strings.Contains(err.Error(), "port 8080") {
		t.Fatalf("windows listening: %v", err)
	}
	for _, os := range []OS{w, l} {
		if _, err := os.Glob(ctx, rr, "relative/*"); err == nil {
			t.Errorf("%s glob of a relative pattern", os.Name())
		}
	}

	answers["/bin/sh"] = backend.ExecResult{Stdout: []byte("/tmp/a b.txt\n/tmp/c.txt\n")}
	files, err := l.Glob(ctx, rr, "/tmp/*.txt")
	if err != nil || !reflect.DeepEqual(files, []string{"/tmp/a b.txt", "/tmp/c.txt"}) {
		t.Fatalf("linux glob: %q %v", files, err)
	}
	if req := rr.reqs[len(rr.reqs)-1]; req.Args[0] != "-c" || req.Args[1] != globScript || req.Args[3] != "/tmp/*.txt" {
		t.Fatalf("linux glob ran %q", req.Args)
	}
	answers["pgrep"] = backend.ExecResult{ExitCode: 1}
	if err := l.ProcessRunning(ctx, rr, "firefox"); err == nil {
		t.Fatal("linux process check passed with pgrep exiting 1")
	}
	answers["bash"] = backend.ExecResult{}
	if err := l.Listening(ctx, rr, 22); err != nil {
		t.Fatal(err)
	}
}

package powershell

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// The tests of Local run this test binary in place of powershell.exe: with
// PSSTANDIN_MODE set, TestMain is a stand-in for PowerShell's process. It
// checks and decodes the command line and stdin the way PowerShell would
// receive them and then behaves as the mode says (echo what it received,
// fail the way the wrapper fails, hang, flood stdout). It tests hvkube's
// handling of the process (arguments, environment, exit codes, limits,
// cancellation), not PowerShell. The variables are not named HVKUBE_*,
// which Local keeps from the child.
const (
	standInMode  = "PSSTANDIN_MODE"
	standInReady = "PSSTANDIN_READY" // a file the stand-in creates once it runs
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(standInMode); mode != "" {
		os.Exit(standIn(mode))
	}
	os.Exit(m.Run())
}

// echoed is what the stand-in's echo mode writes.
type echoed struct {
	Command string          `json:"command"` // -EncodedCommand, decoded
	Args    json.RawMessage `json:"args"`    // stdin, decoded
	Env     map[string]bool `json:"env"`     // which variables it saw
}

func standIn(mode string) int {
	argv := os.Args[1:]
	if len(argv) != len(fixedFlags)+1 || !slices.Equal(argv[:len(fixedFlags)], fixedFlags) {
		fmt.Fprintf(os.Stderr, "stand-in: unexpected arguments %q\n", argv)
		return 90
	}
	command := decodeCommand(standInTB{}, argv[len(argv)-1])
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stand-in: stdin:", err)
		return 91
	}
	args, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(in)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "stand-in: stdin is not base64:", err)
		return 92
	}
	if p := os.Getenv(standInReady); p != "" {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "stand-in:", err)
			return 93
		}
	}
	switch mode {
	case "echo":
		env := map[string]bool{}
		for _, name := range []string{"HVKUBE_TOKEN", "PSModulePath", "PSSTANDIN_MODE"} {
			_, env[name] = os.LookupEnv(name)
		}
		b, _ := json.Marshal(echoed{Command: command, Args: args, Env: env})
		os.Stdout.Write(b)
	case "string":
		os.Stdout.WriteString(`"hello"`)
	case "fail":
		os.Stderr.WriteString("#< CLIXML\r\nnative tool: a line on stderr\r\n")
		os.Stderr.WriteString("\r\n" + `{"category":"ObjectNotFound","message":"no VM named x","errorId":"VMNotFound"}` + "\r\n")
		return 1
	case "noisy-fail":
		line := strings.Repeat("n", 1023) + "\n"
		for range 4 * stderrKeep / len(line) {
			os.Stderr.WriteString(line)
		}
		os.Stderr.WriteString(`{"category":"InvalidArgument","message":"bad name","errorId":"InvalidParameter"}` + "\r\n")
		return 1
	case "parse-error":
		os.Stderr.WriteString("At line:1 char:1\r\nMissing ')' in function parameter list.\r\n")
		return 1
	case "exit3":
		return 3
	case "exit0":
		return 0
	case "sleep":
		time.Sleep(10 * time.Minute)
	case "flood":
		chunk := []byte(strings.Repeat("x", 64<<10))
		for {
			if _, err := os.Stdout.Write(chunk); err != nil {
				return 94
			}
		}
	default:
		fmt.Fprintln(os.Stderr, "stand-in: unknown mode", mode)
		return 95
	}
	return 0
}

// standInTB lets decodeCommand run in the stand-in, outside a test.
type standInTB struct{ testing.TB }

func (standInTB) Helper() {}
func (standInTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "stand-in: "+format+"\n", args...)
	os.Exit(96)
}

// standInLocal is a Local whose PowerShell is the stand-in in mode.
func standInLocal(t *testing.T, mode string) *Local {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(standInMode, mode)
	return &Local{Exe: exe}
}

var testScript = Script{Name: "test-script", Text: "param([string]$Name, [string[]]$Tags, $Data)\n$Name\n"}

func TestLocalRunEcho(t *testing.T) {
	l := standInLocal(t, "echo")
	t.Setenv("HVKUBE_TOKEN", "secret")
	t.Setenv("PSModulePath", `C:\Program Files\PowerShell\7\Modules`)
	args := Args{"Name": "x'; Remove-Item -Recurse C:\\ #", "Tags": []string{"a", "é😀"}, "Data": []byte{0, 0xff}}
	var got echoed
	if err := l.Run(context.Background(), testScript, args, &got); err != nil {
		t.Fatal(err)
	}
	if got.Command != Wrap(testScript) {
		t.Errorf("the process got command %q, want Wrap(s)", got.Command)
	}
	want, _ := json.Marshal(args)
	if string(got.Args) != string(want) {
		t.Errorf("the process got arguments %s, want %s", got.Args, want)
	}
	if got.Env["HVKUBE_TOKEN"] {
		t.Error("HVKUBE_TOKEN reached the process")
	}
	if got.Env["PSModulePath"] {
		t.Error("PSModulePath reached the process")
	}
	if !got.Env["PSSTANDIN_MODE"] {
		t.Error("the rest of the environment did not reach the process")
	}
}

func TestLocalRunOutput(t *testing.T) {
	var s string
	if err := standInLocal(t, "string").Run(context.Background(), testScript, nil, &s); err != nil || s != "hello" {
		t.Errorf("Run = %q, %v; want hello", s, err)
	}
	var ss []string
	if err := standInLocal(t, "string").Run(context.Background(), testScript, nil, &ss); err != nil || !slices.Equal(ss, []string{"hello"}) {
		t.Errorf("Run into a slice = %q, %v", ss, err)
	}
	if err := standInLocal(t, "string").Run(context.Background(), testScript, nil, nil); err != nil {
		t.Errorf("Run without out: %v", err)
	}
}

func TestLocalRunFailures(t *testing.T) {
	for _, tt := range []struct {
		mode    string
		want    Error
		notFnd  bool
		invalid bool
	}{
		{"fail", Error{Script: "test-script", ExitCode: 1, Category: "ObjectNotFound", ErrorID: "VMNotFound", Message: "no VM named x"}, true, false},
		{"noisy-fail", Error{Script: "test-script", ExitCode: 1, Category: "InvalidArgument", ErrorID: "InvalidParameter", Message: "bad name"}, false, true},
		{"parse-error", Error{Script: "test-script", ExitCode: 1, Message: "At line:1 char:1\r\nMissing ')' in function parameter list."}, false, false},
		{"exit3", Error{Script: "test-script", ExitCode: 3}, false, false},
		{"exit0", Error{Script: "test-script", Message: "ended without a result (did the script call exit?)"}, false, false},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			err := standInLocal(t, tt.mode).Run(context.Background(), testScript, Args{"Name": "x"}, new(any))
			var got *Error
			if !errors.As(err, &got) {
				t.Fatalf("Run = %v (%T), want *Error", err, err)
			}
			if *got != tt.want {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
			if errors.Is(err, api.ErrNotFound) != tt.notFnd || errors.Is(err, api.ErrInvalid) != tt.invalid {
				t.Errorf("%v: errors.Is(ErrNotFound) = %v, errors.Is(ErrInvalid) = %v", err, errors.Is(err, api.ErrNotFound), errors.Is(err, api.ErrInvalid))
			}
		})
	}
}

// runBounded runs l and fails the test if Run has not returned long after
// it should have (the stand-in would otherwise run for minutes).
func runBounded(t *testing.T, ctx context.Context, l *Local) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx, testScript, nil, nil) }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("Run did not return")
		return nil
	}
}

func TestLocalRunCancel(t *testing.T) {
	l := standInLocal(t, "sleep")
	ready := filepath.Join(t.TempDir(), "ready")
	t.Setenv(standInReady, ready)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Cancel once the process runs, so that Run must kill it.
		for {
			if _, err := os.Stat(ready); err == nil {
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	err := runBounded(t, ctx, l)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if _, statErr := os.Stat(ready); statErr != nil {
		t.Errorf("the stand-in never ran: %v", statErr)
	}
}

func TestLocalRunOutputLimit(t *testing.T) {
	l := standInLocal(t, "flood")
	l.MaxOutput = 1 << 20
	err := runBounded(t, context.Background(), l)
	if err == nil || !strings.Contains(err.Error(), "output passed 1048576 bytes") {
		t.Errorf("Run = %v, want the output limit", err)
	}
}

func TestLocalRunMissingProgram(t *testing.T) {
	l := &Local{Exe: filepath.Join(t.TempDir(), "no-such-powershell")}
	err := l.Run(context.Background(), testScript, nil, nil)
	var e *Error
	if err == nil || errors.As(err, &e) {
		t.Errorf("Run = %v, want an error starting the program", err)
	}
}

func TestLocalRunRefusesBeforeStarting(t *testing.T) {
	l := standInLocal(t, "echo")
	err := l.Run(context.Background(), Script{Name: "bad", Text: "Get-VM"}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "param()") {
		t.Errorf("Run = %v", err)
	}
	var e echoed
	err = l.Run(context.Background(), testScript, Args{"Name": "\xff"}, &e)
	if err == nil || !reflect.ValueOf(e).IsZero() {
		t.Errorf("Run with invalid UTF-8 = %v, %+v", err, e)
	}
}

// Package powershell runs PowerShell scripts whose values travel only as
// arguments. A Script's text is a constant of the program, beginning with a
// param() block; the values for it are encoded as JSON and handed to the
// process on standard input, where a fixed wrapper binds them to the
// parameters by name. Nothing a user typed is ever part of the script text
// (the command line carries only the wrapper and the constant script).
//
// The wrapper sets $ErrorActionPreference = 'Stop' and silences progress,
// so that any cmdlet error ends the script; it writes the script's output
// as JSON (ConvertTo-Json -Compress) and, on failure, the error's message,
// category and id as JSON on standard error, which Run turns into an
// *Error.
package powershell

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/hvkube/hvkube/internal/api"
)

// Script is a PowerShell script that takes its values only through its
// param() block.
type Script struct {
	// Name names the script in errors, logs and golden files ("new-vm").
	Name string
	// Text is the script, beginning with param(...). It is a constant of
	// the program.
	Text string
}

// Args are a script's parameter values by name. Values must encode as JSON:
// strings, numbers, bools, slices of those, and []byte (sent as a base64
// string; the script decodes it with [Convert]::FromBase64String).
type Args map[string]any

// Runner runs scripts. If out is not nil it receives the script's output,
// decoded from JSON with Decode.
type Runner interface {
	Run(ctx context.Context, s Script, args Args, out any) error
}

// Error is a script that failed: the error PowerShell reported.
type Error struct {
	Script   string
	Message  string
	Category string // the ErrorCategory, such as ObjectNotFound
	ErrorID  string // the FullyQualifiedErrorId
	ExitCode int
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = fmt.Sprintf("exited %d", e.ExitCode)
	}
	return e.Script + ": " + msg
}

// Is maps PowerShell's error categories onto hvkube's: ObjectNotFound is
// api.ErrNotFound, InvalidArgument and InvalidData are api.ErrInvalid.
func (e *Error) Is(target error) bool {
	switch target {
	case api.ErrNotFound:
		return e.Category == "ObjectNotFound"
	case api.ErrInvalid:
		return e.Category == "InvalidArgument" || e.Category == "InvalidData"
	}
	return false
}

// wrapperHead and wrapperTail surround a script's text in the command
// PowerShell runs. The arguments arrive on standard input as base64 of
// UTF-8 JSON (so that no console code page touches them).
const wrapperHead = `$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'
[Console]::OutputEncoding = New-Object System.Text.UTF8Encoding $false
$hvkubeArgs = @{}
$hvkubeIn = [Console]::In.ReadToEnd().Trim()
if ($hvkubeIn) {
  $hvkubeJSON = [System.Text.Encoding]::UTF8.GetString([Convert]::FromBase64String($hvkubeIn))
  (ConvertFrom-Json $hvkubeJSON).PSObject.Properties | ForEach-Object { $hvkubeArgs[$_.Name] = $_.Value }
}
$hvkubeScript = {
`

const wrapperTail = `
}
try {
  $hvkubeOut = @(& $hvkubeScript @hvkubeArgs)
} catch {
  $hvkubeErr = @{ message = [string]$_.Exception.Message; category = [string]$_.CategoryInfo.Category; errorId = [string]$_.FullyQualifiedErrorId }
  [Console]::Error.WriteLine((ConvertTo-Json -InputObject $hvkubeErr -Compress))
  exit 1
}
if ($hvkubeOut.Count -eq 1) {
  [Console]::Out.Write((ConvertTo-Json -InputObject $hvkubeOut[0] -Compress -Depth 6))
} elseif ($hvkubeOut.Count -gt 1) {
  [Console]::Out.Write((ConvertTo-Json -InputObject $hvkubeOut -Compress -Depth 6))
}
exit 0
`

// Wrap returns the whole command text PowerShell runs for s.
func Wrap(s Script) string { return wrapperHead + s.Text + wrapperTail }

// Command returns the arguments of powershell.exe and the standard input
// that run s with args. The script text depends on s alone: args only
// change stdin.
func Command(s Script, args Args) (argv []string, stdin []byte, err error) {
	if !strings.HasPrefix(strings.TrimSpace(s.Text), "param(") {
		return nil, nil, fmt.Errorf("script %s does not begin with param()", s.Name)
	}
	if args == nil {
		args = Args{}
	}
	js, err := json.Marshal(args)
	if err != nil {
		return nil, nil, fmt.Errorf("script %s: arguments: %w", s.Name, err)
	}
	argv = []string{"-NoProfile", "-NonInteractive", "-NoLogo", "-ExecutionPolicy", "Bypass", "-EncodedCommand", Encode(Wrap(s))}
	return argv, []byte(base64.StdEncoding.EncodeToString(js)), nil
}

// Encode is a command's text as -EncodedCommand wants it: base64 of UTF-16LE.
func Encode(text string) string {
	u := utf16.Encode([]rune(text))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		b[2*i] = byte(c)
		b[2*i+1] = byte(c >> 8)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// Decode reads a script's JSON output into v. Empty output leaves v as it
// is. ConvertTo-Json writes one object for a single result and an array
// for several: when v points to a slice a single object becomes a slice of
// one.
func Decode(out []byte, v any) error {
	out = bytes.TrimSpace(bytes.TrimPrefix(out, []byte("\xef\xbb\xbf")))
	if len(out) == 0 || bytes.Equal(out, []byte("null")) || v == nil {
		return nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && rv.Elem().Kind() == reflect.Slice && out[0] != '[' {
		out = append(append([]byte{'['}, out...), ']')
	}
	return json.Unmarshal(out, v)
}

// Local runs scripts with powershell.exe on this host.
type Local struct {
	// Exe is the PowerShell to run (default "powershell.exe", Windows
	// PowerShell 5.1, which has the Hyper-V module).
	Exe string
	// MaxOutput bounds a script's output (default 64 MiB).
	MaxOutput int64
}

// Run implements Runner. ctx cancels the script (its process is killed).
func (l *Local) Run(ctx context.Context, s Script, args Args, out any) error {
	argv, stdin, err := Command(s, args)
	if err != nil {
		return err
	}
	exe := l.Exe
	if exe == "" {
		exe = "powershell.exe"
	}
	limit := l.MaxOutput
	if limit == 0 {
		limit = 64 << 20
	}
	cmd := exec.CommandContext(ctx, exe, argv...)
	cmd.Stdin = bytes.NewReader(stdin)
	stdout := &limitedBuffer{max: limit}
	stderr := &limitedBuffer{max: 1 << 20}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = childEnv()
	cmd.WaitDelay = 5 * time.Second
	hideWindow(cmd)
	err = cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", s.Name, ctx.Err())
	}
	if stdout.over {
		return fmt.Errorf("%s: output passed %d bytes", s.Name, limit)
	}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return fmt.Errorf("%s: start %s: %w", s.Name, exe, err)
		}
		return parseError(s.Name, ee.ExitCode(), stderr.Bytes())
	}
	if err := Decode(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("%s: output: %w", s.Name, err)
	}
	return nil
}

// parseError reads the wrapper's error line from stderr, or else keeps
// stderr's text.
func parseError(name string, code int, stderr []byte) error {
	e := &Error{Script: name, ExitCode: code}
	lines := strings.Split(strings.TrimSpace(string(stderr)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var w struct {
			Message  string `json:"message"`
			Category string `json:"category"`
			ErrorID  string `json:"errorId"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(lines[i])), &w) == nil && w.Message != "" {
			e.Message, e.Category, e.ErrorID = strings.TrimSpace(w.Message), w.Category, w.ErrorID
			return e
		}
	}
	e.Message = strings.TrimSpace(string(stderr))
	return e
}

// childEnv is this process's environment without hvkube's own variables
// (tokens among them).
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(strings.ToUpper(kv), "HVKUBE_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// limitedBuffer keeps at most max bytes and notes that more came.
type limitedBuffer struct {
	bytes.Buffer
	max  int64
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if int64(b.Len())+int64(len(p)) > b.max {
		b.over = true
		return 0, errors.New("output too large")
	}
	return b.Buffer.Write(p)
}

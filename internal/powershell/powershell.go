// Package powershell runs PowerShell scripts whose values travel only as
// arguments. A Script's text is a constant of the program, beginning with a
// param() block; the values for it are encoded as JSON and handed to the
// process on standard input, where a fixed wrapper binds them to the
// parameters by name. Nothing a user typed is ever part of the script text
// (the command line carries only the wrapper and the constant script).
//
// The wrapper is written for Windows PowerShell 5.1. It sets
// $ErrorActionPreference = 'Stop' and silences progress, so that any
// cmdlet error ends the script; it discards the warning, verbose, debug and
// information streams (Write-Host among them), which the console host would
// otherwise print into the output; and it writes the script's output as
// UTF-8 JSON (ConvertTo-Json -Compress -Depth 6) on standard output or, on
// failure, the error's message, category and id as one JSON line on
// standard error, which Result turns into an *Error.
//
// What a script may rely on, and must do:
//
//   - A string argument arrives as a string, a number as Int32, Int64 or
//     Decimal, a bool as a bool (so [switch] parameters work), a []string
//     or other slice as object[] (which binds to [string[]] and [int[]]
//     parameters), []byte as a base64 string (decode it with
//     [Convert]::FromBase64String), and a map or struct as a PSCustomObject
//     (so such a parameter is untyped or [psobject], never [hashtable]).
//   - A string the script writes comes back as a JSON string, even one
//     that carries PowerShell's note properties (Get-Content's lines do);
//     an object's property holds a plain [string] for the same result.
//   - ConvertTo-Json in Windows PowerShell writes enums as numbers and
//     dates as "\/Date(...)\/": a script converts them, [string]$vm.State,
//     $t.ToString('o').
//   - A script ends by returning, never with exit: exit ends the process
//     before the wrapper writes the output, which Result reports as an
//     error.
//   - Cmdlets differ in the category they give an error: Hyper-V's Get-VM
//     reports a missing VM as InvalidArgument. A script that means "not
//     found" says so itself: Write-Error -Category ObjectNotFound.
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
	"unicode/utf8"

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

// Args are a script's parameter values by name. Names are PowerShell
// parameter names (letters, digits and _), unique ignoring case. Values
// must encode as JSON: strings (valid UTF-8), numbers, bools, slices of
// those, and []byte (sent as a base64 string; the script decodes it with
// [Convert]::FromBase64String).
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
		msg = e.ErrorID
	}
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
// UTF-8 JSON, so that no console code page touches them, and the results
// leave as UTF-8 bytes written to the standard handles for the same
// reason (setting [Console]::OutputEncoding instead would change the code
// page of a console the process may share).
//
// Remove-TypeData drops Windows PowerShell's Count alias on arrays, with
// which ConvertTo-Json writes an array that passed through the pipeline as
// {"value":[...],"Count":n}; arrays keep their Count property without it.
// Strings are copied out of the output as plain strings, without the note
// properties that would make ConvertTo-Json write them as objects. The
// script's error stream is left alone: redirecting it would turn every
// line a native program writes to stderr into a terminating error.
const wrapperHead = `$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'
function hvkubeWrite([IO.Stream]$stream, [string]$text) {
  $bytes = [Text.Encoding]::UTF8.GetBytes($text)
  $stream.Write($bytes, 0, $bytes.Length)
  $stream.Flush()
}
try { Remove-TypeData -TypeName System.Array } catch {}
try {
  $hvkubeArgs = @{}
  $hvkubeIn = [Console]::In.ReadToEnd().Trim()
  if ($hvkubeIn) {
    $hvkubeJSON = [Text.Encoding]::UTF8.GetString([Convert]::FromBase64String($hvkubeIn))
    foreach ($hvkubeProp in (ConvertFrom-Json $hvkubeJSON).PSObject.Properties) { $hvkubeArgs[$hvkubeProp.Name] = $hvkubeProp.Value }
  }
  $hvkubeScript = {
`

const wrapperTail = `
}
  $hvkubeOut = @(foreach ($hvkubeItem in @(& $hvkubeScript @hvkubeArgs 3>$null 4>$null 5>$null 6>$null)) {
    if ($hvkubeItem -is [string]) { [string]$hvkubeItem } else { $hvkubeItem }
  })
  $hvkubeResult = $null
  if ($hvkubeOut.Count -eq 1) {
    $hvkubeResult = ConvertTo-Json -InputObject $hvkubeOut[0] -Compress -Depth 6
  } elseif ($hvkubeOut.Count -gt 1) {
    $hvkubeResult = ConvertTo-Json -InputObject $hvkubeOut -Compress -Depth 6
  }
  if (-not $hvkubeResult) { $hvkubeResult = 'null' }
  hvkubeWrite ([Console]::OpenStandardOutput()) $hvkubeResult
} catch {
  $hvkubeErr = @{ message = [string]$_.Exception.Message; category = [string]$_.CategoryInfo.Category; errorId = [string]$_.FullyQualifiedErrorId }
  hvkubeWrite ([Console]::OpenStandardError()) ([Environment]::NewLine + (ConvertTo-Json -InputObject $hvkubeErr -Compress) + [Environment]::NewLine)
  exit 1
}
exit 0
`

// Wrap returns the whole command text PowerShell runs for s.
func Wrap(s Script) string { return wrapperHead + s.Text + wrapperTail }

// maxEncoded bounds the -EncodedCommand argument. Windows limits a command
// line to 32767 UTF-16 units; the rest is left for the program's path and
// the flags.
const maxEncoded = 32000

// Command returns the arguments of powershell.exe and the standard input
// that run s with args. The command line depends on s alone: args only
// change stdin. It fails if s does not begin with param(), if the command
// would not fit on a Windows command line, or if args are not valid
// (see Args).
func Command(s Script, args Args) (argv []string, stdin []byte, err error) {
	if !beginsWithParam(s.Text) {
		return nil, nil, fmt.Errorf("script %s does not begin with param()", s.Name)
	}
	enc := Encode(Wrap(s))
	if len(enc) > maxEncoded {
		return nil, nil, fmt.Errorf("script %s is too long for a command line (%d characters encoded, at most %d)", s.Name, len(enc), maxEncoded)
	}
	if args == nil {
		args = Args{}
	}
	js, err := json.Marshal(args)
	if err == nil {
		err = checkArgs(args) // after Marshal, which refuses cycles
	}
	if err != nil {
		return nil, nil, fmt.Errorf("script %s: arguments: %w", s.Name, err)
	}
	argv = []string{"-NoProfile", "-NonInteractive", "-NoLogo", "-ExecutionPolicy", "Bypass", "-EncodedCommand", enc}
	return argv, []byte(base64.StdEncoding.EncodeToString(js)), nil
}

// beginsWithParam reports whether text begins with a param block, which
// the wrapper needs to bind the arguments.
func beginsWithParam(text string) bool {
	t := strings.TrimSpace(text)
	if len(t) < len("param") || !strings.EqualFold(t[:len("param")], "param") {
		return false
	}
	return strings.HasPrefix(strings.TrimLeft(t[len("param"):], " \t"), "(")
}

// checkArgs refuses names PowerShell cannot bind (or, in Windows
// PowerShell's ConvertFrom-Json, cannot even read: names equal but for
// case) and strings JSON cannot carry unchanged (invalid UTF-8 would
// arrive as U+FFFD).
func checkArgs(args Args) error {
	seen := make(map[string]string, len(args))
	for name, v := range args {
		if !validName(name) {
			return fmt.Errorf("%q is not a parameter name", name)
		}
		lower := strings.ToLower(name)
		if other, ok := seen[lower]; ok {
			return fmt.Errorf("%q and %q are the same parameter", other, name)
		}
		seen[lower] = name
		if !validUTF8(reflect.ValueOf(v)) {
			return fmt.Errorf("%s: a string is not valid UTF-8", name)
		}
	}
	return nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// validUTF8 reports whether every string in v (map keys included) is valid
// UTF-8. Byte slices are exempt: JSON carries them as base64.
func validUTF8(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		return v.IsNil() || validUTF8(v.Elem())
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return true
		}
		for i := range v.Len() {
			if !validUTF8(v.Index(i)) {
				return false
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if !validUTF8(it.Key()) || !validUTF8(it.Value()) {
				return false
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && !validUTF8(v.Field(i)) {
				return false
			}
		}
	}
	return true
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

// Decode reads a script's JSON output into v. Empty output and null leave
// v as it is. ConvertTo-Json writes one value for a single result and an
// array for several: when v points to a slice, a single value becomes a
// slice of one (except for byte slices, json.RawMessage among them, which
// take the text as it is).
func Decode(out []byte, v any) error {
	out = bytes.TrimSpace(bytes.TrimPrefix(out, []byte("\xef\xbb\xbf")))
	if len(out) == 0 || bytes.Equal(out, []byte("null")) || v == nil {
		return nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && !rv.IsNil() && rv.Elem().Kind() == reflect.Slice &&
		rv.Elem().Type().Elem().Kind() != reflect.Uint8 && out[0] != '[' {
		out = append(append([]byte{'['}, out...), ']')
	}
	return json.Unmarshal(out, v)
}

// Result interprets a finished run of Command's program: its exit code and
// what it wrote. A failure is an *Error; success decodes stdout into out
// (if not nil) with Decode. Local uses it, as can a runner that carries
// the program elsewhere (into a guest).
func Result(name string, exitCode int, stdout, stderr []byte, out any) error {
	if exitCode != 0 {
		return parseError(name, exitCode, stderr)
	}
	if len(bytes.TrimSpace(stdout)) == 0 {
		// The wrapper always writes a result, null at least: without one
		// the script ended the process itself (exit).
		return &Error{Script: name, Message: "ended without a result (did the script call exit?)"}
	}
	if err := Decode(stdout, out); err != nil {
		return fmt.Errorf("%s: output: %w", name, err)
	}
	return nil
}

// Local runs scripts with powershell.exe on this host.
type Local struct {
	// Exe is the PowerShell to run (default "powershell.exe", Windows
	// PowerShell 5.1, which has the Hyper-V module).
	Exe string
	// MaxOutput bounds a script's output (default 64 MiB). A script that
	// writes more is stopped.
	MaxOutput int64
}

// stderrKeep is how much of the end of a script's standard error Run
// keeps: the wrapper's error line comes last.
const stderrKeep = 256 << 10

// Run implements Runner. ctx cancels the script: its process is killed,
// and Run returns ctx's error. The child gets this process's environment
// without hvkube's own variables.
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
	if limit <= 0 {
		limit = 64 << 20
	}
	cmd := exec.CommandContext(ctx, exe, argv...)
	cmd.Stdin = bytes.NewReader(stdin)
	stdout := &limitedBuffer{max: limit}
	stderr := &tailBuffer{keep: stderrKeep}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = childEnv(os.Environ())
	// A program the script started may hold the pipes open after
	// PowerShell is gone; stop waiting for it.
	cmd.WaitDelay = 5 * time.Second
	hideWindow(cmd)
	err = cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", s.Name, ctx.Err())
	}
	if stdout.over {
		return fmt.Errorf("%s: output passed %d bytes", s.Name, limit)
	}
	code := 0
	if err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		// (ErrWaitDelay: PowerShell succeeded, but a program it started
		// kept the pipes open; what PowerShell wrote is all there.)
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return fmt.Errorf("%s: run %s: %w", s.Name, exe, err)
		}
		code = ee.ExitCode()
	}
	return Result(s.Name, code, stdout.Bytes(), stderr.Bytes(), out)
}

// parseError reads the wrapper's error line from stderr, or else keeps
// stderr's text.
func parseError(name string, code int, stderr []byte) error {
	e := &Error{Script: name, ExitCode: code}
	lines := strings.Split(string(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var w struct {
			Message  *string `json:"message"`
			Category *string `json:"category"`
			ErrorID  *string `json:"errorId"`
		}
		if json.Unmarshal([]byte(line), &w) != nil || w.Message == nil || w.Category == nil || w.ErrorID == nil {
			continue
		}
		e.Message, e.Category, e.ErrorID = strings.TrimSpace(*w.Message), *w.Category, *w.ErrorID
		return e
	}
	e.Message = strings.TrimSpace(string(stderr))
	return e
}

// childEnv is env without hvkube's own variables (tokens among them) and
// without PSModulePath: started from PowerShell 7, hvkube would pass on
// 7's module path, and Windows PowerShell would load 7's modules from it.
// Without the variable PowerShell builds its own path.
func childEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		name := envName(kv)
		if strings.HasPrefix(strings.ToUpper(name), "HVKUBE_") || strings.EqualFold(name, "PSModulePath") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// envName is the name in a NAME=value entry. On Windows a name may begin
// with "=" (=C:=C:\dir).
func envName(kv string) string {
	if kv == "" {
		return ""
	}
	if i := strings.IndexByte(kv[1:], '='); i >= 0 {
		return kv[:i+1]
	}
	return kv
}

// limitedBuffer keeps at most max bytes and notes that more came. Its
// failed write closes the pipe, which stops the script. (It has no
// ReadFrom, which io.Copy would use instead of Write, past the limit: so
// it does not embed its bytes.Buffer.)
type limitedBuffer struct {
	buf  bytes.Buffer
	max  int64
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if int64(b.buf.Len())+int64(len(p)) > b.max {
		b.over = true
		return 0, errors.New("output too large")
	}
	return b.buf.Write(p)
}

// Bytes returns what was kept.
func (b *limitedBuffer) Bytes() []byte { return b.buf.Bytes() }

// tailBuffer keeps the last keep bytes written to it and never fails, so
// that a script's chatter on stderr neither stops it nor hides the error
// line at the end.
type tailBuffer struct {
	buf  []byte
	keep int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*b.keep {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.keep:]...)
	}
	return len(p), nil
}

// Bytes returns the last keep bytes written.
func (b *tailBuffer) Bytes() []byte {
	if len(b.buf) > b.keep {
		return b.buf[len(b.buf)-b.keep:]
	}
	return b.buf
}

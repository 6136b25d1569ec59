package guest

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/powershell"
)

// WindowsOS is a Windows desktop: every operation is a PowerShell script
// run in the guest with powershell.exe (Windows PowerShell 5.1), its values
// passed as arguments on standard input (internal/powershell). The Runner
// runs programs as an administrator outside the desktop's session (QEMU's
// guest agent, Hyper-V's PowerShell Direct); what needs the desktop user's
// session (the clipboard, the pointer, typing) runs there as a one-shot
// scheduled task (see sessionScript).
type WindowsOS struct{}

// Name implements OS.
func (WindowsOS) Name() string { return Windows }

// RunScript runs s with args in a Windows guest, as the Runner's account
// and outside the desktop user's session, and decodes its output into out
// (powershell.Result): for work that needs no desktop.
func RunScript(ctx context.Context, r Runner, s powershell.Script, args powershell.Args, out any) error {
	return runScript(ctx, r, s, args, out)
}

// runScript runs s with args in the guest and decodes its output into out.
func runScript(ctx context.Context, r Runner, s powershell.Script, args powershell.Args, out any) error {
	argv, stdin, err := powershell.Command(s, args)
	if err != nil {
		return err
	}
	res, err := r.Exec(ctx, backend.ExecRequest{Path: "powershell.exe", Args: argv, Stdin: stdin})
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	return powershell.Result(s.Name, res.ExitCode, res.Stdout, res.Stderr, out)
}

// Ready implements OS: a user is logged on and the shell (explorer.exe)
// runs.
func (WindowsOS) Ready(ctx context.Context, r Runner) error {
	return runScript(ctx, r, winReady, nil, nil)
}

// SetResolution implements OS: Windows guests take their resolution from
// the VM (Hyper-V sets it on the VM's video device before it starts).
func (WindowsOS) SetResolution(ctx context.Context, r Runner, res string) error {
	return fmt.Errorf("resolution %s: a Windows guest takes the template's display.resolution: %w", res, api.ErrUnsupported)
}

// Identity implements OS: a new MachineGuid (at once) and a new computer
// name, which Windows applies at its next restart (a clone never
// restarts; the name is what a restarted sandbox would have). Computer
// names are NetBIOS names: at most 15 characters.
func (WindowsOS) Identity(ctx context.Context, r Runner, hostname string) error {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return err
	}
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	guid := fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16])
	return runScript(ctx, r, winIdentity, powershell.Args{"Hostname": NetBIOSName(hostname), "MachineGuid": guid}, nil)
}

// Rename implements OS: the computer name alone (see Identity).
func (WindowsOS) Rename(ctx context.Context, r Runner, hostname string) error {
	return runScript(ctx, r, winIdentity, powershell.Args{"Hostname": NetBIOSName(hostname), "MachineGuid": ""}, nil)
}

// NetBIOSName is hostname cut to the 15 characters a Windows computer name
// may have.
func NetBIOSName(hostname string) string {
	if len(hostname) > 15 {
		hostname = strings.TrimRight(hostname[:15], "-")
	}
	return hostname
}

// SetClock implements OS.
func (WindowsOS) SetClock(ctx context.Context, r Runner, t time.Time) error {
	return runScript(ctx, r, winSetClock, powershell.Args{"UnixMillis": t.UnixMilli()}, nil)
}

// TypeText implements OS with SendKeys in the desktop user's session.
func (WindowsOS) TypeText(ctx context.Context, r Runner, text string) error {
	return inSession(ctx, r, winTypeText, powershell.Args{"Text": text}, nil)
}

// Cursor implements OS: the pointer's position in the user's session.
func (WindowsOS) Cursor(ctx context.Context, r Runner) (int, int, error) {
	var p struct{ X, Y int }
	if err := inSession(ctx, r, winCursor, nil, &p); err != nil {
		return 0, 0, err
	}
	return p.X, p.Y, nil
}

// ClipboardGet implements OS: Get-Clipboard in the user's session.
func (WindowsOS) ClipboardGet(ctx context.Context, r Runner) (string, error) {
	var s string
	err := inSession(ctx, r, winClipboardGet, nil, &s)
	return s, err
}

// ClipboardSet implements OS: Set-Clipboard in the user's session.
func (WindowsOS) ClipboardSet(ctx context.Context, r Runner, text string) error {
	return inSession(ctx, r, winClipboardSet, powershell.Args{"Text": text}, nil)
}

// IsAbs implements OS: a drive letter and a separator (C:\x, C:/x) or a
// UNC path (\\server\share).
func (WindowsOS) IsAbs(p string) bool {
	if strings.ContainsRune(p, 0) {
		return false
	}
	letter := func(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }
	if len(p) >= 3 && letter(p[0]) && p[1] == ':' && (p[2] == '\\' || p[2] == '/') {
		return true
	}
	return len(p) > 2 && (strings.HasPrefix(p, `\\`) || strings.HasPrefix(p, `//`)) && p[2] != '\\' && p[2] != '/'
}

// Glob implements OS with Get-ChildItem, whose -Path expands wildcards.
func (w WindowsOS) Glob(ctx context.Context, r Runner, pattern string) ([]string, error) {
	if !w.IsAbs(pattern) {
		return nil, fmt.Errorf("%q is not an absolute path in the guest", pattern)
	}
	var files []string
	err := runScript(ctx, r, winGlob, powershell.Args{"Pattern": pattern}, &files)
	return files, err
}

// ProcessRunning implements OS with Get-Process (the name without .exe).
func (WindowsOS) ProcessRunning(ctx context.Context, r Runner, name string) error {
	var n int
	if err := runScript(ctx, r, winProcess, powershell.Args{"Name": strings.TrimSuffix(name, ".exe")}, &n); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no process %q runs in the guest", name)
	}
	return nil
}

// Listening implements OS: a TCP connection to the guest's loopback.
func (WindowsOS) Listening(ctx context.Context, r Runner, port int) error {
	var ok bool
	if err := runScript(ctx, r, winListening, powershell.Args{"Port": port}, &ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("nothing listens on port %d in the guest", port)
	}
	return nil
}

// sessionTimeout bounds a script run in the user's session.
const sessionTimeout = 30 * time.Second

// InSession runs s with args in the logged-on desktop user's session, as
// inSession does, for at most timeout (30 s when timeout is 0 or less):
// for work on the desktop (windows, the pointer, programs the user sees).
// The script's command goes through cmd.exe there, so the wrapped script,
// encoded, must stay well under cmd.exe's 8191 characters.
func InSession(ctx context.Context, r Runner, timeout time.Duration, s powershell.Script, args powershell.Args, out any) error {
	if timeout <= 0 {
		timeout = sessionTimeout
	}
	return inSessionFor(ctx, r, timeout, s, args, out)
}

// inSession runs s with args in the desktop user's session: sessionScript
// hands the command that runs s (the constant script, encoded) and its
// arguments to a one-shot scheduled task of the logged-on user, waits for
// it and returns what the script wrote.
func inSession(ctx context.Context, r Runner, s powershell.Script, args powershell.Args, out any) error {
	return inSessionFor(ctx, r, sessionTimeout, s, args, out)
}

// inSessionFor is inSession bounded by timeout (whole seconds).
func inSessionFor(ctx context.Context, r Runner, timeout time.Duration, s powershell.Script, args powershell.Args, out any) error {
	argv, stdin, err := powershell.Command(s, args)
	if err != nil {
		return err
	}
	var result struct {
		Out string `json:"out"`
		Err string `json:"err"`
	}
	err = runScript(ctx, r, sessionScript, powershell.Args{"Command": argv[len(argv)-1], "ArgsBase64": string(stdin), "TimeoutSeconds": int(timeout / time.Second)}, &result)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	code := 0
	if strings.TrimSpace(result.Out) == "" { // the wrapper writes a result unless it failed
		code = 1
	}
	return powershell.Result(s.Name, code, []byte(result.Out), []byte(result.Err), out)
}

// Scripts run in a Windows guest.
var (
	winReady = powershell.Script{Name: "guest-ready", Text: `param()
$user = (Get-CimInstance -ClassName Win32_ComputerSystem).UserName
if (-not $user) { throw 'no user is logged on to the desktop' }
if (-not (Get-Process -Name explorer -ErrorAction SilentlyContinue)) { throw 'the desktop shell (explorer.exe) is not running' }
`}

	winIdentity = powershell.Script{Name: "guest-identity", Text: `param([string]$Hostname, [string]$MachineGuid)
if ($MachineGuid) {
  Set-ItemProperty -Path 'HKLM:\SOFTWARE\Microsoft\Cryptography' -Name MachineGuid -Value $MachineGuid
}
$pending = (Get-ItemProperty -Path 'HKLM:\SYSTEM\CurrentControlSet\Control\ComputerName\ComputerName').ComputerName
if ($pending -ne $Hostname) {
  Rename-Computer -NewName $Hostname -Force -WarningAction SilentlyContinue | Out-Null
}
`}

	winSetClock = powershell.Script{Name: "guest-set-clock", Text: `param([long]$UnixMillis)
Set-Date -Date ([DateTimeOffset]::FromUnixTimeMilliseconds($UnixMillis).LocalDateTime) | Out-Null
`}

	winGlob = powershell.Script{Name: "guest-glob", Text: `param([string]$Pattern)
@(Get-ChildItem -Path $Pattern -File -Force -ErrorAction SilentlyContinue | ForEach-Object { [string]$_.FullName })
`}

	winProcess = powershell.Script{Name: "guest-process", Text: `param([string]$Name)
@(Get-Process -Name $Name -ErrorAction SilentlyContinue).Count
`}

	winListening = powershell.Script{Name: "guest-listening", Text: `param([int]$Port)
$client = New-Object System.Net.Sockets.TcpClient
try { $client.Connect('127.0.0.1', $Port); $true } catch { $false } finally { $client.Close() }
`}

	// SendKeys gives + ^ % ~ ( ) { } [ ] meanings of their own: each is
	// sent in braces, and line ends as {ENTER}.
	winTypeText = powershell.Script{Name: "guest-type-text", Text: `param([string]$Text)
Add-Type -AssemblyName System.Windows.Forms
$keys = [regex]::Replace($Text, '[+^%~(){}\[\]]', '{$0}')
$keys = $keys -replace "\r?\n", '{ENTER}'
[System.Windows.Forms.SendKeys]::SendWait($keys)
`}

	winCursor = powershell.Script{Name: "guest-cursor", Text: `param()
Add-Type -AssemblyName System.Windows.Forms
$p = [System.Windows.Forms.Cursor]::Position
[pscustomobject]@{ x = $p.X; y = $p.Y }
`}

	winClipboardGet = powershell.Script{Name: "guest-clipboard-get", Text: `param()
$t = Get-Clipboard -Raw -Format Text
if ($null -eq $t) { '' } else { [string]$t }
`}

	winClipboardSet = powershell.Script{Name: "guest-clipboard-set", Text: `param([string]$Text)
Set-Clipboard -Value $Text
`}

	// sessionScript runs a script in the logged-on user's session as a
	// one-shot scheduled task: PowerShell with the script's constant
	// command (checked to be base64), its standard streams redirected from
	// and to files in a folder only SYSTEM, administrators and that user
	// may use, started by a headless console host so that no window
	// appears on the desktop. A named mutex lets one run at a time.
	sessionScript = powershell.Script{Name: "guest-in-session", Text: `param([string]$Command, [string]$ArgsBase64, [int]$TimeoutSeconds)
if ($Command -notmatch '^[A-Za-z0-9+/=]+$') { throw 'the session command is not base64' }
$mutex = New-Object System.Threading.Mutex($false, 'Global\hvkube-session')
[void]$mutex.WaitOne()
try {
  $user = (Get-CimInstance -ClassName Win32_ComputerSystem).UserName
  if (-not $user) { throw 'no user is logged on to the desktop' }
  $dir = Join-Path $env:ProgramData 'hvkube\session'
  if ($dir.Contains('"')) { throw "unexpected session folder $dir" }
  New-Item -ItemType Directory -Force -Path $dir | Out-Null
  $acl = New-Object System.Security.AccessControl.DirectorySecurity
  $acl.SetAccessRuleProtection($true, $false)
  foreach ($who in @('NT AUTHORITY\SYSTEM', 'BUILTIN\Administrators', $user)) {
    $rule = New-Object System.Security.AccessControl.FileSystemAccessRule($who, 'FullControl', 'ContainerInherit,ObjectInherit', 'None', 'Allow')
    $acl.AddAccessRule($rule)
  }
  Set-Acl -LiteralPath $dir -AclObject $acl
  Get-ChildItem -LiteralPath $dir | Remove-Item -Force
  $in = Join-Path $dir 'in'
  $out = Join-Path $dir 'out'
  $err = Join-Path $dir 'err'
  $done = Join-Path $dir 'done'
  [System.IO.File]::WriteAllText($in, $ArgsBase64)
  $line = '--headless cmd.exe /d /c powershell.exe -NoProfile -NonInteractive -NoLogo -ExecutionPolicy Bypass -EncodedCommand ' + $Command + ' <"' + $in + '" >"' + $out + '" 2>"' + $err + '" & type nul >"' + $done + '"'
  $action = New-ScheduledTaskAction -Execute 'conhost.exe' -Argument $line
  $principal = New-ScheduledTaskPrincipal -UserId $user -LogonType Interactive -RunLevel Highest
  $settings = New-ScheduledTaskSettingsSet -AllowStartIfOnBatteries -DontStopIfGoingOnBatteries -ExecutionTimeLimit (New-TimeSpan -Seconds $TimeoutSeconds)
  Register-ScheduledTask -TaskName 'hvkube-session' -Action $action -Principal $principal -Settings $settings -Force | Out-Null
  try {
    Start-ScheduledTask -TaskName 'hvkube-session'
    $deadline = (Get-Date).AddSeconds($TimeoutSeconds)
    while (-not (Test-Path -LiteralPath $done)) {
      if ((Get-Date) -gt $deadline) { throw "the script in the user's session did not finish in $TimeoutSeconds s" }
      Start-Sleep -Milliseconds 50
    }
  } finally {
    Unregister-ScheduledTask -TaskName 'hvkube-session' -Confirm:$false -ErrorAction SilentlyContinue
  }
  $result = [pscustomobject]@{ out = ''; err = '' }
  if (Test-Path -LiteralPath $out) { $result.out = [System.IO.File]::ReadAllText($out) }
  if (Test-Path -LiteralPath $err) { $result.err = [System.IO.File]::ReadAllText($err) }
  Get-ChildItem -LiteralPath $dir | Remove-Item -Force
  $result
} finally {
  $mutex.ReleaseMutex()
}
`}
)

// Probes implements OS.
func (WindowsOS) Probes() Probes { return windowsProbes{} }

type windowsProbes struct{}

// program is a probe: a script run with powershell.exe, whose output is
// JSON (see Text).
func program(s powershell.Script, args powershell.Args) backend.ExecRequest {
	argv, stdin, err := powershell.Command(s, args)
	if err != nil {
		panic(err) // the probes' scripts are constants
	}
	return backend.ExecRequest{Path: "powershell.exe", Args: argv, Stdin: stdin}
}

var (
	probeRead = powershell.Script{Name: "probe-read", Text: `param([string]$Path)
[System.IO.File]::ReadAllText($Path)
`}
	probeTouch = powershell.Script{Name: "probe-touch", Text: `param([string]$Path)
New-Item -ItemType File -Force -Path $Path | Out-Null
`}
	probeExists = powershell.Script{Name: "probe-exists", Text: `param([string]$Path)
if (-not (Test-Path -LiteralPath $Path)) { throw "$Path does not exist" }
`}
	probeSync = powershell.Script{Name: "probe-sync", Text: `param()
Write-VolumeCache -DriveLetter C
`}
	// The computer name the guest takes at its next start (see Identity).
	probeHostname = powershell.Script{Name: "probe-hostname", Text: `param()
[string](Get-ItemProperty -Path 'HKLM:\SYSTEM\CurrentControlSet\Control\ComputerName\ComputerName').ComputerName
`}
	probeIDs = powershell.Script{Name: "probe-ids", Text: `param()
[string](Get-ItemProperty -Path 'HKLM:\SOFTWARE\Microsoft\Cryptography').MachineGuid
`}
)

// Text reads a probe's output: a JSON string (the wrapper's), or nothing.
func (windowsProbes) Text(stdout []byte) string {
	var s string
	if err := powershell.Decode(stdout, &s); err != nil {
		return string(stdout)
	}
	return s
}

func (windowsProbes) TempPath(name string) string { return `C:\Users\Public\` + name }
func (windowsProbes) HomePath(name string) string { return `C:\Users\Public\Documents\` + name }

// TypedWrite quotes text for PowerShell (the terminal a Windows image
// opens at logon) and writes it as UTF-8 with a line feed, as on Linux.
func (windowsProbes) TypedWrite(text, p string) string {
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	return "[IO.File]::WriteAllText(" + q(p) + ", " + q(text) + " + [char]10)"
}
func (windowsProbes) ReadFile(p string) backend.ExecRequest {
	return program(probeRead, powershell.Args{"Path": p})
}
func (windowsProbes) Touch(p string) backend.ExecRequest {
	return program(probeTouch, powershell.Args{"Path": p})
}
func (windowsProbes) Exists(p string) backend.ExecRequest {
	return program(probeExists, powershell.Args{"Path": p})
}
func (windowsProbes) Sync() backend.ExecRequest     { return program(probeSync, nil) }
func (windowsProbes) Hostname() backend.ExecRequest { return program(probeHostname, nil) }
func (windowsProbes) IDs() backend.ExecRequest      { return program(probeIDs, nil) }

param([bool]$Shell, [string[]]$Program, [string[]]$Arguments, [int]$TimeoutSeconds)
Add-Type -Namespace H -Name K -MemberDefinition '[DllImport("kernel32")] public static extern IntPtr GetStdHandle(int n); [DllImport("kernel32")] public static extern bool SetHandleInformation(IntPtr h, int m, int f);'
foreach ($n in -10, -11, -12) { [void][H.K]::SetHandleInformation([H.K]::GetStdHandle($n), 1, 0) }
$i = New-Object Diagnostics.ProcessStartInfo
if ($Shell) { $i.FileName = $env:ComSpec } else { $i.FileName = $Program -join $env:USERPROFILE }
$i.Arguments = $Arguments -join $env:USERPROFILE
$i.UseShellExecute = $false
$i.RedirectStandardInput = $true
$i.RedirectStandardOutput = $true
$i.RedirectStandardError = $true
$i.StandardOutputEncoding = [Text.Encoding]::Default
$i.StandardErrorEncoding = [Text.Encoding]::Default
try { $p = [Diagnostics.Process]::Start($i) } catch { $e = $_.Exception.GetBaseException(); throw ('[WinError {0}] {1}' -f $e.NativeErrorCode, $e.Message) }
$p.StandardInput.Close()
$out = $p.StandardOutput.ReadToEndAsync()
$err = $p.StandardError.ReadToEndAsync()
if (-not $p.WaitForExit($TimeoutSeconds * 1000)) { $p.Kill(); Write-Error -Category OperationTimeout -Message 'the command timed out' }
[pscustomobject]@{ returncode = $p.ExitCode; output = $out.Result; error = $err.Result }

param([string]$Path)
$vars = @{}
foreach ($e in [Environment]::GetEnvironmentVariables().GetEnumerator()) { $vars[[string]$e.Key] = [string]$e.Value }
$vars['HVKUBE_OPEN_PATH'] = $Path
$block = [string[]]@($vars.GetEnumerator() | ForEach-Object { $_.Key + '=' + $_.Value })
$s = New-CimInstance -CimClass (Get-CimClass -ClassName Win32_ProcessStartup) -ClientOnly -Property @{ ShowWindow = [uint16]0; EnvironmentVariables = $block }
$r = Invoke-CimMethod -ClassName Win32_Process -MethodName Create -Arguments @{ CommandLine = 'powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -Command "[void][Diagnostics.Process]::Start($env:HVKUBE_OPEN_PATH)"'; ProcessStartupInformation = $s }
if ($r.ReturnValue -ne 0) { throw ('Win32_Process.Create returned ' + $r.ReturnValue) }

param([string]$Command, [string]$ArgsBase64, [int]$TimeoutSeconds)
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

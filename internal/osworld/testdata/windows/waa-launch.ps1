param([string[]]$Line)
$s = New-CimInstance -CimClass (Get-CimClass -ClassName Win32_ProcessStartup) -ClientOnly -Property @{ ShowWindow = [uint16]0 }
$command = '"' + $env:ComSpec + '" /c "' + ($Line -join $env:USERPROFILE) + '"'
$r = Invoke-CimMethod -ClassName Win32_Process -MethodName Create -Arguments @{ CommandLine = $command; CurrentDirectory = $env:USERPROFILE; ProcessStartupInformation = $s }
if ($r.ReturnValue -ne 0) { throw ('Win32_Process.Create returned ' + $r.ReturnValue) }
$env:USERPROFILE

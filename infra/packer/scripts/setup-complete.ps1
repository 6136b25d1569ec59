# Runs once in each sandbox's first boot from the hvkube image, as SYSTEM,
# when Windows Setup has finished and before the desktop user is logged on
# (SetupComplete.cmd calls it; its output is in hvkube-setup-complete.log
# beside it).
$ErrorActionPreference = 'Continue'
$ProgressPreference = 'SilentlyContinue'

# The automatic logon lasts: Windows would otherwise count it down.
$winlogon = 'HKLM:\SOFTWARE\Microsoft\Windows NT\CurrentVersion\Winlogon'
Remove-ItemProperty -Path $winlogon -Name AutoLogonCount -ErrorAction SilentlyContinue
Set-ItemProperty -Path $winlogon -Name AutoAdminLogon -Value '1'

# The answer files carry the desktop user's password (hidden, not
# encrypted): remove the copies Windows keeps in this sandbox.
$copies = @(
    (Join-Path $env:SystemRoot 'Temp\hvkube-sysprep.xml'),
    (Join-Path $env:SystemRoot 'Panther\unattend.xml'),
    (Join-Path $env:SystemRoot 'Panther\Unattend\unattend.xml'),
    (Join-Path $env:SystemRoot 'System32\Sysprep\unattend.xml')
)
foreach ($copy in $copies) {
    if (Test-Path -LiteralPath $copy) {
        Remove-Item -LiteralPath $copy -Force
        Write-Output "removed $copy"
    }
}

# No sleep, hibernation or display timeout, whatever generalising reset.
foreach ($setting in 'monitor-timeout-ac', 'standby-timeout-ac', 'hibernate-timeout-ac', 'disk-timeout-ac') {
    & powercfg.exe /change $setting 0
}
& powercfg.exe /hibernate off
& powercfg.exe /setacvalueindex SCHEME_CURRENT SUB_NONE CONSOLELOCK 0
& powercfg.exe /setactive SCHEME_CURRENT

# Close what the image build opened: WinRM over HTTP with Basic
# authentication. hvkube reaches the guest through PowerShell Direct, which
# needs neither the network nor WinRM.
Disable-NetFirewallRule -Name hvkube-build-winrm -ErrorAction SilentlyContinue
Remove-NetFirewallRule -Name hvkube-build-winrm -ErrorAction SilentlyContinue
Disable-NetFirewallRule -Name 'WINRM-HTTP-In-TCP', 'WINRM-HTTP-In-TCP-PUBLIC' -ErrorAction SilentlyContinue
try {
    Start-Service -Name WinRM -ErrorAction Stop
    Set-Item -Path WSMan:\localhost\Service\Auth\Basic -Value $false
    Set-Item -Path WSMan:\localhost\Service\AllowUnencrypted -Value $false
    Write-Output 'WinRM: Basic authentication and unencrypted traffic off'
} catch {
    Write-Output "WinRM: $_"
}

Write-Output "setup complete: $(Get-Date -Format o)"

# Opens WinRM over HTTP for the image build, at the desktop user's first
# logon during the install (the answer file runs it from the answer CD).
# Basic authentication without TLS is for the build network only: each
# sandbox's first boot closes it again (setup-complete.ps1).
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

# WinRM listens only on networks that are not Public.
Get-NetConnectionProfile |
    Where-Object { $_.NetworkCategory -eq 'Public' } |
    Set-NetConnectionProfile -NetworkCategory Private

# Stop Microsoft Store app updates before they start: an app updated for one
# user but not for all makes sysprep fail at the end of the build.
$store = 'HKLM:\SOFTWARE\Policies\Microsoft\WindowsStore'
New-Item -Path $store -Force | Out-Null
New-ItemProperty -Path $store -Name AutoDownload -PropertyType DWord -Value 2 -Force | Out-Null

# A local administrator gets a full token over the network (WinRM now,
# PowerShell Direct later) instead of a filtered one.
$system = 'HKLM:\SOFTWARE\Microsoft\Windows\CurrentVersion\Policies\System'
New-ItemProperty -Path $system -Name LocalAccountTokenFilterPolicy -PropertyType DWord -Value 1 -Force | Out-Null

Enable-PSRemoting -Force -SkipNetworkProfileCheck | Out-Null
Set-Item -Path WSMan:\localhost\Service\AllowUnencrypted -Value $true
Set-Item -Path WSMan:\localhost\Service\Auth\Basic -Value $true
Set-Item -Path WSMan:\localhost\MaxTimeoutms -Value 1800000

if (-not (Get-NetFirewallRule -Name hvkube-build-winrm -ErrorAction SilentlyContinue)) {
    New-NetFirewallRule -Name hvkube-build-winrm -DisplayName 'WinRM for the hvkube image build' `
        -Direction Inbound -Protocol TCP -LocalPort 5985 -Action Allow -Profile Any | Out-Null
}
Set-Service -Name WinRM -StartupType Automatic
Restart-Service -Name WinRM

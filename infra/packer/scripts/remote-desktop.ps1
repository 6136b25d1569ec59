# Remote Desktop on (HVKUBE_ENABLE_RDP=true) or off, with Network Level
# Authentication. hvkube does not use it: screen and input go through
# Hyper-V. It is there for a person who wants to look into a sandbox over
# the network; note that an RDP session of the desktop user takes the
# desktop off the VM's console, which is the screen hvkube sees (see
# docs/windows.md, troubleshooting).
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

$enable = $env:HVKUBE_ENABLE_RDP -eq 'true'
$ts = 'HKLM:\SYSTEM\CurrentControlSet\Control\Terminal Server'
# "@FirewallAPI.dll,-28752" is the Remote Desktop rule group in any language.
$group = '@FirewallAPI.dll,-28752'

if ($enable) {
    Set-ItemProperty -Path $ts -Name fDenyTSConnections -Value 0 -Type DWord
    Set-ItemProperty -Path "$ts\WinStations\RDP-Tcp" -Name UserAuthentication -Value 1 -Type DWord
    Enable-NetFirewallRule -Group $group
    Write-Output 'Remote Desktop: on'
} else {
    Set-ItemProperty -Path $ts -Name fDenyTSConnections -Value 1 -Type DWord
    Disable-NetFirewallRule -Group $group
    Write-Output 'Remote Desktop: off'
}

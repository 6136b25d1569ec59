# What hvkube's Hyper-V backend needs inside the guest.
#
# The Hyper-V integration services are built into Windows 11: there is
# nothing to install, and Windows Update keeps them current. This checks
# that none is missing or disabled. PowerShell Direct needs no network and
# no WinRM: only the VM session service below, and an administrator's
# credentials (desktop-user.ps1).
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

$services = [ordered]@{
    vmicheartbeat      = 'Heartbeat: hvkube waits for it after a start or a resume'
    vmicvmsession      = 'PowerShell Direct: exec, file copies, clipboard'
    vmickvpexchange    = 'Data exchange: the IP addresses the host reports'
    vmicshutdown       = 'Guest shutdown'
    vmictimesync       = 'Time synchronisation'
    vmicguestinterface = 'Guest services: Copy-VMFile'
}
foreach ($name in $services.Keys) {
    $service = Get-Service -Name $name -ErrorAction SilentlyContinue
    if (-not $service) { throw "integration service $name ($($services[$name])) is missing" }
    # They start on demand (trigger start); only Disabled stops them.
    if ($service.StartType -eq 'Disabled') { Set-Service -Name $name -StartupType Manual }
    Write-Output "$name ($($services[$name])): $($service.StartType)"
}

# Scripts run through PowerShell Direct or typed into the terminal may be
# saved .ps1 files.
try {
    Set-ExecutionPolicy -ExecutionPolicy RemoteSigned -Scope LocalMachine -Force -ErrorAction Stop
} catch [System.Security.SecurityException] {
    # Set, but overridden in this session by Packer's -ExecutionPolicy Bypass.
}
if ((Get-ExecutionPolicy -Scope LocalMachine) -ne 'RemoteSigned') {
    throw "execution policy: LocalMachine is $(Get-ExecutionPolicy -Scope LocalMachine)"
}

# Keep UAC, but without prompts: a consent prompt sits on the secure desktop,
# where neither an agent nor hvkube's input can answer it.
$system = 'HKLM:\SOFTWARE\Microsoft\Windows\CurrentVersion\Policies\System'
New-ItemProperty -Path $system -Name ConsentPromptBehaviorAdmin -PropertyType DWord -Value 0 -Force | Out-Null
New-ItemProperty -Path $system -Name PromptOnSecureDesktop -PropertyType DWord -Value 0 -Force | Out-Null
New-ItemProperty -Path $system -Name LocalAccountTokenFilterPolicy -PropertyType DWord -Value 1 -Force | Out-Null

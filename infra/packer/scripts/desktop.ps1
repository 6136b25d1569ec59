# The desktop as hvkube wants to find it after every logon: a maximised
# PowerShell window with the focus, and nothing that locks, blanks, sleeps
# or pops up over it.
#
# hvkube's conformance suite, like many agents, clicks the middle of the
# screen and types into the terminal it finds there. Per-user settings go to
# the desktop user's own registry (this script runs as that user); the rest
# are machine policies.
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

function Set-Value {
    param(
        [Parameter(Mandatory)][string]$Path,
        [Parameter(Mandatory)][string]$Name,
        [Parameter(Mandatory)]$Value,
        [ValidateSet('DWord', 'String')][string]$Type = 'DWord'
    )
    if (-not (Test-Path -LiteralPath $Path)) { New-Item -Path $Path -Force | Out-Null }
    New-ItemProperty -LiteralPath $Path -Name $Name -PropertyType $Type -Value $Value -Force | Out-Null
}

# --- The terminal at logon -------------------------------------------------

# A shortcut in the common Startup folder, maximised (WindowStyle 3).
$startup = [Environment]::GetFolderPath('CommonStartup')
$shell = New-Object -ComObject WScript.Shell
$link = $shell.CreateShortcut((Join-Path $startup 'hvkube terminal.lnk'))
$link.TargetPath = Join-Path $env:SystemRoot 'System32\WindowsPowerShell\v1.0\powershell.exe'
$link.Arguments = '-NoExit -NoLogo -Command "Set-Location -LiteralPath $HOME"'
$link.WindowStyle = 3
$link.Description = 'The terminal hvkube expects at the centre of the desktop'
$link.Save()

# The classic console host, not Windows Terminal: it opens the window as the
# shortcut says (maximised) and behaves the same on every Windows 11 build.
$conhost = '{B23D10C0-E52E-411E-9D5B-C09FDF709C7D}'
Set-Value -Path 'HKCU:\Console\%%Startup' -Name DelegationConsole -Value $conhost -Type String
Set-Value -Path 'HKCU:\Console\%%Startup' -Name DelegationTerminal -Value $conhost -Type String

# Start it at once after logon, not after Explorer's startup delay.
$serialize = 'HKCU:\Software\Microsoft\Windows\CurrentVersion\Explorer\Serialize'
Set-Value -Path $serialize -Name StartupDelayInMSec -Value 0
Set-Value -Path $serialize -Name WaitForIdleState -Value 0

# --- No screen lock, screen saver or sleep ---------------------------------

$desktop = 'HKCU:\Control Panel\Desktop'
Set-Value -Path $desktop -Name ScreenSaveActive -Value '0' -Type String
Set-Value -Path $desktop -Name ScreenSaverIsSecure -Value '0' -Type String
Set-Value -Path $desktop -Name ScreenSaveTimeOut -Value '0' -Type String
Remove-ItemProperty -LiteralPath $desktop -Name 'SCRNSAVE.EXE' -ErrorAction SilentlyContinue
Set-Value -Path 'HKCU:\Software\Policies\Microsoft\Windows\Control Panel\Desktop' -Name ScreenSaveActive -Value '0' -Type String

# Neither the lock screen nor Win+L: a locked desktop needs the password
# typed before anything else works.
Set-Value -Path 'HKLM:\SOFTWARE\Policies\Microsoft\Windows\Personalization' -Name NoLockScreen -Value 1
Set-Value -Path 'HKCU:\Software\Microsoft\Windows\CurrentVersion\Policies\System' -Name DisableLockWorkstation -Value 1
Set-Value -Path 'HKLM:\SOFTWARE\Microsoft\Windows\CurrentVersion\Policies\System' -Name InactivityTimeoutSecs -Value 0

# No password on wake-up (0e796bdb-...: "Require a password when a computer
# wakes").
$wake = 'HKLM:\SOFTWARE\Policies\Microsoft\Power\PowerSettings\0e796bdb-100d-47d6-a2d5-f7d2daa51f51'
Set-Value -Path $wake -Name ACSettingIndex -Value 0
Set-Value -Path $wake -Name DCSettingIndex -Value 0

# The display never turns off and the VM never sleeps or hibernates. Each
# sandbox's first boot sets these again (setup-complete.ps1), in case
# generalising reset them.
foreach ($setting in 'monitor-timeout-ac', 'monitor-timeout-dc', 'standby-timeout-ac', 'standby-timeout-dc', 'hibernate-timeout-ac', 'hibernate-timeout-dc', 'disk-timeout-ac', 'disk-timeout-dc') {
    & powercfg.exe /change $setting 0
    if ($LASTEXITCODE -ne 0) { throw "powercfg /change $setting 0 exited $LASTEXITCODE" }
}
& powercfg.exe /hibernate off
& powercfg.exe /setacvalueindex SCHEME_CURRENT SUB_NONE CONSOLELOCK 0
& powercfg.exe /setdcvalueindex SCHEME_CURRENT SUB_NONE CONSOLELOCK 0
& powercfg.exe /setactive SCHEME_CURRENT

# --- No first-run screens, animations or pop-ups ---------------------------

# "Hi" / "We're getting things ready" at a first logon.
Set-Value -Path 'HKLM:\SOFTWARE\Microsoft\Windows\CurrentVersion\Policies\System' -Name EnableFirstLogonAnimation -Value 0
Set-Value -Path 'HKLM:\SOFTWARE\Microsoft\Windows NT\CurrentVersion\Winlogon' -Name EnableFirstLogonAnimation -Value 0
# The privacy settings screen after a first logon.
Set-Value -Path 'HKLM:\SOFTWARE\Policies\Microsoft\Windows\OOBE' -Name DisablePrivacyExperience -Value 1
# "Let's finish setting up your device", tips, suggestions, the welcome
# experience.
Set-Value -Path 'HKLM:\SOFTWARE\Policies\Microsoft\Windows\CloudContent' -Name DisableWindowsConsumerFeatures -Value 1
Set-Value -Path 'HKLM:\SOFTWARE\Policies\Microsoft\Windows\CloudContent' -Name DisableSoftLanding -Value 1
Set-Value -Path 'HKCU:\Software\Microsoft\Windows\CurrentVersion\UserProfileEngagement' -Name ScoobeSystemSettingEnabled -Value 0
$cdm = 'HKCU:\Software\Microsoft\Windows\CurrentVersion\ContentDeliveryManager'
foreach ($name in 'SubscribedContent-310093Enabled', 'SubscribedContent-338389Enabled', 'SubscribedContent-338393Enabled', 'SystemPaneSuggestionsEnabled', 'SoftLandingEnabled') {
    Set-Value -Path $cdm -Name $name -Value 0
}
# Notifications would cover part of the screen an agent is looking at.
Set-Value -Path 'HKCU:\Software\Microsoft\Windows\CurrentVersion\PushNotifications' -Name ToastEnabled -Value 0
# OneDrive's and Teams' sign-in windows would take the focus at logon.
Set-Value -Path 'HKLM:\SOFTWARE\Policies\Microsoft\Windows\OneDrive' -Name DisableFileSyncNGSC -Value 1
Set-Value -Path 'HKLM:\SOFTWARE\Policies\Microsoft\Windows\Windows Chat' -Name ChatIcon -Value 3
# Edge's first-run pages.
Set-Value -Path 'HKLM:\SOFTWARE\Policies\Microsoft\Edge' -Name HideFirstRunExperience -Value 1
# Window animations: a screenshot right after an action shows the result,
# not a frame of the animation.
Set-Value -Path "$desktop\WindowMetrics" -Name MinAnimate -Value '0' -Type String
Set-Value -Path 'HKCU:\Software\Microsoft\Windows\CurrentVersion\Explorer\Advanced' -Name TaskbarAnimations -Value 0

Write-Output 'desktop: maximised PowerShell at logon; no lock, screen saver, sleep, first-run screens or notifications'

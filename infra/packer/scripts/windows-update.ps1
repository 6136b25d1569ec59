# Windows Update paused in the image. A sandbox is reset to its clean state
# after every task, so updates installed in it would be thrown away, and an
# update that restarts the guest in the middle of a task ends the task. Keep
# the image current by building it again from current media instead.
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

# No automatic updates and no restarts while someone is logged on.
$au = 'HKLM:\SOFTWARE\Policies\Microsoft\Windows\WindowsUpdate\AU'
Set-Value -Path $au -Name NoAutoUpdate -Value 1
Set-Value -Path $au -Name NoAutoRebootWithLoggedOnUsers -Value 1

# Paused as the Settings app pauses it, for the longest time it allows
# (35 days), so the Settings page says so too.
$now = (Get-Date).ToUniversalTime()
$format = "yyyy-MM-dd'T'HH':'mm':'ss'Z'"
$invariant = [Globalization.CultureInfo]::InvariantCulture
$start = $now.ToString($format, $invariant)
$end = $now.AddDays(35).ToString($format, $invariant)
$ux = 'HKLM:\SOFTWARE\Microsoft\WindowsUpdate\UX\Settings'
Set-Value -Path $ux -Name PauseUpdatesStartTime -Value $start -Type String
Set-Value -Path $ux -Name PauseUpdatesExpiryTime -Value $end -Type String
Set-Value -Path $ux -Name PauseFeatureUpdatesStartTime -Value $start -Type String
Set-Value -Path $ux -Name PauseFeatureUpdatesEndTime -Value $end -Type String
Set-Value -Path $ux -Name PauseQualityUpdatesStartTime -Value $start -Type String
Set-Value -Path $ux -Name PauseQualityUpdatesEndTime -Value $end -Type String

# No Microsoft Store app updates either (also set at the first logon: see
# enable-winrm.ps1).
Set-Value -Path 'HKLM:\SOFTWARE\Policies\Microsoft\WindowsStore' -Name AutoDownload -Value 2

Write-Output "Windows Update: automatic updates off, paused until $end"

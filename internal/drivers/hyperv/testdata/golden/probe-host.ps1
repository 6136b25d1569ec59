param([string]$Switch)
$hostInfo = Get-VMHost
$sw = @(Get-VMSwitch | Where-Object { $_.Name -eq $Switch })
[pscustomobject]@{
  ComputerName = [string]$hostInfo.ComputerName
  SwitchFound  = ($sw.Count -gt 0)
}

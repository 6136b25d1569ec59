param([string]$Hostname, [string]$MachineGuid)
if ($MachineGuid) {
  Set-ItemProperty -Path 'HKLM:\SOFTWARE\Microsoft\Cryptography' -Name MachineGuid -Value $MachineGuid
}
$pending = (Get-ItemProperty -Path 'HKLM:\SYSTEM\CurrentControlSet\Control\ComputerName\ComputerName').ComputerName
if ($pending -ne $Hostname) {
  Rename-Computer -NewName $Hostname -Force -WarningAction SilentlyContinue | Out-Null
}

param()
$os = Get-CimInstance -ClassName Win32_OperatingSystem
$vms = @(Get-VM | Where-Object { $_.Name -like 'hvkube-*' } | ForEach-Object {
  [pscustomobject]@{ Name = $_.Name; State = [string]$_.State; MemoryStartup = [int64]$_.MemoryStartup }
})
[pscustomobject]@{
  TotalKB = [int64]$os.TotalVisibleMemorySize
  FreeKB  = [int64]$os.FreePhysicalMemory
  VMs     = $vms
}

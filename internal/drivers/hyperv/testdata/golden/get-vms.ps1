param([string]$Name)
if ($Name) {
  $vms = @(Get-VM -Name $Name -ErrorAction SilentlyContinue | Where-Object { $_.Name -eq $Name })
} else {
  $vms = @(Get-VM | Where-Object { $_.Name -like 'hvkube-*' })
}
if ($vms.Count -eq 0) { return }
$workers = @(Get-CimInstance -ClassName Win32_Process -Filter "Name = 'vmwp.exe'")
foreach ($vm in $vms) {
  $id = [string]$vm.Id
  $worker = $workers | Where-Object { $_.CommandLine -and $_.CommandLine.IndexOf($id, [System.StringComparison]::OrdinalIgnoreCase) -ge 0 } | Select-Object -First 1
  $workerPid = 0
  if ($worker) { $workerPid = [int]$worker.ProcessId }
  [pscustomobject]@{
    Name           = [string]$vm.Name
    Id             = $id
    State          = [string]$vm.State
    Notes          = [string]$vm.Notes
    MemoryStartup  = [int64]$vm.MemoryStartup
    ProcessorCount = [int]$vm.ProcessorCount
    CreationTime   = $vm.CreationTime.ToUniversalTime().ToString('o')
    Path           = [string]$vm.Path
    WorkerPid      = $workerPid
  }
}

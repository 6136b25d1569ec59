param()
$cmd = Get-Command -Name Get-VMHostPartitionableGpu -ErrorAction SilentlyContinue
if (-not $cmd) { $cmd = Get-Command -Name Get-VMPartitionableGpu -ErrorAction SilentlyContinue }
if (-not $cmd) {
  [pscustomobject]@{ Supported = $false; Names = [string[]]@() }
  return
}
$gpus = @(& $cmd)
[pscustomobject]@{ Supported = $true; Names = [string[]]@($gpus | ForEach-Object { [string]$_.Name }) }

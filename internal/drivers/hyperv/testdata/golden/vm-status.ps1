param([string]$Name)
$vm = @(Get-VM -Name $Name -ErrorAction SilentlyContinue | Where-Object { $_.Name -eq $Name })[0]
if (-not $vm) { return }
$hb = Get-VMIntegrationService -VM $vm | Where-Object { ([string]$_.Id).EndsWith('\84EAAE65-2F2E-45F5-9BB5-0E857DC8EB47', [System.StringComparison]::OrdinalIgnoreCase) } | Select-Object -First 1
$ips = @(Get-VMNetworkAdapter -VM $vm | ForEach-Object { $_.IPAddresses } | Where-Object { $_ })
$status = [pscustomobject]@{
  Name        = [string]$vm.Name
  State       = [string]$vm.State
  Heartbeat   = ''
  HeartbeatOK = $false
  IPAddresses = [string[]]$ips
}
if ($hb) {
  $status.Heartbeat = [string]$hb.PrimaryStatusDescription
  $status.HeartbeatOK = ([bool]$hb.Enabled -and [int]$hb.PrimaryOperationalStatus -eq 2)
}
$status

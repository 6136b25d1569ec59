param([string]$Name)
foreach ($vm in @(Get-VM -Name $Name -ErrorAction SilentlyContinue | Where-Object { $_.Name -eq $Name })) {
  $state = [string]$vm.State
  if ($state -eq 'Saved') { Remove-VMSavedState -VM $vm -Confirm:$false }
  elseif ($state -ne 'Off') { Stop-VM -VM $vm -TurnOff -Force }
  Remove-VM -VM $vm -Force
}

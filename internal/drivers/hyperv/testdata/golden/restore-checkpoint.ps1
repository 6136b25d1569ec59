param([string]$Name, [string]$Checkpoint)
$vm = @(Get-VM -Name $Name | Where-Object { $_.Name -eq $Name })[0]
$state = [string]$vm.State
if ($state -ne 'Off' -and $state -ne 'Saved') { Stop-VM -VM $vm -TurnOff -Force }
Restore-VMCheckpoint -VMName $Name -Name $Checkpoint -Confirm:$false

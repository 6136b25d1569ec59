param([string]$Name, [string]$Path, [string]$VHDPath, [string]$Switch, [int64]$MemoryBytes, [int64]$MinimumMemoryBytes, [int]$ProcessorCount, [string]$Notes, [int]$Width, [int]$Height)
$vm = New-VM -Name $Name -Generation 2 -MemoryStartupBytes $MemoryBytes -VHDPath $VHDPath -SwitchName $Switch -Path $Path
Set-VM -VM $vm -ProcessorCount $ProcessorCount -AutomaticStartAction Nothing -AutomaticStopAction Save -CheckpointType Standard -Notes $Notes
Set-VMMemory -VM $vm -DynamicMemoryEnabled $true -MinimumBytes $MinimumMemoryBytes -StartupBytes $MemoryBytes -MaximumBytes $MemoryBytes
Set-VMVideo -VM $vm -HorizontalResolution ([uint16]$Width) -VerticalResolution ([uint16]$Height) -ResolutionType Single
[pscustomobject]@{ Id = [string]$vm.Id }

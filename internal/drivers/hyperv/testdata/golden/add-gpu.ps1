param([string]$Name)
Add-VMGpuPartitionAdapter -VMName $Name
Set-VMGpuPartitionAdapter -VMName $Name -MinPartitionVRAM 80000000 -MaxPartitionVRAM 100000000 -OptimalPartitionVRAM 100000000
Set-VM -Name $Name -AutomaticStopAction TurnOff -CheckpointType Disabled -GuestControlledCacheTypes $true -LowMemoryMappedIoSpace 1GB -HighMemoryMappedIoSpace 32GB

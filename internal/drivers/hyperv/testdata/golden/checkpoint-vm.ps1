param([string]$Name, [string]$Checkpoint)
Checkpoint-VM -Name $Name -SnapshotName $Checkpoint

param([string]$Name)
Start-VM -Name $Name
Suspend-VM -Name $Name

param([string]$Name)
Suspend-VM -Name $Name

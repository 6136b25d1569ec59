param([string]$Name)
Save-VM -Name $Name

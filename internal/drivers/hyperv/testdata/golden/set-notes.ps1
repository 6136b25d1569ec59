param([string]$Name, [string]$Notes)
Set-VM -Name $Name -Notes $Notes

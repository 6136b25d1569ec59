param([string]$Name)
Resume-VM -Name $Name

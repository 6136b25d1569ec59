param([string]$Name)
Set-VM -Name $Name -EnhancedSessionTransportType HvSocket

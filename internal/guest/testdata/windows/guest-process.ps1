param([string]$Name)
@(Get-Process -Name $Name -ErrorAction SilentlyContinue).Count

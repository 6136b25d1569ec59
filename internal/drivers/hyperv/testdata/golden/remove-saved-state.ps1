param([string]$Name)
Remove-VMSavedState -VMName $Name -Confirm:$false

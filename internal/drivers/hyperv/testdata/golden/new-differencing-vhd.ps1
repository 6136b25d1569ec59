param([string]$Path, [string]$ParentPath)
$null = New-VHD -Path $Path -ParentPath $ParentPath -Differencing

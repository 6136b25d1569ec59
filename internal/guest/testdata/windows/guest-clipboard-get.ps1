param()
$t = Get-Clipboard -Raw -Format Text
if ($null -eq $t) { '' } else { [string]$t }

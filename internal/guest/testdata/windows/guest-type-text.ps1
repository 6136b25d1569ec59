param([string]$Text)
Add-Type -AssemblyName System.Windows.Forms
$keys = [regex]::Replace($Text, '[+^%~(){}\[\]]', '{$0}')
$keys = $keys -replace "\r?\n", '{ENTER}'
[System.Windows.Forms.SendKeys]::SendWait($keys)

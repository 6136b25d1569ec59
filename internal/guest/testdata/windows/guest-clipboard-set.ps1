param([string]$Text)
Set-Clipboard -Value $Text

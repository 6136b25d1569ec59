param([string]$Path)
New-Item -ItemType File -Force -Path $Path | Out-Null

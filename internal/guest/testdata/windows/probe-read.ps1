param([string]$Path)
[System.IO.File]::ReadAllText($Path)

param([string]$Path)
if (-not (Test-Path -LiteralPath $Path)) { throw "$Path does not exist" }

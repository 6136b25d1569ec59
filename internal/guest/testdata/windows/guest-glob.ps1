param([string]$Pattern)
@(Get-ChildItem -Path $Pattern -File -Force -ErrorAction SilentlyContinue | ForEach-Object { [string]$_.FullName })

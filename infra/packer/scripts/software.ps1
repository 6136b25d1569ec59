# Optional software from Chocolatey: the package ids in
# HVKUBE_CHOCOLATEY_PACKAGES (separated by spaces). Nothing is installed,
# and nothing downloaded, when it is empty.
#
# Chocolatey rather than winget: winget comes with the App Installer package,
# which is registered per user at the first interactive logon and is not
# reliably there in a remote (WinRM) session of a fresh install.
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

$packages = @(($env:HVKUBE_CHOCOLATEY_PACKAGES -split '\s+') | Where-Object { $_ })
if ($packages.Count -eq 0) {
    Write-Output 'software: no Chocolatey packages asked for'
    exit 0
}
foreach ($package in $packages) {
    if ($package -notmatch '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$') { throw "not a Chocolatey package id: $package" }
}

if (-not (Get-Command choco.exe -ErrorAction SilentlyContinue)) {
    [Net.ServicePointManager]::SecurityProtocol = [Net.ServicePointManager]::SecurityProtocol -bor [Net.SecurityProtocolType]::Tls12
    $installer = Join-Path $env:TEMP 'chocolatey-install.ps1'
    Invoke-WebRequest -UseBasicParsing -Uri $env:HVKUBE_CHOCOLATEY_INSTALL_URL -OutFile $installer
    & $installer
    Remove-Item -LiteralPath $installer -Force
    $env:Path = "$env:Path;$env:ProgramData\chocolatey\bin"
}

foreach ($package in $packages) {
    Write-Output "software: installing $package"
    & choco.exe install $package --yes --no-progress --limit-output
    # 1641 and 3010: installed, a restart is pending.
    if ($LASTEXITCODE -notin 0, 1641, 3010) { throw "choco install $package exited $LASTEXITCODE" }
}

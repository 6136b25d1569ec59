# The last step before sysprep generalises the image (windows11.pkr.hcl's
# shutdown_command): no BitLocker, no app that would make sysprep fail, no
# leftovers, free space trimmed so that the VHDX compacts.
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

# The system disk must not be encrypted: its key would be sealed to the
# build VM's virtual TPM, and no sandbox could boot it.
if (Get-Command Get-BitLockerVolume -ErrorAction SilentlyContinue) {
    $volume = Get-BitLockerVolume -MountPoint 'C:'
    if ($volume.VolumeStatus -ne 'FullyDecrypted') {
        Write-Output "BitLocker: C: is $($volume.VolumeStatus); decrypting"
        Disable-BitLocker -MountPoint 'C:' | Out-Null
        while ((Get-BitLockerVolume -MountPoint 'C:').VolumeStatus -ne 'FullyDecrypted') { Start-Sleep -Seconds 10 }
    }
    Write-Output 'BitLocker: C: is not encrypted'
}

# sysprep fails on an app installed (or updated) for a user but not
# provisioned for all users. Remove such apps; the provisioned ones stay.
$provisioned = @(Get-AppxProvisionedPackage -Online | ForEach-Object { $_.DisplayName })
Get-AppxPackage -AllUsers |
    Where-Object { -not $_.IsFramework -and -not $_.NonRemovable -and $_.SignatureKind -eq 'Store' -and $provisioned -notcontains $_.Name } |
    ForEach-Object {
        $package = $_.PackageFullName
        Write-Output "sysprep: removing $package, installed for a user only"
        try {
            Remove-AppxPackage -Package $package -AllUsers -ErrorAction Stop
        } catch {
            Write-Output "sysprep: could not remove ${package}: $_ (sysprep may fail; see C:\Windows\System32\Sysprep\Panther\setupact.log)"
        }
    }

# Leftovers of the build.
foreach ($dir in $env:TEMP, (Join-Path $env:SystemRoot 'Temp')) {
    Get-ChildItem -LiteralPath $dir -Force -ErrorAction SilentlyContinue |
        Where-Object { $_.Name -ne 'hvkube-sysprep.xml' } |
        Remove-Item -Recurse -Force -ErrorAction SilentlyContinue
}

# Tell the virtual disk which blocks are free, so that compacting the VHDX
# after the build gives them back.
try {
    Optimize-Volume -DriveLetter C -ReTrim -ErrorAction Stop
} catch {
    Write-Output "trim: $_ (the VHDX compacts less)"
}

Write-Output 'ready for sysprep'

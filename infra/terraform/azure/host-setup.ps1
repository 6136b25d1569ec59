# Prepares an Azure Windows Server 2022 VM as an hvkube Hyper-V host.
#
# Terraform hands this file to the VM as custom data (Azure writes it to
# C:\AzureData\CustomData.bin) and the Custom Script Extension runs it once,
# with -DriveLetter and -ApiPort. It downloads nothing. Two phases:
#
#   install  the data disk initialised as <DriveLetter>: with the folders
#            hvkube uses, a firewall rule for its API port, the Hyper-V role
#            with its management tools and the DHCP server role; then a
#            restart, after which a scheduled task runs the second phase.
#   network  a virtual switch "hvkube" for the sandboxes: internal, with NAT
#            to the outside and DHCP on 192.168.100.0/24 (Windows Server has
#            no "Default Switch"); then the task removes itself.
#
# Both phases can run again without harm. The log is
# C:\hvkube\setup\host-setup.log.
param(
    [ValidatePattern('^[D-Z]$')][string]$DriveLetter = 'D',
    [ValidateRange(1, 65535)][int]$ApiPort = 8080,
    [ValidateSet('install', 'network')][string]$Phase = 'install'
)

$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

$SetupDir = 'C:\hvkube\setup'
$TaskName = 'hvkube-host-network'
$SwitchName = 'hvkube'
$Gateway = '192.168.100.1'
$ScopeId = '192.168.100.0'
$PrefixLength = 24
$SubnetMask = '255.255.255.0'
$RangeStart = '192.168.100.100'
$RangeEnd = '192.168.100.250'
# Azure's DNS resolver; the sandboxes reach it through the host's NAT.
$DnsServer = '168.63.129.16'

function Initialize-DataDisk {
    $existing = Get-Volume -DriveLetter $DriveLetter -ErrorAction SilentlyContinue
    $raw = @(Get-Disk | Where-Object { $_.PartitionStyle -eq 'RAW' } | Sort-Object -Property Size -Descending)
    if ($raw.Count -eq 0) {
        if (-not $existing) { throw "no empty data disk found and no drive ${DriveLetter}: exists" }
        Write-Output "data disk: ${DriveLetter}: exists ($($existing.FileSystemLabel))"
        return
    }
    if ($existing) {
        # Sizes with a temporary disk (a 'd' in the name, and the v3 sizes)
        # give it D:.
        throw "drive ${DriveLetter}: is taken by '$($existing.FileSystemLabel)': set data_drive_letter to a free letter"
    }
    $disk = $raw[0]
    Initialize-Disk -Number $disk.Number -PartitionStyle GPT
    New-Partition -DiskNumber $disk.Number -UseMaximumSize -DriveLetter $DriveLetter |
        Format-Volume -FileSystem NTFS -NewFileSystemLabel hvkube -AllocationUnitSize 65536 -Confirm:$false |
        Out-Null
    Write-Output "data disk: disk $($disk.Number) is ${DriveLetter}:"
}

function Install-Host {
    Initialize-DataDisk

    # hvkube serve --hyperv-dir D:\hvkube --allow-host-path D:\templates;
    # C:\hvkube holds hvkube.exe, the guest credential file and the token.
    foreach ($dir in "${DriveLetter}:\hvkube", "${DriveLetter}:\templates", "${DriveLetter}:\Hyper-V", 'C:\hvkube') {
        New-Item -ItemType Directory -Force -Path $dir | Out-Null
    }

    if (-not (Get-NetFirewallRule -Name hvkube-api -ErrorAction SilentlyContinue)) {
        New-NetFirewallRule -Name hvkube-api -DisplayName "hvkube API (TCP $ApiPort)" -Direction Inbound `
            -Protocol TCP -LocalPort $ApiPort -Action Allow -Profile Any | Out-Null
    }

    $result = Install-WindowsFeature -Name 'Hyper-V', 'DHCP' -IncludeManagementTools
    if (-not $result.Success) { throw "Install-WindowsFeature Hyper-V, DHCP failed: $($result.ExitCode)" }
    Write-Output "features: Hyper-V and DHCP installed (restart needed: $($result.RestartNeeded))"

    # The second phase runs at the next start, as SYSTEM, from a copy of
    # this script outside C:\AzureData.
    $script = Join-Path $SetupDir 'host-setup.ps1'
    if ($PSCommandPath -ne $script) { Copy-Item -LiteralPath $PSCommandPath -Destination $script -Force }
    $action = New-ScheduledTaskAction -Execute 'powershell.exe' `
        -Argument "-NoProfile -ExecutionPolicy Bypass -File `"$script`" -Phase network -DriveLetter $DriveLetter -ApiPort $ApiPort"
    $trigger = New-ScheduledTaskTrigger -AtStartup
    Register-ScheduledTask -TaskName $TaskName -Action $action -Trigger $trigger `
        -User 'NT AUTHORITY\SYSTEM' -RunLevel Highest -Force | Out-Null

    # Restart in a minute, so that the extension reports success first.
    & shutdown.exe /r /t 60 /c 'hvkube host setup: restart for Hyper-V'
    Write-Output 'install phase done; restarting in 60 s'
}

function Set-HostNetwork {
    Import-Module Hyper-V
    if (-not (Get-VMSwitch -Name $SwitchName -ErrorAction SilentlyContinue)) {
        New-VMSwitch -Name $SwitchName -SwitchType Internal | Out-Null
    }
    $alias = "vEthernet ($SwitchName)"
    if (-not (Get-NetIPAddress -InterfaceAlias $alias -IPAddress $Gateway -ErrorAction SilentlyContinue)) {
        New-NetIPAddress -InterfaceAlias $alias -IPAddress $Gateway -PrefixLength $PrefixLength | Out-Null
    }
    if (-not (Get-NetNat -Name $SwitchName -ErrorAction SilentlyContinue)) {
        New-NetNat -Name $SwitchName -InternalIPInterfaceAddressPrefix "$ScopeId/$PrefixLength" | Out-Null
    }

    # DHCP for the sandboxes, on the switch only: the server binds to
    # interfaces with a static address, which the Azure NIC has not.
    Add-DhcpServerSecurityGroup -ErrorAction SilentlyContinue
    Restart-Service -Name DHCPServer
    if (-not (Get-DhcpServerv4Scope -ScopeId $ScopeId -ErrorAction SilentlyContinue)) {
        Add-DhcpServerv4Scope -Name $SwitchName -StartRange $RangeStart -EndRange $RangeEnd -SubnetMask $SubnetMask -State Active
    }
    Set-DhcpServerv4OptionValue -ScopeId $ScopeId -Router $Gateway -DnsServer $DnsServer -Force
    Set-DhcpServerv4Binding -InterfaceAlias $alias -BindingState $true
    # Server Manager would ask to "complete DHCP configuration" otherwise.
    Set-ItemProperty -Path 'HKLM:\SOFTWARE\Microsoft\ServerManager\Roles\12' -Name ConfigurationState -Value 2 -ErrorAction SilentlyContinue

    # VMs made by hand (not by hvkube) go to the data disk too.
    if (Get-Volume -DriveLetter $DriveLetter -ErrorAction SilentlyContinue | Where-Object { $_.DriveType -eq 'Fixed' }) {
        New-Item -ItemType Directory -Force -Path "${DriveLetter}:\Hyper-V" | Out-Null
        Set-VMHost -VirtualMachinePath "${DriveLetter}:\Hyper-V" -VirtualHardDiskPath "${DriveLetter}:\Hyper-V"
    }

    Unregister-ScheduledTask -TaskName $TaskName -Confirm:$false -ErrorAction SilentlyContinue
    Write-Output "network: switch $SwitchName, NAT and DHCP on $ScopeId/$PrefixLength"
}

New-Item -ItemType Directory -Force -Path $SetupDir | Out-Null
Start-Transcript -Append -Path (Join-Path $SetupDir 'host-setup.log') | Out-Null
try {
    Write-Output "hvkube host setup, phase $Phase, $(Get-Date -Format o)"
    switch ($Phase) {
        'install' { Install-Host }
        'network' { Set-HostNetwork }
    }
} finally {
    Stop-Transcript | Out-Null
}

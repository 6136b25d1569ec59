param([string]$VMName, [int]$Width, [int]$Height)

$ns = 'root\virtualization\v2'
$hvkubeReturnText = @{
  32768 = 'failed'; 32769 = 'access denied'; 32770 = 'not supported'; 32771 = 'status unknown'
  32772 = 'timeout'; 32773 = 'invalid parameter'; 32774 = 'system in use'
  32775 = 'invalid state for this operation'; 32776 = 'incorrect data type'
  32777 = 'system not available'; 32778 = 'out of memory'
}

# The host has an Msvm_ComputerSystem of its own, named after the host: VMs
# are named by a GUID. Hyper-V lets VMs share a display name, so a name that
# several VMs have is refused rather than guessed.
function Get-HvkubeVM {
  param([string]$Name)
  $found = @(Get-CimInstance -Namespace $ns -ClassName Msvm_ComputerSystem |
    Where-Object { $_.ElementName -eq $Name -and $_.Name -match '^[0-9A-Fa-f]{8}-([0-9A-Fa-f]{4}-){3}[0-9A-Fa-f]{12}$' })
  if ($found.Count -eq 0) {
    Write-Error -Message "no Hyper-V VM is named '$Name'" -Category ObjectNotFound -ErrorId HvkubeNotFound -ErrorAction Stop
  }
  if ($found.Count -gt 1) {
    throw "$($found.Count) Hyper-V VMs are named '$Name'"
  }
  $found[0]
}

# A VM's devices exist while it runs.
function Get-HvkubeDevice {
  param($VM, [string]$Class)
  $dev = @(Get-CimAssociatedInstance -InputObject $VM -ResultClassName $Class)
  if ($dev.Count -eq 0) {
    Write-Error -Message "VM '$($VM.ElementName)' has no $Class (is it running?)" -Category ResourceUnavailable -ErrorId HvkubeNoDevice -ErrorAction Stop
  }
  $dev[0]
}

# The screen is the video head that shows a resolution, the enabled one
# first (a generation 1 VM has an emulated and a synthetic head).
function Get-HvkubeScreen {
  param($VM)
  $heads = @(Get-CimAssociatedInstance -InputObject $VM -ResultClassName Msvm_VideoHead |
    Where-Object { [int]$_.CurrentHorizontalResolution -gt 0 -and [int]$_.CurrentVerticalResolution -gt 0 } |
    Sort-Object -Property @{ Expression = { [int]$_.EnabledState -ne 2 } })
  if ($heads.Count -eq 0) {
    Write-Error -Message "VM '$($VM.ElementName)' reports no screen resolution (is it running?)" -Category ResourceUnavailable -ErrorId HvkubeNoDisplay -ErrorAction Stop
  }
  @{ Width = [int]$heads[0].CurrentHorizontalResolution; Height = [int]$heads[0].CurrentVerticalResolution }
}

function Invoke-HvkubeMethod {
  param($Instance, [string]$Method, [hashtable]$Arguments)
  $name = $Instance.CimClass.CimClassName + '.' + $Method
  $res = Invoke-CimMethod -InputObject $Instance -MethodName $Method -Arguments $Arguments
  $rv = [int]$res.ReturnValue
  if ($rv -eq 4096) {
    $job = $res.Job
    while (@(7, 8, 9, 10) -notcontains [int]$job.JobState) {
      Start-Sleep -Milliseconds 50
      $job = Get-CimInstance -InputObject $job
    }
    if ([int]$job.JobState -ne 7 -or [int]$job.ErrorCode -ne 0) {
      throw "$name failed: its job ended in state $($job.JobState) with error $($job.ErrorCode): $($job.ErrorDescription)"
    }
  } elseif ($rv -eq 1 -and $Method -eq 'TypeText') {
    Write-Error -Message "$name returned 1: the text holds characters the VM's keyboard cannot type" -Category InvalidArgument -ErrorId HvkubeUntypable -ErrorAction Stop
  } elseif ($rv -ne 0) {
    $meaning = ''
    if ($hvkubeReturnText.ContainsKey($rv)) { $meaning = ' (' + $hvkubeReturnText[$rv] + ')' }
    throw "$name returned $rv$meaning"
  }
  $res
}

$vm = Get-HvkubeVM $VMName
if ($Width -le 0 -or $Height -le 0) {
  $screen = Get-HvkubeScreen $vm
  if ($Width -le 0 -and $Height -le 0) {
    $Width = $screen.Width
    $Height = $screen.Height
  } elseif ($Width -le 0) {
    $Width = [Math]::Max(1, [int][Math]::Round([double]$screen.Width * $Height / $screen.Height, [MidpointRounding]::AwayFromZero))
  } else {
    $Height = [Math]::Max(1, [int][Math]::Round([double]$screen.Height * $Width / $screen.Width, [MidpointRounding]::AwayFromZero))
  }
}
$settings = @(Get-CimAssociatedInstance -InputObject $vm -Association Msvm_SettingsDefineState -ResultClassName Msvm_VirtualSystemSettingData |
  Where-Object { $_.VirtualSystemType -eq 'Microsoft:Hyper-V:System:Realized' })
if ($settings.Count -eq 0) {
  throw "VM '$VMName' has no realized system settings"
}
$service = Get-CimInstance -Namespace $ns -ClassName Msvm_VirtualSystemManagementService
$res = Invoke-HvkubeMethod $service 'GetVirtualSystemThumbnailImage' @{ TargetSystem = $settings[0]; WidthPixels = [uint16]$Width; HeightPixels = [uint16]$Height }
$data = [byte[]]$res.ImageData
if ($null -eq $data -or $data.Length -eq 0) {
  throw "Msvm_VirtualSystemManagementService.GetVirtualSystemThumbnailImage returned no image data"
}
[pscustomobject]@{ Width = $Width; Height = $Height; Data = [Convert]::ToBase64String($data) }

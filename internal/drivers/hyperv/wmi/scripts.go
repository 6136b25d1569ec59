package wmi

import "github.com/hvkube/hvkube/internal/powershell"

// The scripts are constants: every value reaches them as a parameter.
// Each begins with its param() block followed by common, the helpers they
// share.

// common finds a VM and its devices and calls their methods, checking what
// each returns: 0 is done, 4096 a job that is waited for, anything else a
// failure named by class, method and code.
const common = `
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
`

// screenshotScript returns the VM's screen as {Width, Height, Data}: Data is
// the thumbnail's RGB565 pixels in base64. Width and Height 0 take the
// screen's resolution; one of them 0 follows the screen's aspect ratio,
// rounded as display.Encoder rounds it.
var screenshotScript = powershell.Script{Name: "vm-screenshot", Text: `param([string]$VMName, [int]$Width, [int]$Height)
` + common + `
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
`}

// screenSizeScript returns the VM's screen resolution as {Width, Height}.
var screenSizeScript = powershell.Script{Name: "vm-screen-size", Text: `param([string]$VMName)
` + common + `
$vm = Get-HvkubeVM $VMName
$screen = Get-HvkubeScreen $vm
[pscustomobject]@{ Width = $screen.Width; Height = $screen.Height }
`}

// sendInputScript delivers Ops (see op) in order. Moves are checked against
// the screen's resolution before anything is sent. If an operation fails,
// the keys and buttons this run pressed and had not released are released,
// so that none stays down.
var sendInputScript = powershell.Script{Name: "vm-send-input", Text: `param([string]$VMName, [object[]]$Ops)
` + common + `
$vm = Get-HvkubeVM $VMName
$mouse = $null
$keyboard = $null
if (@($Ops | Where-Object { $_.op -ne 'key' }).Count -gt 0) {
  $mouse = Get-HvkubeDevice $vm 'Msvm_SyntheticMouse'
}
if (@($Ops | Where-Object { $_.op -eq 'key' }).Count -gt 0) {
  $keyboard = Get-HvkubeDevice $vm 'Msvm_Keyboard'
}
$moves = @($Ops | Where-Object { $_.op -eq 'move' })
if ($moves.Count -gt 0) {
  $screen = Get-HvkubeScreen $vm
  foreach ($m in $moves) {
    if ([int]$m.x -ge $screen.Width -or [int]$m.y -ge $screen.Height) {
      Write-Error -Message "events[$($m.i)]: [$($m.x), $($m.y)] is outside the $($screen.Width)x$($screen.Height) screen" -Category InvalidArgument -ErrorId HvkubeOffScreen -ErrorAction Stop
    }
  }
}
$heldKeys = @{}
$heldButtons = @{}
foreach ($op in $Ops) {
  try {
    switch ([string]$op.op) {
      'move' {
        $null = Invoke-HvkubeMethod $mouse 'SetAbsolutePosition' @{ horizontalPosition = [int32]$op.x; verticalPosition = [int32]$op.y }
      }
      'button' {
        $null = Invoke-HvkubeMethod $mouse 'SetButtonState' @{ buttonIndex = [uint32]$op.code; isDown = [bool]$op.down }
        if ($op.down) { $heldButtons[[uint32]$op.code] = $true } else { $heldButtons.Remove([uint32]$op.code) }
      }
      'key' {
        if ($op.down) {
          $null = Invoke-HvkubeMethod $keyboard 'PressKey' @{ keyCode = [uint32]$op.code }
          $heldKeys[[uint32]$op.code] = $true
        } else {
          $null = Invoke-HvkubeMethod $keyboard 'ReleaseKey' @{ keyCode = [uint32]$op.code }
          $heldKeys.Remove([uint32]$op.code)
        }
      }
      'scroll' {
        $null = Invoke-HvkubeMethod $mouse 'SetScrollPosition' @{ scrollPositionDelta = [int32]$op.delta }
      }
      default {
        throw "unknown operation '$($op.op)'"
      }
    }
  } catch {
    $failure = $_
    foreach ($code in @($heldButtons.Keys)) {
      try { $null = Invoke-CimMethod -InputObject $mouse -MethodName SetButtonState -Arguments @{ buttonIndex = [uint32]$code; isDown = $false } } catch { }
    }
    foreach ($code in @($heldKeys.Keys)) {
      try { $null = Invoke-CimMethod -InputObject $keyboard -MethodName ReleaseKey -Arguments @{ keyCode = [uint32]$code } } catch { }
    }
    throw "events[$($op.i)]: $($failure.Exception.Message)"
  }
}
`}

// typeTextScript types Chunks in order with Msvm_Keyboard.TypeText. Unicode
// says the text holds characters beyond ASCII, which a keyboard that says it
// does not support Unicode refuses at once.
var typeTextScript = powershell.Script{Name: "vm-type-text", Text: `param([string]$VMName, [string[]]$Chunks, [bool]$Unicode)
` + common + `
$vm = Get-HvkubeVM $VMName
$keyboard = Get-HvkubeDevice $vm 'Msvm_Keyboard'
if ($Unicode -and $keyboard.UnicodeSupported -eq $false) {
  Write-Error -Message "the keyboard of VM '$VMName' does not type Unicode characters" -Category NotImplemented -ErrorId HvkubeUnsupported -ErrorAction Stop
}
foreach ($chunk in $Chunks) {
  $null = Invoke-HvkubeMethod $keyboard 'TypeText' @{ asciiText = [string]$chunk }
}
`}

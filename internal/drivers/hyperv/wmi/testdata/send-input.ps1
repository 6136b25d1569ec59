param([string]$VMName, [object[]]$Ops)

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

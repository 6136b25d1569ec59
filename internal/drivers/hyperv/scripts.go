package hyperv

import "github.com/hvkube/hvkube/internal/powershell"

// The scripts the backend runs. Each is a constant that begins with its
// param() block: every value (names, paths, notes, programs, text) reaches
// it as an argument, never as part of its text. Enums leave PowerShell as
// strings ([string]$vm.State): ConvertTo-Json writes an enum as a number.
// Dates leave as ISO 8601 strings in UTC: Windows PowerShell writes a
// DateTime as "\/Date(ms)\/".
//
// Scripts that look a VM up by name return nothing when there is none,
// rather than letting Get-VM fail: Get-VM reports a missing VM as an
// InvalidArgument error, which would read as a bad request.

// heartbeatID ends the Id of a VM's Heartbeat integration service
// ("Microsoft:<VM id>\<service id>"). Services are matched by it: their
// names are translated on hosts in other languages. PrimaryOperationalStatus
// is the number 2 ("Ok") when the guest answers; PrimaryStatusDescription
// is the same in words, translated too.
const heartbeatID = `84EAAE65-2F2E-45F5-9BB5-0E857DC8EB47`

var (
	// scriptProbeHost checks that the Hyper-V module answers and that the
	// virtual switch exists.
	scriptProbeHost = powershell.Script{Name: "probe-host", Text: `param([string]$Switch)
$hostInfo = Get-VMHost
$sw = @(Get-VMSwitch | Where-Object { $_.Name -eq $Switch })
[pscustomobject]@{
  ComputerName = [string]$hostInfo.ComputerName
  SwitchFound  = ($sw.Count -gt 0)
}
`}

	// scriptGetVHD describes a disk image.
	scriptGetVHD = powershell.Script{Name: "get-vhd", Text: `param([string]$Path)
$vhd = Get-VHD -Path $Path
[pscustomobject]@{
  Path       = [string]$vhd.Path
  VhdFormat  = [string]$vhd.VhdFormat
  VhdType    = [string]$vhd.VhdType
  ParentPath = [string]$vhd.ParentPath
  Size       = [int64]$vhd.Size
  FileSize   = [int64]$vhd.FileSize
  Attached   = [bool]$vhd.Attached
}
`}

	// scriptHostGPU lists the host's partitionable GPUs. Older hosts name
	// the cmdlet Get-VMPartitionableGpu; hosts without either cannot
	// partition a GPU.
	scriptHostGPU = powershell.Script{Name: "host-gpu", Text: `param()
$cmd = Get-Command -Name Get-VMHostPartitionableGpu -ErrorAction SilentlyContinue
if (-not $cmd) { $cmd = Get-Command -Name Get-VMPartitionableGpu -ErrorAction SilentlyContinue }
if (-not $cmd) {
  [pscustomobject]@{ Supported = $false; Names = [string[]]@() }
  return
}
$gpus = @(& $cmd)
[pscustomobject]@{ Supported = $true; Names = [string[]]@($gpus | ForEach-Object { [string]$_.Name }) }
`}

	// scriptCapacity reports host memory (kilobytes) and the memory of
	// hvkube's VMs.
	scriptCapacity = powershell.Script{Name: "capacity", Text: `param()
$os = Get-CimInstance -ClassName Win32_OperatingSystem
$vms = @(Get-VM | Where-Object { $_.Name -like 'hvkube-*' } | ForEach-Object {
  [pscustomobject]@{ Name = $_.Name; State = [string]$_.State; MemoryStartup = [int64]$_.MemoryStartup }
})
[pscustomobject]@{
  TotalKB = [int64]$os.TotalVisibleMemorySize
  FreeKB  = [int64]$os.FreePhysicalMemory
  VMs     = $vms
}
`}

	// scriptGetVMs describes one VM by name, or every hvkube VM when Name
	// is empty, with the process id of its worker process (vmwp.exe, whose
	// command line holds the VM's id) or 0.
	scriptGetVMs = powershell.Script{Name: "get-vms", Text: `param([string]$Name)
if ($Name) {
  $vms = @(Get-VM -Name $Name -ErrorAction SilentlyContinue | Where-Object { $_.Name -eq $Name })
} else {
  $vms = @(Get-VM | Where-Object { $_.Name -like 'hvkube-*' })
}
if ($vms.Count -eq 0) { return }
$workers = @(Get-CimInstance -ClassName Win32_Process -Filter "Name = 'vmwp.exe'")
foreach ($vm in $vms) {
  $id = [string]$vm.Id
  $worker = $workers | Where-Object { $_.CommandLine -and $_.CommandLine.IndexOf($id, [System.StringComparison]::OrdinalIgnoreCase) -ge 0 } | Select-Object -First 1
  $workerPid = 0
  if ($worker) { $workerPid = [int]$worker.ProcessId }
  [pscustomobject]@{
    Name           = [string]$vm.Name
    Id             = $id
    State          = [string]$vm.State
    Notes          = [string]$vm.Notes
    MemoryStartup  = [int64]$vm.MemoryStartup
    ProcessorCount = [int]$vm.ProcessorCount
    CreationTime   = $vm.CreationTime.ToUniversalTime().ToString('o')
    Path           = [string]$vm.Path
    WorkerPid      = $workerPid
  }
}
`}

	// scriptVMStatus reports what a boot or a resume waits on: the VM's
	// state, its Heartbeat integration service and its network adapters'
	// addresses.
	scriptVMStatus = powershell.Script{Name: "vm-status", Text: `param([string]$Name)
$vm = @(Get-VM -Name $Name -ErrorAction SilentlyContinue | Where-Object { $_.Name -eq $Name })[0]
if (-not $vm) { return }
$hb = Get-VMIntegrationService -VM $vm | Where-Object { ([string]$_.Id).EndsWith('\` + heartbeatID + `', [System.StringComparison]::OrdinalIgnoreCase) } | Select-Object -First 1
$ips = @(Get-VMNetworkAdapter -VM $vm | ForEach-Object { $_.IPAddresses } | Where-Object { $_ })
$status = [pscustomobject]@{
  Name        = [string]$vm.Name
  State       = [string]$vm.State
  Heartbeat   = ''
  HeartbeatOK = $false
  IPAddresses = [string[]]$ips
}
if ($hb) {
  $status.Heartbeat = [string]$hb.PrimaryStatusDescription
  $status.HeartbeatOK = ([bool]$hb.Enabled -and [int]$hb.PrimaryOperationalStatus -eq 2)
}
$status
`}

	// scriptNewDifferencingVHD makes a sandbox's disk: a differencing disk
	// over its template's, which never changes.
	scriptNewDifferencingVHD = powershell.Script{Name: "new-differencing-vhd", Text: `param([string]$Path, [string]$ParentPath)
$null = New-VHD -Path $Path -ParentPath $ParentPath -Differencing
`}

	// scriptNewVM creates and configures a sandbox's VM. Dynamic memory
	// lets the host take back what an idle guest does not use; its maximum
	// is the startup memory, so a VM never holds more than it was given.
	// The VM never starts with the host, and is saved when the host shuts
	// down. Standard checkpoints hold memory: reset returns to a running
	// desktop, not a boot.
	scriptNewVM = powershell.Script{Name: "new-vm", Text: `param([string]$Name, [string]$Path, [string]$VHDPath, [string]$Switch, [int64]$MemoryBytes, [int64]$MinimumMemoryBytes, [int]$ProcessorCount, [string]$Notes, [int]$Width, [int]$Height)
$vm = New-VM -Name $Name -Generation 2 -MemoryStartupBytes $MemoryBytes -VHDPath $VHDPath -SwitchName $Switch -Path $Path
Set-VM -VM $vm -ProcessorCount $ProcessorCount -AutomaticStartAction Nothing -AutomaticStopAction Save -CheckpointType Standard -Notes $Notes
Set-VMMemory -VM $vm -DynamicMemoryEnabled $true -MinimumBytes $MinimumMemoryBytes -StartupBytes $MemoryBytes -MaximumBytes $MemoryBytes
Set-VMVideo -VM $vm -HorizontalResolution ([uint16]$Width) -VerticalResolution ([uint16]$Height) -ResolutionType Single
[pscustomobject]@{ Id = [string]$vm.Id }
`}

	// scriptEnhancedSession lets vmconnect use enhanced session mode (the
	// parameter exists on Windows 10 1803, Windows Server 2019 and later).
	scriptEnhancedSession = powershell.Script{Name: "set-enhanced-session", Text: `param([string]$Name)
Set-VM -Name $Name -EnhancedSessionTransportType HvSocket
`}

	// scriptAddGPU gives a VM a GPU partition. A VM with one can be neither
	// checkpointed nor saved, so it turns off with the host; it needs
	// guest-controlled caching and room for the GPU's memory-mapped I/O.
	scriptAddGPU = powershell.Script{Name: "add-gpu", Text: `param([string]$Name)
Add-VMGpuPartitionAdapter -VMName $Name
Set-VMGpuPartitionAdapter -VMName $Name -MinPartitionVRAM 80000000 -MaxPartitionVRAM 100000000 -OptimalPartitionVRAM 100000000
Set-VM -Name $Name -AutomaticStopAction TurnOff -CheckpointType Disabled -GuestControlledCacheTypes $true -LowMemoryMappedIoSpace 1GB -HighMemoryMappedIoSpace 32GB
`}

	// scriptStartVM boots an Off VM, or brings a Saved one back running.
	scriptStartVM = powershell.Script{Name: "start-vm", Text: `param([string]$Name)
Start-VM -Name $Name
`}

	// scriptSuspendVM pauses a running VM (in memory).
	scriptSuspendVM = powershell.Script{Name: "suspend-vm", Text: `param([string]$Name)
Suspend-VM -Name $Name
`}

	// scriptResumeVM runs a paused VM again.
	scriptResumeVM = powershell.Script{Name: "resume-vm", Text: `param([string]$Name)
Resume-VM -Name $Name
`}

	// scriptSaveVM saves a VM's memory and device state to disk.
	scriptSaveVM = powershell.Script{Name: "save-vm", Text: `param([string]$Name)
Save-VM -Name $Name
`}

	// scriptStartPaused brings a Saved VM back and pauses it at once, so
	// that it lands Paused with the guest barely run.
	scriptStartPaused = powershell.Script{Name: "start-paused", Text: `param([string]$Name)
Start-VM -Name $Name
Suspend-VM -Name $Name
`}

	// scriptCheckpointVM takes a checkpoint of a running VM; a Standard
	// checkpoint holds its memory.
	scriptCheckpointVM = powershell.Script{Name: "checkpoint-vm", Text: `param([string]$Name, [string]$Checkpoint)
Checkpoint-VM -Name $Name -SnapshotName $Checkpoint
`}

	// scriptRestoreCheckpoint applies a checkpoint. A running or paused VM
	// is turned off first (applying to a running VM would save its state
	// only to throw it away). A checkpoint with memory leaves the VM Saved.
	scriptRestoreCheckpoint = powershell.Script{Name: "restore-checkpoint", Text: `param([string]$Name, [string]$Checkpoint)
$vm = @(Get-VM -Name $Name | Where-Object { $_.Name -eq $Name })[0]
$state = [string]$vm.State
if ($state -ne 'Off' -and $state -ne 'Saved') { Stop-VM -VM $vm -TurnOff -Force }
Restore-VMCheckpoint -VMName $Name -Name $Checkpoint -Confirm:$false
`}

	// scriptSetNotes replaces a VM's notes.
	scriptSetNotes = powershell.Script{Name: "set-notes", Text: `param([string]$Name, [string]$Notes)
Set-VM -Name $Name -Notes $Notes
`}

	// scriptStopVM turns a running or paused VM off without saving.
	scriptStopVM = powershell.Script{Name: "stop-vm", Text: `param([string]$Name)
Stop-VM -Name $Name -TurnOff -Force
`}

	// scriptRemoveSavedState discards a Saved VM's state; it is then Off.
	scriptRemoveSavedState = powershell.Script{Name: "remove-saved-state", Text: `param([string]$Name)
Remove-VMSavedState -VMName $Name -Confirm:$false
`}

	// scriptRemoveVM turns a VM off and removes it; a missing VM is not an
	// error. Its files (disks, checkpoints' disks, saved state) stay for
	// the caller to delete with the sandbox's folder. Its checkpoints are
	// not removed one by one: each removal merges a disk into its parent,
	// work that deleting the folder makes pointless.
	scriptRemoveVM = powershell.Script{Name: "remove-vm", Text: `param([string]$Name)
foreach ($vm in @(Get-VM -Name $Name -ErrorAction SilentlyContinue | Where-Object { $_.Name -eq $Name })) {
  $state = [string]$vm.State
  if ($state -eq 'Saved') { Remove-VMSavedState -VM $vm -Confirm:$false }
  elseif ($state -ne 'Off') { Stop-VM -VM $vm -TurnOff -Force }
  Remove-VM -VM $vm -Force
}
`}
)

// guestPrelude starts every script that reaches into a guest: it finds the
// VM (answering an empty State when there is none, and its state when it does
// not run) and reads the guest account from the credential file. The
// password goes from the file to a SecureString without passing through a
// command line, a log or an error message.
const guestPrelude = `$vm = @(Get-VM -Name $Name -ErrorAction SilentlyContinue | Where-Object { $_.Name -eq $Name })[0]
if (-not $vm) { return [pscustomobject]@{ State = '' } }
if ([string]$vm.State -ne 'Running') { return [pscustomobject]@{ State = [string]$vm.State } }
$accountText = Get-Content -LiteralPath $CredentialFile -Raw -Encoding UTF8
try {
  $account = ConvertFrom-Json -InputObject $accountText
} catch {
  throw 'the guest credential file is not JSON of the form {"user": ..., "password": ...}'
}
if (-not $account.user -or -not $account.password) { throw 'the guest credential file needs a "user" and a "password"' }
$secret = ConvertTo-SecureString -String ([string]$account.password) -AsPlainText -Force
$credential = New-Object System.Management.Automation.PSCredential -ArgumentList ([string]$account.user), $secret
`

var (
	// scriptGuestExec runs a program in the guest through PowerShell Direct
	// and waits for it. The program gets its arguments as one command line,
	// quoted on the host (see commandLine); its standard input, output and
	// error travel as base64.
	scriptGuestExec = powershell.Script{Name: "guest-exec", Text: `param([string]$Name, [string]$CredentialFile, [string]$FilePath, [string]$Arguments, [string[]]$Environment, [string]$Stdin)
` + guestPrelude + `$result = Invoke-Command -VMId $vm.Id -Credential $credential -ArgumentList $FilePath, $Arguments, $Environment, $Stdin -ScriptBlock {
  param([string]$FilePath, [string]$Arguments, [string[]]$Environment, [string]$Stdin)
  $ErrorActionPreference = 'Stop'
  $psi = New-Object System.Diagnostics.ProcessStartInfo
  $psi.FileName = $FilePath
  $psi.Arguments = $Arguments
  $psi.UseShellExecute = $false
  $psi.CreateNoWindow = $true
  $psi.RedirectStandardInput = $true
  $psi.RedirectStandardOutput = $true
  $psi.RedirectStandardError = $true
  foreach ($kv in @($Environment | Where-Object { $_ })) {
    $i = $kv.IndexOf('=')
    if ($i -gt 0) { $psi.EnvironmentVariables[$kv.Substring(0, $i)] = $kv.Substring($i + 1) }
  }
  try {
    $p = [System.Diagnostics.Process]::Start($psi)
  } catch {
    $e = $_.Exception
    if ($e.InnerException) { $e = $e.InnerException }
    return [pscustomobject]@{ StartError = [string]$e.Message }
  }
  $out = New-Object System.IO.MemoryStream
  $err = New-Object System.IO.MemoryStream
  $outCopy = $p.StandardOutput.BaseStream.CopyToAsync($out)
  $errCopy = $p.StandardError.BaseStream.CopyToAsync($err)
  $in = [Convert]::FromBase64String($Stdin)
  try {
    if ($in.Length -gt 0) { $p.StandardInput.BaseStream.Write($in, 0, $in.Length) }
    $p.StandardInput.Close()
  } catch [System.IO.IOException] {
    # The program ended without reading all of its input.
  }
  $p.WaitForExit()
  $outCopy.Wait()
  $errCopy.Wait()
  [pscustomobject]@{
    StartError = ''
    ExitCode   = $p.ExitCode
    Stdout     = [Convert]::ToBase64String($out.ToArray())
    Stderr     = [Convert]::ToBase64String($err.ToArray())
  }
}
[pscustomobject]@{
  State      = 'Running'
  StartError = [string]$result.StartError
  ExitCode   = [int]$result.ExitCode
  Stdout     = [string]$result.Stdout
  Stderr     = [string]$result.Stderr
}
`}

	// scriptGuestStart starts a program in the guest and returns at once.
	// It is created through WMI (Win32_Process), outside the PowerShell
	// Direct session: the session's processes end with it. Environment
	// entries are added to the guest's own environment.
	scriptGuestStart = powershell.Script{Name: "guest-start", Text: `param([string]$Name, [string]$CredentialFile, [string]$CommandLine, [string[]]$Environment)
` + guestPrelude + `$result = Invoke-Command -VMId $vm.Id -Credential $credential -ArgumentList $CommandLine, $Environment -ScriptBlock {
  param([string]$CommandLine, [string[]]$Environment)
  $ErrorActionPreference = 'Stop'
  $arguments = @{ CommandLine = $CommandLine }
  $entries = @($Environment | Where-Object { $_ })
  if ($entries.Count -gt 0) {
    $vars = @{}
    foreach ($e in [System.Environment]::GetEnvironmentVariables().GetEnumerator()) { $vars[[string]$e.Key] = [string]$e.Value }
    foreach ($kv in $entries) {
      $i = $kv.IndexOf('=')
      if ($i -gt 0) { $vars[$kv.Substring(0, $i)] = $kv.Substring($i + 1) }
    }
    $block = [string[]]@($vars.GetEnumerator() | ForEach-Object { $_.Key + '=' + $_.Value })
    $startup = Get-CimClass -ClassName Win32_ProcessStartup
    $arguments.ProcessStartupInformation = New-CimInstance -CimClass $startup -ClientOnly -Property @{ EnvironmentVariables = $block }
  }
  $r = Invoke-CimMethod -ClassName Win32_Process -MethodName Create -Arguments $arguments
  if ($r.ReturnValue -ne 0) { return [pscustomobject]@{ StartError = 'Win32_Process.Create returned ' + [string]$r.ReturnValue; ProcessId = 0 } }
  [pscustomobject]@{ StartError = ''; ProcessId = [int]$r.ProcessId }
}
[pscustomobject]@{
  State      = 'Running'
  StartError = [string]$result.StartError
  ProcessId  = [int]$result.ProcessId
}
`}

	// scriptGuestCopyIn copies a host file into the guest.
	scriptGuestCopyIn = powershell.Script{Name: "guest-copy-in", Text: `param([string]$Name, [string]$CredentialFile, [string]$Source, [string]$Destination)
` + guestPrelude + `$session = New-PSSession -VMId $vm.Id -Credential $credential
try {
  Copy-Item -LiteralPath $Source -Destination $Destination -ToSession $session -Force
} finally {
  Remove-PSSession -Session $session
}
[pscustomobject]@{ State = 'Running' }
`}

	// scriptGuestCopyOut copies a guest file to the host.
	scriptGuestCopyOut = powershell.Script{Name: "guest-copy-out", Text: `param([string]$Name, [string]$CredentialFile, [string]$Source, [string]$Destination)
` + guestPrelude + `$session = New-PSSession -VMId $vm.Id -Credential $credential
try {
  Copy-Item -LiteralPath $Source -Destination $Destination -FromSession $session -Force
} finally {
  Remove-PSSession -Session $session
}
[pscustomobject]@{ State = 'Running' }
`}
)

// allScripts lists every script, for tests.
var allScripts = []powershell.Script{
	scriptProbeHost, scriptGetVHD, scriptHostGPU, scriptCapacity, scriptGetVMs, scriptVMStatus,
	scriptNewDifferencingVHD, scriptNewVM, scriptEnhancedSession, scriptAddGPU,
	scriptStartVM, scriptSuspendVM, scriptResumeVM, scriptSaveVM, scriptStartPaused,
	scriptCheckpointVM, scriptRestoreCheckpoint, scriptSetNotes, scriptStopVM, scriptRemoveSavedState, scriptRemoveVM,
	scriptGuestExec, scriptGuestStart, scriptGuestCopyIn, scriptGuestCopyOut,
}

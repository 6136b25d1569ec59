param([string]$Name, [string]$CredentialFile, [string]$CommandLine, [string[]]$Environment)
$vm = @(Get-VM -Name $Name -ErrorAction SilentlyContinue | Where-Object { $_.Name -eq $Name })[0]
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
$result = Invoke-Command -VMId $vm.Id -Credential $credential -ArgumentList $CommandLine, $Environment -ScriptBlock {
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

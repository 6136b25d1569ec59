param([string]$Name, [string]$CredentialFile, [string]$FilePath, [string]$Arguments, [string[]]$Environment, [string]$Stdin)
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
$result = Invoke-Command -VMId $vm.Id -Credential $credential -ArgumentList $FilePath, $Arguments, $Environment, $Stdin -ScriptBlock {
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

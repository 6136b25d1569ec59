param([string]$Name, [string]$CredentialFile, [string]$Source, [string]$Destination)
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
$session = New-PSSession -VMId $vm.Id -Credential $credential
try {
  Copy-Item -LiteralPath $Source -Destination $Destination -ToSession $session -Force
} finally {
  Remove-PSSession -Session $session
}
[pscustomobject]@{ State = 'Running' }

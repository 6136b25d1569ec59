# The desktop user (HVKUBE_GUEST_USER), created by the answer file: a local
# administrator whose password never expires, logged on automatically.
#
# PowerShell Direct, which hvkube uses for exec, files and the clipboard,
# accepts the credentials of any local administrator of the guest; hvkube's
# guest credential file names this account. The automatic logon puts its
# desktop on the VM's console, which is the screen hvkube reads and types on.
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

$name = $env:HVKUBE_GUEST_USER
if (-not $name) { throw 'HVKUBE_GUEST_USER is not set' }

$account = Get-LocalUser -Name $name
if (-not $account.Enabled) { Enable-LocalUser -InputObject $account }

# S-1-5-32-544 is Administrators, whatever the display language.
try {
    Add-LocalGroupMember -SID 'S-1-5-32-544' -Member $account -ErrorAction Stop
} catch [Microsoft.PowerShell.Commands.MemberExistsException] {
    # already a member
}

# Local passwords expire after 42 days by default; an image outlives that,
# and an expired password stops both the logon and PowerShell Direct.
Set-LocalUser -InputObject $account -PasswordNeverExpires $true
& net.exe accounts /maxpwage:unlimited | Out-Null
if ($LASTEXITCODE -ne 0) { throw "net accounts /maxpwage:unlimited exited $LASTEXITCODE" }

# The answer file turned the automatic logon on with a count; without the
# count it lasts through the restarts of the build. The image's own
# automatic logon comes from the sysprep answer file.
$winlogon = 'HKLM:\SOFTWARE\Microsoft\Windows NT\CurrentVersion\Winlogon'
$settings = Get-ItemProperty -Path $winlogon
if ($settings.AutoAdminLogon -ne '1' -or $settings.DefaultUserName -ne $name) {
    throw "automatic logon is not set up for $name (AutoAdminLogon=$($settings.AutoAdminLogon), DefaultUserName=$($settings.DefaultUserName))"
}
Remove-ItemProperty -Path $winlogon -Name AutoLogonCount -ErrorAction SilentlyContinue

Write-Output "desktop user ${name}: administrator, password never expires, automatic logon"

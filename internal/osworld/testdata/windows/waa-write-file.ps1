param([string]$Path, [string]$Data)
function Get-DesktopUser {
  $account = (Get-CimInstance -ClassName Win32_ComputerSystem).UserName
  if (-not $account) { throw 'no user is logged on to the desktop' }
  $sid = (New-Object System.Security.Principal.NTAccount($account)).Translate([System.Security.Principal.SecurityIdentifier]).Value
  $found = @(Get-CimInstance -ClassName Win32_UserProfile | Where-Object { $_.SID -eq $sid })
  if ($found.Count -eq 0) { throw "the desktop user $account has no profile folder" }
  [pscustomobject]@{ Name = ($account -split '\\')[-1]; Home = [string]$found[0].LocalPath }
}
function Expand-DesktopPath([string]$Path, $User) {
  $userHome = $User.Home
  if ($Path -eq '~' -or $Path -match '^~[\\/]') { $Path = $userHome + $Path.Substring(1) }
  $vars = @{
    USERPROFILE = $userHome; USERNAME = $User.Name
    HOMEDRIVE = $userHome.Substring(0, 2); HOMEPATH = $userHome.Substring(2)
    APPDATA = [IO.Path]::Combine($userHome, 'AppData\Roaming'); LOCALAPPDATA = [IO.Path]::Combine($userHome, 'AppData\Local')
    TEMP = [IO.Path]::Combine($userHome, 'AppData\Local\Temp'); TMP = [IO.Path]::Combine($userHome, 'AppData\Local\Temp')
  }
  $expand = {
    param($m)
    if ($m.Value -eq '%%') { return '%' }
    if ($m.Value -eq '$$') { return '$' }
    $name = $m.Groups[1].Value + $m.Groups[2].Value + $m.Groups[3].Value
    if ($vars.ContainsKey($name)) { return $vars[$name] }
    $value = [Environment]::GetEnvironmentVariable($name)
    if ($null -eq $value) { $m.Value } else { $value }
  }
  [regex]::Replace($Path, '%%|\$\$|%([^%]+)%|\$\{([^}]+)\}|\$([A-Za-z0-9_-]+)', [Text.RegularExpressions.MatchEvaluator]$expand)
}
function Resolve-DesktopPath([string]$Path, $User) {
  if ([IO.Path]::IsPathRooted($Path)) { $Path } else { [IO.Path]::Combine($User.Home, $Path) }
}
$user = Get-DesktopUser
$p = Resolve-DesktopPath (Expand-DesktopPath $Path $user) $user
if ([IO.Directory]::Exists($p)) { return [pscustomobject]@{ state = 'directory'; path = $p } }
$dir = [IO.Path]::GetDirectoryName($p)
if ($dir -and -not [IO.Directory]::Exists($dir)) { return [pscustomobject]@{ state = 'missing'; path = $p } }
[IO.File]::WriteAllBytes($p, [Convert]::FromBase64String($Data))
[pscustomobject]@{ state = 'ok'; path = $p }

param([string]$Path, [int]$Max)
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
try { $root = Resolve-DesktopPath $Path (Get-DesktopUser) } catch { $root = '' }
if (-not $root -or -not [IO.Directory]::Exists($root)) { return [pscustomobject]@{ directory = $false; entries = @() } }
$entries = New-Object System.Collections.Generic.List[object]
$entries.Add([pscustomobject]@{ p = -1; n = ''; d = $true; e = $null })
$todo = New-Object System.Collections.Generic.Queue[object]
$todo.Enqueue(@(0, $root))
while ($todo.Count -gt 0 -and $entries.Count -lt $Max) {
  $parent, $dir = $todo.Dequeue()
  try { $items = @(([IO.DirectoryInfo]::new($dir)).EnumerateFileSystemInfos()) } catch { $entries[$parent].e = [string]$_.Exception.GetBaseException().Message; continue }
  foreach ($item in $items) {
    if ($entries.Count -ge $Max) { break }
    $isDir = $item -is [IO.DirectoryInfo]
    $entries.Add([pscustomobject]@{ p = $parent; n = [string]$item.Name; d = $isDir; e = $null })
    if ($isDir) { $todo.Enqueue(@(($entries.Count - 1), $item.FullName)) }
  }
}
[pscustomobject]@{ directory = $true; entries = $entries.ToArray() }

param()
$user = (Get-CimInstance -ClassName Win32_ComputerSystem).UserName
if (-not $user) { throw 'no user is logged on to the desktop' }
if (-not (Get-Process -Name explorer -ErrorAction SilentlyContinue)) { throw 'the desktop shell (explorer.exe) is not running' }

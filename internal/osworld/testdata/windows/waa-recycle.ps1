param([string]$Path)
Add-Type -Namespace W -Name R -MemberDefinition '[StructLayout(LayoutKind.Sequential, CharSet = CharSet.Unicode)] public struct Op { public IntPtr h; public uint f; public string a; public string b; public ushort g; public int x; public IntPtr m; public string t; } [DllImport("shell32.dll", CharSet = CharSet.Unicode)] public static extern int SHFileOperation(ref Op o);'
$p = [IO.Path]::GetFullPath([IO.Path]::Combine($env:USERPROFILE, $Path))
if (-not ([IO.File]::Exists($p) -or [IO.Directory]::Exists($p))) { throw "$p does not exist" }
$o = New-Object W.R+Op
$o.f = 3; $o.a = $p + [char]0; $o.g = 0x454
$rc = [W.R]::SHFileOperation([ref]$o)
if ($rc -ne 0 -or $o.x -ne 0) { throw ('SHFileOperation returned ' + $rc) }

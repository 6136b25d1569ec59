param([string]$Path)
Add-Type -Namespace W -Name P -MemberDefinition '[DllImport("user32.dll", CharSet = CharSet.Unicode)] public static extern bool SystemParametersInfo(int a, int b, string c, int d);'
[void][W.P]::SystemParametersInfo(20, 0, $Path, 3)

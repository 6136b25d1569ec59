param()
Add-Type -Namespace W -Name M -MemberDefinition '[DllImport("user32.dll")] public static extern bool SetProcessDPIAware(); [DllImport("user32.dll")] public static extern int GetSystemMetrics(int i);'
[void][W.M]::SetProcessDPIAware()
[pscustomobject]@{ width = [W.M]::GetSystemMetrics(0); height = [W.M]::GetSystemMetrics(1) }

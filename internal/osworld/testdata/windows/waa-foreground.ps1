param()
Add-Type -Namespace W -Name F -MemberDefinition '[DllImport("user32.dll")] public static extern bool SetProcessDPIAware(); [DllImport("user32.dll")] public static extern IntPtr GetForegroundWindow(); [DllImport("user32.dll")] public static extern bool GetWindowRect(IntPtr h, int[] r); [DllImport("user32.dll", CharSet = CharSet.Unicode)] public static extern int GetWindowText(IntPtr h, System.Text.StringBuilder s, int n); [DllImport("user32.dll")] public static extern int GetSystemMetrics(int i);'
[void][W.F]::SetProcessDPIAware()
$h = [W.F]::GetForegroundWindow()
$t = New-Object System.Text.StringBuilder 1024
[void][W.F]::GetWindowText($h, $t, 1024)
$r = New-Object int[] 4
[void][W.F]::GetWindowRect($h, $r)
$names = @(Get-Process | Where-Object { $_.MainWindowTitle } | ForEach-Object { [string]$_.MainWindowTitle })
[pscustomobject]@{ title = $t.ToString(); rect = $r; width = [W.F]::GetSystemMetrics(0); height = [W.F]::GetSystemMetrics(1); windows = $names }

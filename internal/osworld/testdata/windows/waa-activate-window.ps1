param([string]$Name, [bool]$Strict)
Add-Type -Namespace W -Name E -MemberDefinition @'
[DllImport("user32")] static extern bool IsIconic(IntPtr h);
[DllImport("user32")] static extern bool ShowWindow(IntPtr h, int c);
[DllImport("user32")] static extern bool SetForegroundWindow(IntPtr h);
public static void Activate(IntPtr h) { if (IsIconic(h) || !SetForegroundWindow(h)) { ShowWindow(h, 6); ShowWindow(h, 9); } }
public class Win { public IntPtr H; public string T; }
delegate bool P(IntPtr h, IntPtr l);
[DllImport("user32")] static extern bool EnumWindows(P p, IntPtr l);
[DllImport("user32")] static extern bool IsWindowVisible(IntPtr h);
[DllImport("user32", CharSet = CharSet.Unicode)] static extern int GetWindowText(IntPtr h, System.Text.StringBuilder s, int n);
public static Win[] All() {
  var r = new System.Collections.Generic.List<Win>();
  EnumWindows((h, l) => { if (IsWindowVisible(h)) { var s = new System.Text.StringBuilder(1024); GetWindowText(h, s, 1024); r.Add(new Win { H = h, T = s.ToString() }); } return true; }, IntPtr.Zero);
  return r.ToArray();
}
'@
$found = @([W.E]::All() | Where-Object { $_.T.IndexOf($Name, [StringComparison]::OrdinalIgnoreCase) -ge 0 })
$pick = @($found | Where-Object { -not $Strict -or $_.T -ceq $Name })
if ($pick.Count -eq 0) { return -$found.Count }
$h = $pick[0].H
[W.E]::Activate($h)
$found.Count

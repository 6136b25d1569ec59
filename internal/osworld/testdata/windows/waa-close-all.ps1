param()
Add-Type -Namespace W -Name E -MemberDefinition @'
[DllImport("user32")] public static extern bool PostMessage(IntPtr h, int m, IntPtr w, IntPtr l);
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
foreach ($w in [W.E]::All()) {
  if ($w.T -and $w.T -ne 'Program Manager' -and $w.T -ne 'Administrator: C:\Windows\System32\WindowsPowerShell\v1.0\powershell.exe') { [void][W.E]::PostMessage($w.H, 16, [IntPtr]::Zero, [IntPtr]::Zero) }
}

param()
Add-Type -AssemblyName System.Windows.Forms
$p = [System.Windows.Forms.Cursor]::Position
[pscustomobject]@{ x = $p.X; y = $p.Y }

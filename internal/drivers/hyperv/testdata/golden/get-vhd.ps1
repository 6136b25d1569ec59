param([string]$Path)
$vhd = Get-VHD -Path $Path
[pscustomobject]@{
  Path       = [string]$vhd.Path
  VhdFormat  = [string]$vhd.VhdFormat
  VhdType    = [string]$vhd.VhdType
  ParentPath = [string]$vhd.ParentPath
  Size       = [int64]$vhd.Size
  FileSize   = [int64]$vhd.FileSize
  Attached   = [bool]$vhd.Attached
}

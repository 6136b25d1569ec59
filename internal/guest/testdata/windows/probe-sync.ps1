param()
Write-VolumeCache -DriveLetter C

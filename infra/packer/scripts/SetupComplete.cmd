@echo off
rem Windows runs this once, as SYSTEM, at the end of Windows Setup in each
rem sandbox's first boot from the hvkube image. It is not run for images
rem activated with an OEM product key.
powershell.exe -NoProfile -ExecutionPolicy Bypass -File "%WINDIR%\Setup\Scripts\hvkube-setup-complete.ps1" >> "%WINDIR%\Setup\Scripts\hvkube-setup-complete.log" 2>&1

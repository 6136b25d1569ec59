param([int]$Port)
$client = New-Object System.Net.Sockets.TcpClient
try { $client.Connect('127.0.0.1', $Port); $true } catch { $false } finally { $client.Close() }

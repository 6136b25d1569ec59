param([long]$UnixMillis)
Set-Date -Date ([DateTimeOffset]::FromUnixTimeMilliseconds($UnixMillis).LocalDateTime) | Out-Null

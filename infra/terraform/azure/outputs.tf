output "public_ip" {
  description = "The host's public address (reachable from allowed_cidr only)."
  value       = azurerm_public_ip.hvkube.ip_address
}

output "rdp" {
  description = "Remote Desktop to the host."
  value       = "mstsc /v:${azurerm_public_ip.hvkube.ip_address}"
}

output "hvkube_server" {
  description = "hvkube's API once hvkube serve listens on 0.0.0.0 with a token: HVKUBE_SERVER for the CLI."
  value       = "http://${azurerm_public_ip.hvkube.ip_address}:${var.api_port}"
}

output "hvkube_serve" {
  description = "The command to start hvkube on the host (README.md)."
  value = join(" ", [
    "C:\\hvkube\\hvkube.exe serve --backend hyperv",
    "--addr 0.0.0.0:${var.api_port} --token-file C:\\hvkube\\token.txt --allowed-hosts ${azurerm_public_ip.hvkube.ip_address}",
    "--hyperv-dir ${var.data_drive_letter}:\\hvkube --hyperv-switch hvkube",
    "--guest-credential-file C:\\hvkube\\guest.json --allow-host-path ${var.data_drive_letter}:\\templates",
  ])
}

output "resource_group" {
  description = "The resource group holding everything (terraform destroy removes it)."
  value       = azurerm_resource_group.hvkube.name
}

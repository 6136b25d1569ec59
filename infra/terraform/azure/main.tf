# An Azure Windows Server 2022 VM that runs hvkube's Hyper-V backend: nested
# virtualization, a data disk for the sandbox VMs and template images, and
# RDP and the hvkube API open to allowed_cidr only. host-setup.ps1 installs
# Hyper-V and prepares the disk and the sandboxes' network; it downloads
# nothing. hvkube.exe is built with GOOS=windows and copied over by the
# administrator (README.md).

locals {
  name = var.prefix

  # The Custom Script Extension runs host-setup.ps1, which Azure has written
  # from custom data; its values are arguments, checked by the variables'
  # validation rules and by the script's parameter declarations.
  setup_script = "C:\\AzureData\\hvkube-host-setup.ps1"
  setup_command = join(" ", [
    "powershell.exe -NoProfile -ExecutionPolicy Bypass -Command",
    "\"Copy-Item -Force -LiteralPath C:\\AzureData\\CustomData.bin -Destination ${local.setup_script};",
    "& ${local.setup_script} -Phase install -DriveLetter ${var.data_drive_letter} -ApiPort ${var.api_port}\"",
  ])
}

resource "azurerm_resource_group" "hvkube" {
  name     = "${local.name}-rg"
  location = var.location
  tags     = var.tags
}

resource "azurerm_virtual_network" "hvkube" {
  name                = "${local.name}-vnet"
  location            = azurerm_resource_group.hvkube.location
  resource_group_name = azurerm_resource_group.hvkube.name
  address_space       = [var.vnet_cidr]
  tags                = var.tags
}

resource "azurerm_subnet" "hvkube" {
  name                 = "${local.name}-subnet"
  resource_group_name  = azurerm_resource_group.hvkube.name
  virtual_network_name = azurerm_virtual_network.hvkube.name
  address_prefixes     = [var.subnet_cidr]
}

resource "azurerm_public_ip" "hvkube" {
  name                = "${local.name}-ip"
  location            = azurerm_resource_group.hvkube.location
  resource_group_name = azurerm_resource_group.hvkube.name
  allocation_method   = "Static"
  sku                 = "Standard"
  tags                = var.tags
}

# Only allowed_cidr gets in, and only to RDP and the hvkube API. A Standard
# public IP admits nothing the security group does not allow.
resource "azurerm_network_security_group" "hvkube" {
  name                = "${local.name}-nsg"
  location            = azurerm_resource_group.hvkube.location
  resource_group_name = azurerm_resource_group.hvkube.name
  tags                = var.tags

  security_rule {
    name                       = "rdp"
    priority                   = 100
    direction                  = "Inbound"
    access                     = "Allow"
    protocol                   = "Tcp"
    source_port_range          = "*"
    destination_port_range     = "3389"
    source_address_prefix      = var.allowed_cidr
    destination_address_prefix = "*"
  }

  security_rule {
    name                       = "hvkube-api"
    priority                   = 110
    direction                  = "Inbound"
    access                     = "Allow"
    protocol                   = "Tcp"
    source_port_range          = "*"
    destination_port_range     = tostring(var.api_port)
    source_address_prefix      = var.allowed_cidr
    destination_address_prefix = "*"
  }
}

resource "azurerm_network_interface" "hvkube" {
  name                = "${local.name}-nic"
  location            = azurerm_resource_group.hvkube.location
  resource_group_name = azurerm_resource_group.hvkube.name
  tags                = var.tags

  ip_configuration {
    name                          = "primary"
    subnet_id                     = azurerm_subnet.hvkube.id
    private_ip_address_allocation = "Dynamic"
    public_ip_address_id          = azurerm_public_ip.hvkube.id
  }
}

resource "azurerm_network_interface_security_group_association" "hvkube" {
  network_interface_id      = azurerm_network_interface.hvkube.id
  network_security_group_id = azurerm_network_security_group.hvkube.id
}

resource "azurerm_windows_virtual_machine" "host" {
  name                = "${local.name}-host"
  computer_name       = substr("${local.name}-host", 0, 15)
  location            = azurerm_resource_group.hvkube.location
  resource_group_name = azurerm_resource_group.hvkube.name
  size                = var.vm_size
  admin_username      = var.admin_username
  admin_password      = var.admin_password
  network_interface_ids = [
    azurerm_network_interface.hvkube.id,
  ]
  tags = var.tags

  # The setup script, written by Azure to C:\AzureData\CustomData.bin.
  # Changing it replaces the VM.
  custom_data = filebase64("${path.module}/host-setup.ps1")

  os_disk {
    caching              = "ReadWrite"
    storage_account_type = "Premium_LRS"
    disk_size_gb         = var.os_disk_size_gb
  }

  # Windows Server 2022 with the desktop (vmconnect and Hyper-V Manager need
  # it), Generation 2.
  source_image_reference {
    publisher = "MicrosoftWindowsServer"
    offer     = "WindowsServer"
    sku       = "2022-datacenter-g2"
    version   = "latest"
  }
}

resource "azurerm_managed_disk" "vms" {
  name                 = "${local.name}-vms"
  location             = azurerm_resource_group.hvkube.location
  resource_group_name  = azurerm_resource_group.hvkube.name
  storage_account_type = var.data_disk_storage_type
  create_option        = "Empty"
  disk_size_gb         = var.data_disk_size_gb
  tags                 = var.tags
}

resource "azurerm_virtual_machine_data_disk_attachment" "vms" {
  managed_disk_id    = azurerm_managed_disk.vms.id
  virtual_machine_id = azurerm_windows_virtual_machine.host.id
  lun                = 0
  # Every sandbox reads its template's VHDX: read caching helps, and writes
  # go straight to the disk.
  caching = "ReadOnly"
}

# Runs host-setup.ps1 once: Hyper-V with its management tools, the DHCP
# role, the data disk as D: (data_drive_letter), a restart, then the
# sandboxes' switch. Its log is C:\hvkube\setup\host-setup.log on the host.
resource "azurerm_virtual_machine_extension" "host_setup" {
  name                       = "hvkube-host-setup"
  virtual_machine_id         = azurerm_windows_virtual_machine.host.id
  publisher                  = "Microsoft.Compute"
  type                       = "CustomScriptExtension"
  type_handler_version       = "1.10"
  auto_upgrade_minor_version = true
  tags                       = var.tags

  settings = jsonencode({
    commandToExecute = local.setup_command
  })

  # The script initialises the data disk: it must be attached first.
  depends_on = [azurerm_virtual_machine_data_disk_attachment.vms]
}

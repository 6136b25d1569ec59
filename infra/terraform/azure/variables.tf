# Credentials, the subscription, the region and the address allowed in have
# no defaults: give them in a terraform.tfvars kept out of version control
# (see terraform.tfvars.example) or as TF_VAR_<name> environment variables,
# which is the way for the password.

variable "subscription_id" {
  type        = string
  description = "The Azure subscription to create the host in."
}

variable "location" {
  type        = string
  description = "The Azure region, e.g. \"westeurope\". The size in vm_size must be offered there."
}

variable "allowed_cidr" {
  type        = string
  description = "The one address range allowed to reach the host (RDP and the hvkube API), e.g. your own public address as \"203.0.113.7/32\"."

  validation {
    condition     = can(cidrhost(var.allowed_cidr, 0)) && !contains(["0.0.0.0/0", "::/0"], var.allowed_cidr)
    error_message = "The allowed_cidr must be an address range in CIDR form, and not the whole internet."
  }
}

variable "admin_username" {
  type        = string
  description = "The host's administrator account."

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9._-]{0,19}$", var.admin_username)) && !contains(["admin", "administrator", "guest", "root", "user", "test"], lower(var.admin_username))
    error_message = "The admin_username must be 1-20 letters, digits, '.', '_' or '-', start with a letter, and not be a name Azure refuses (admin, administrator, ...)."
  }
}

variable "admin_password" {
  type        = string
  sensitive   = true
  description = "The host administrator's password (Azure wants 12 to 123 characters, of three kinds among lower case, upper case, digits and symbols)."

  validation {
    condition     = length(var.admin_password) >= 12 && length(var.admin_password) <= 123
    error_message = "The admin_password must have 12 to 123 characters."
  }
}

variable "prefix" {
  type        = string
  default     = "hvkube"
  description = "Prefix of every resource's name."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,20}$", var.prefix))
    error_message = "The prefix must be 2-21 lower-case letters, digits or '-', starting with a letter."
  }
}

variable "vm_size" {
  type        = string
  default     = "Standard_D8s_v5"
  description = "The host's size. It must support nested virtualization: the Dv3/Dsv3, Dv4/Dsv4, Dv5/Dsv5 and Ev3-Ev5 families do. 8 vCPU and 32 GiB hold about five 4 GB Windows 11 sandboxes; Standard_D16s_v5 or Standard_E16s_v5 hold more. Sizes with a temporary disk (Dsv3, Ddsv5, ...) give it D:; then set data_drive_letter."
}

variable "os_disk_size_gb" {
  type        = number
  default     = 128
  description = "Size of the host's system disk in GiB."
}

variable "data_disk_size_gb" {
  type        = number
  default     = 512
  description = "Size of the data disk for sandbox VMs and template images, in GiB. Plan for the templates plus, per sandbox, its disk writes and about twice its memory (a saved state and the clean checkpoint's memory)."
}

variable "data_disk_storage_type" {
  type        = string
  default     = "Premium_LRS"
  description = "Storage type of the data disk (Premium_LRS, StandardSSD_LRS, ...). Premium needs a size with an 's' (D8s_v5)."
}

variable "data_drive_letter" {
  type        = string
  default     = "D"
  description = "The drive letter of the data disk in the host."

  validation {
    condition     = can(regex("^[D-Z]$", var.data_drive_letter))
    error_message = "The data_drive_letter must be one upper-case letter from D to Z."
  }
}

variable "api_port" {
  type        = number
  default     = 8080
  description = "The port hvkube serve listens on (--addr 0.0.0.0:PORT), opened to allowed_cidr."

  validation {
    condition     = var.api_port >= 1 && var.api_port <= 65535 && var.api_port != 3389 && floor(var.api_port) == var.api_port
    error_message = "The api_port must be a TCP port other than 3389."
  }
}

variable "vnet_cidr" {
  type        = string
  default     = "10.42.0.0/16"
  description = "Address space of the host's virtual network. Must not overlap 192.168.100.0/24, the sandboxes' network inside the host."
}

variable "subnet_cidr" {
  type        = string
  default     = "10.42.1.0/24"
  description = "The host's subnet, inside vnet_cidr."
}

variable "tags" {
  type        = map(string)
  default     = { app = "hvkube" }
  description = "Tags on every resource."
}

# Variables of the Windows 11 image build (windows11.pkr.hcl).
#
# Nothing secret or specific to one machine has a default: give those with
# -var, in a *.auto.pkrvars.hcl file kept out of version control (see
# windows11.pkrvars.hcl.example), or as PKR_VAR_<name> environment variables,
# which is the way for the password.

variable "iso_path" {
  type        = string
  description = "The Windows 11 installation ISO: a local path or a URL Packer can fetch."
}

variable "iso_checksum" {
  type        = string
  description = "The ISO's checksum with its type, e.g. \"sha256:<hex>\" (Get-FileHash -Algorithm SHA256 prints it)."
}

variable "switch_name" {
  type        = string
  description = "The Hyper-V virtual switch of the build VM (\"Default Switch\" on Windows 11; \"hvkube\" on the Azure host from infra/terraform/azure). Packer reaches the guest's WinRM through it."
}

variable "guest_user" {
  type        = string
  default     = "agent"
  description = "The desktop user: a local administrator who is logged on automatically. hvkube's guest credential file names this account for PowerShell Direct; a Template's spec.guest.user names it too."

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9._-]{0,19}$", var.guest_user)) && !contains(["administrator", "guest", "defaultaccount", "wdagutilityaccount"], lower(var.guest_user))
    error_message = "The guest_user must be a new local account name: a letter, then up to 19 letters, digits, '.', '_' or '-'; not a built-in account."
  }
}

variable "guest_password" {
  type        = string
  sensitive   = true
  description = "The desktop user's password. It ends up in the image (Windows needs it for the automatic logon) and in hvkube's guest credential file: use one that is used nowhere else."

  validation {
    condition     = length(var.guest_password) >= 8
    error_message = "The guest_password must have at least 8 characters."
  }
}

variable "product_key" {
  type        = string
  default     = ""
  sensitive   = true
  description = "A product key for the edition in image_name, or empty. Retail media need one to pick the edition (the edition's generic installation key will do); evaluation media need none."

  validation {
    condition     = var.product_key == "" || can(regex("^[A-Z0-9]{5}(-[A-Z0-9]{5}){4}$", var.product_key))
    error_message = "The product_key must be empty or five groups of five letters or digits separated by '-'."
  }
}

variable "image_name" {
  type        = string
  default     = "Windows 11 Pro"
  description = "The edition to install, as the ISO's install.wim names it (dism /Get-WimInfo /WimFile:<drive>:\\sources\\install.wim lists them), e.g. \"Windows 11 Enterprise\" or \"Windows 11 Enterprise Evaluation\"."

  validation {
    condition     = can(regex("^[A-Za-z0-9 ._()-]+$", var.image_name))
    error_message = "The image_name may hold letters, digits, spaces and . _ ( ) - only."
  }
}

variable "ui_language" {
  type        = string
  default     = "en-US"
  description = "The language of the ISO, used for the user interface and locales."

  validation {
    condition     = can(regex("^[a-z]{2,3}-[A-Za-z]{2,4}$", var.ui_language))
    error_message = "The ui_language must be a language tag such as en-US."
  }
}

variable "input_locale" {
  type        = string
  default     = "0409:00000409"
  description = "The keyboard layout. hvkube types through scan codes of a US keyboard: keep US English (0409:00000409) unless you know why not."

  validation {
    condition     = can(regex("^[A-Za-z0-9:;{}-]+$", var.input_locale))
    error_message = "The input_locale must be a layout such as 0409:00000409 or a language tag such as en-US."
  }
}

variable "time_zone" {
  type        = string
  default     = "UTC"
  description = "The guest's time zone, by its Windows name (tzutil /l lists them), e.g. \"UTC\" or \"W. Europe Standard Time\"."

  validation {
    condition     = can(regex("^[A-Za-z0-9 ._+()-]+$", var.time_zone))
    error_message = "The time_zone must be a Windows time zone name."
  }
}

variable "cpus" {
  type        = number
  default     = 2
  description = "Virtual processors of the build VM (Windows 11 needs 2). Sandboxes take theirs from the Template."
}

variable "memory_mb" {
  type        = number
  default     = 4096
  description = "Memory of the build VM in MB (Windows 11 needs 4096). Sandboxes take theirs from the Template."
}

variable "disk_size_mb" {
  type        = number
  default     = 65536
  description = "Size of the system disk in MB (Windows 11 needs 64 GB). The VHDX is dynamic: it holds what is written, not this size."
}

variable "vm_name" {
  type        = string
  default     = "win11-image-build"
  description = "Name of the temporary build VM, and of the VHDX it leaves. Not hvkube- anything: hvkube owns the VMs whose names start so."
}

variable "output_directory" {
  type        = string
  default     = "output-windows11"
  description = "Where the VHDX is left, under \"Virtual Hard Disks\". Must not exist or be empty."
}

variable "headless" {
  type        = bool
  default     = true
  description = "false opens a console window (vmconnect) on the build VM, to watch it."
}

variable "winrm_timeout" {
  type        = string
  default     = "2h"
  description = "How long Packer waits for Windows to install and open WinRM."
}

variable "enable_rdp" {
  type        = bool
  default     = true
  description = "Turn Remote Desktop on in the guest (Pro and Enterprise editions). hvkube does not use it: screen and input go through Hyper-V."
}

variable "chocolatey_packages" {
  type        = list(string)
  default     = []
  description = "Chocolatey packages to install into the image, e.g. [\"googlechrome\", \"7zip\"]. Empty: Chocolatey is not installed. Installing downloads from the internet, so the build VM's switch must reach it."

  validation {
    condition     = length([for p in var.chocolatey_packages : p if !can(regex("^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", p))]) == 0
    error_message = "Each Chocolatey package must be a package id: letters, digits, '.', '_' or '-'."
  }
}

variable "chocolatey_install_url" {
  type        = string
  default     = "https://community.chocolatey.org/install.ps1"
  description = "Chocolatey's install script, used only when chocolatey_packages is not empty (an internal mirror's address works too)."
}

variable "sysprep_mode_vm" {
  type        = bool
  default     = true
  description = "Generalise with sysprep /mode:vm, which skips hardware detection at each sandbox's first boot. Only for images that run on Hyper-V, as hvkube's do."
}

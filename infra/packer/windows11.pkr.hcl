# The Windows 11 golden image for hvkube's Hyper-V backend.
#
# A Generation 2 VM with Secure Boot and a virtual TPM (Windows 11 Setup
# asks for both) installs Windows from the ISO without questions
# (answer/autounattend.pkrtpl.xml), opens WinRM for Packer, and is set up by
# the scripts in scripts/: the desktop user (a local administrator, logged on
# automatically; PowerShell Direct takes its credentials), a maximised
# PowerShell window at logon, no screen lock, sleep or screen saver, no
# first-run screens, Windows Update paused, Remote Desktop on, optional
# Chocolatey packages. sysprep then generalises it and shuts it down with an
# answer file (answer/sysprep-unattend.pkrtpl.xml) that brings the automatic
# logon back at each sandbox's first boot. What is left is one VHDX:
# <output_directory>/Virtual Hard Disks/<vm_name>.vhdx, a Template's
# spec.hyperv.vhdxPath.
#
# Run on the Hyper-V host, in an elevated shell (README.md):
#   packer init .
#   packer build .

packer {
  required_version = ">= 1.10.0"
  required_plugins {
    hyperv = {
      # 1.1.1 added enable_tpm.
      source  = "github.com/hashicorp/hyperv"
      version = ">= 1.1.1"
    }
  }
}

locals {
  # Windows Setup takes a hidden password as base64 of its UTF-16LE text
  # with "Password" appended. That also keeps any character of it from
  # breaking the answer file's XML. It hides the password from a glance,
  # nothing more.
  answer_password = textencodebase64("${var.guest_password}Password", "UTF-16LE")

  answer_values = {
    guest_user   = var.guest_user
    password     = local.answer_password
    product_key  = var.product_key
    image_name   = var.image_name
    ui_language  = var.ui_language
    input_locale = var.input_locale
    time_zone    = var.time_zone
  }

  # sysprep reads its answer file from here; each sandbox's first boot
  # deletes it (scripts/setup-complete.ps1).
  sysprep_unattend = "C:\\Windows\\Temp\\hvkube-sysprep.xml"

  sysprep_command = join(" ", compact([
    "C:\\Windows\\System32\\Sysprep\\sysprep.exe",
    "/generalize /oobe /shutdown /quiet",
    var.sysprep_mode_vm ? "/mode:vm" : "",
    "/unattend:${local.sysprep_unattend}",
  ]))
}

source "hyperv-iso" "windows11" {
  iso_url      = var.iso_path
  iso_checksum = var.iso_checksum

  generation           = 2
  enable_secure_boot   = true
  secure_boot_template = "MicrosoftWindows"
  enable_tpm           = true

  cpus                  = var.cpus
  memory                = var.memory_mb
  enable_dynamic_memory = false
  disk_size             = var.disk_size_mb
  switch_name           = var.switch_name
  vm_name               = var.vm_name
  headless              = var.headless

  # Only the VHDX is wanted: hvkube makes its own VMs around it.
  skip_export      = true
  output_directory = var.output_directory

  # A second CD with the answer file: Windows Setup looks for
  # autounattend.xml at the root of removable media. Making the CD needs
  # oscdimg (Windows ADK, Deployment Tools) or xorriso on PATH.
  cd_label = "HVKUBE"
  cd_content = {
    "autounattend.xml"        = templatefile("${path.root}/answer/autounattend.pkrtpl.xml", local.answer_values)
    "hvkube-enable-winrm.ps1" = file("${path.root}/scripts/enable-winrm.ps1")
  }

  # "Press any key to boot from CD or DVD" shows for a few seconds only.
  first_boot_device = "DVD"
  boot_wait         = "1s"
  boot_command      = ["<spacebar><wait1s><spacebar><wait1s><spacebar>"]

  communicator   = "winrm"
  winrm_username = var.guest_user
  winrm_password = var.guest_password
  winrm_timeout  = var.winrm_timeout

  # sysprep shuts the VM down when it is done.
  shutdown_command = local.sysprep_command
  shutdown_timeout = "1h"
}

build {
  name    = "hvkube-windows11"
  sources = ["source.hyperv-iso.windows11"]

  provisioner "powershell" {
    environment_vars = ["HVKUBE_GUEST_USER=${var.guest_user}"]
    scripts = [
      "${path.root}/scripts/desktop-user.ps1",
      "${path.root}/scripts/guest-services.ps1",
      "${path.root}/scripts/desktop.ps1",
      "${path.root}/scripts/windows-update.ps1",
    ]
  }

  provisioner "powershell" {
    environment_vars = ["HVKUBE_ENABLE_RDP=${var.enable_rdp}"]
    script           = "${path.root}/scripts/remote-desktop.ps1"
  }

  provisioner "powershell" {
    environment_vars = [
      "HVKUBE_CHOCOLATEY_PACKAGES=${join(" ", var.chocolatey_packages)}",
      "HVKUBE_CHOCOLATEY_INSTALL_URL=${var.chocolatey_install_url}",
    ]
    script = "${path.root}/scripts/software.ps1"
  }

  # Windows runs Setup\Scripts\SetupComplete.cmd once, as SYSTEM, at the
  # end of each sandbox's first boot.
  provisioner "powershell" {
    inline = ["New-Item -ItemType Directory -Force -Path C:\\Windows\\Setup\\Scripts | Out-Null"]
  }

  provisioner "file" {
    source      = "${path.root}/scripts/SetupComplete.cmd"
    destination = "C:\\Windows\\Setup\\Scripts\\SetupComplete.cmd"
  }

  provisioner "file" {
    source      = "${path.root}/scripts/setup-complete.ps1"
    destination = "C:\\Windows\\Setup\\Scripts\\hvkube-setup-complete.ps1"
  }

  provisioner "file" {
    content     = templatefile("${path.root}/answer/sysprep-unattend.pkrtpl.xml", local.answer_values)
    destination = local.sysprep_unattend
  }

  provisioner "powershell" {
    script = "${path.root}/scripts/prepare-sysprep.ps1"
  }
}

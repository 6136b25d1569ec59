package qemu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hvkube/hvkube/internal/api"
	guestos "github.com/hvkube/hvkube/internal/guest"
	"github.com/hvkube/hvkube/internal/hostpath"
)

// imageInfo is the image.json an image builder writes beside the image
// (images/linux-desktop/build.sh); only the fields hvkube uses are here.
type imageInfo struct {
	Name          string            `json:"name"`
	Hash          string            `json:"hash"`
	Kernel        string            `json:"kernel"`
	Initrd        string            `json:"initrd"`
	Disk          string            `json:"disk"`
	KernelCmdline string            `json:"kernelCmdline"`
	Resolution    string            `json:"resolution"`
	MemoryMB      int               `json:"memoryMB"`
	CPUs          int               `json:"cpus"`
	Machine       string            `json:"machine"`
	GuestUser     string            `json:"guestUser"`
	Display       map[string]string `json:"display"`
	Helpers       map[string]string `json:"helpers"`
	// Network is the NIC the guest configures at boot when it has one;
	// an image without it gets none.
	Network *imageNetwork `json:"network"`
	// Automation is the browser endpoints the guest offers automation
	// clients (the browser-desktop image's Chromium); none when absent.
	Automation *api.Automation `json:"automation"`
}

// imageNetwork is image.json's network: how the guest configures its NIC
// (statically, at boot), which the guest network must match.
type imageNetwork struct {
	Model        string `json:"model"`
	MAC          string `json:"mac"`
	Address      string `json:"address"`
	PrefixLength int    `json:"prefixLength"`
	Gateway      string `json:"gateway"`
	DNS          string `json:"dns"`
}

// image is a resolved template image: absolute paths and the guest facts.
type image struct {
	Dir        string
	Kernel     string
	Initrd     string
	Disk       string
	Append     string
	Resolution string
	Machine    string
	MemoryMB   int
	CPUs       int
	// Env talks to the guest's X display from guest-exec.
	Env     []string
	Helpers map[string]string
	// Network is what the image declares of its guest's NIC; nil when it
	// declares none (no image.json, or one from before guest networks).
	Network *imageNetwork `json:",omitempty"`
	// Automation is what the image declares for automation clients.
	Automation *api.Automation `json:",omitempty"`
}

// resolveImage finds a template's image: by name under imageDir (NAME/current,
// as `make image` leaves it) or by explicit paths.
// Explicit paths must lie under roots.
func resolveImage(imageDir string, roots hostpath.Roots, q api.QEMUImage) (image, error) {
	if q.Image != "" {
		link := filepath.Join(imageDir, q.Image, "current")
		dir, err := filepath.EvalSymlinks(link)
		if err != nil {
			return image{}, fmt.Errorf("image %q is not built (no %s): run make image: %w", q.Image, link, api.ErrNotFound)
		}
		b, err := os.ReadFile(filepath.Join(dir, "image.json"))
		if err != nil {
			return image{}, fmt.Errorf("image %q: %w", q.Image, err)
		}
		var info imageInfo
		if err := json.Unmarshal(b, &info); err != nil {
			return image{}, fmt.Errorf("image %q: image.json: %w", q.Image, err)
		}
		img := image{
			Dir:        dir,
			Kernel:     filepath.Join(dir, info.Kernel),
			Disk:       filepath.Join(dir, info.Disk),
			Append:     info.KernelCmdline,
			Resolution: info.Resolution,
			Machine:    info.Machine,
			MemoryMB:   info.MemoryMB,
			CPUs:       info.CPUs,
			Helpers:    map[string]string{},
		}
		if info.Initrd != "" {
			img.Initrd = filepath.Join(dir, info.Initrd)
		}
		for k, v := range info.Display {
			img.Env = append(img.Env, k+"="+v)
		}
		for k, v := range guestos.DefaultHelpers {
			img.Helpers[k] = v
		}
		for k, v := range info.Helpers {
			img.Helpers[k] = v
		}
		if q.KernelArgs != "" {
			img.Append = q.KernelArgs
		}
		img.Network = info.Network
		img.Automation = info.Automation
		return img.withDefaults(), nil
	}
	img := image{Kernel: q.Kernel, Initrd: q.Initrd, Disk: q.Disk, Append: q.KernelArgs, Helpers: guestos.DefaultHelpers,
		Env: []string{"DISPLAY=:0", "XAUTHORITY=/home/agent/.Xauthority"}}
	if img.Kernel == "" {
		return image{}, fmt.Errorf("spec.qemu.kernel: required with spec.qemu.disk (hvkube boots images with -kernel): %w", api.ErrInvalid)
	}
	for _, f := range []struct{ field, p string }{{"spec.qemu.kernel", img.Kernel}, {"spec.qemu.initrd", img.Initrd}, {"spec.qemu.disk", img.Disk}} {
		if f.p == "" {
			continue
		}
		if err := roots.Check(f.field, f.p); err != nil {
			return image{}, err
		}
		if _, err := os.Stat(f.p); err != nil {
			return image{}, fmt.Errorf("%s: %w", f.field, err)
		}
	}
	return img.withDefaults(), nil
}

func (img image) withDefaults() image {
	if img.Machine == "" {
		img.Machine = "q35"
	}
	if img.Resolution == "" {
		img.Resolution = api.DefaultResolution
	}
	if img.Append == "" {
		img.Append = "console=ttyS0 root=/dev/vda rw quiet"
	}
	return img
}

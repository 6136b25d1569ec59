//go:build windows

package hyperv

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/conformance"
	"github.com/hvkube/hvkube/internal/guest"
	"github.com/hvkube/hvkube/internal/hostpath"
	"github.com/hvkube/hvkube/internal/powershell"
)

// TestConformance runs the backend conformance suite on this host's
// Hyper-V. It needs HVKUBE_HYPERV_VHDX, a Windows VHDX that boots to a
// logged-on desktop with the integration services and Remote Desktop on,
// and HVKUBE_HYPERV_CREDENTIALS, a JSON file {"user": ..., "password": ...}
// of an administrator account in it; HVKUBE_HYPERV_SWITCH names the virtual
// switch when the host has no "Default Switch" (Windows Server). It runs as
// an administrator.
func TestConformance(t *testing.T) {
	vhdx := os.Getenv("HVKUBE_HYPERV_VHDX")
	cred := os.Getenv("HVKUBE_HYPERV_CREDENTIALS")
	if vhdx == "" || cred == "" {
		t.Skip("set HVKUBE_HYPERV_VHDX (a Windows VHDX) and HVKUBE_HYPERV_CREDENTIALS (JSON {\"user\", \"password\"} of its account) to run the Hyper-V conformance suite: see docs/windows.md")
	}
	roots, err := hostpath.NewRoots(filepath.Dir(vhdx))
	if err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, conformance.Options{
		New: func(t *testing.T, dir string) backend.Backend {
			b, err := New(context.Background(), Config{Dir: dir, CredentialFile: cred, AllowedRoots: roots, Switch: os.Getenv("HVKUBE_HYPERV_SWITCH")})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Template: backend.TemplateSpec{
			ID: "hyperv-conformance", HyperV: &api.HyperVImage{VHDXPath: vhdx}, GuestOS: "windows",
			CPU: 2, MemoryMB: 4096, Resolution: "1280x800",
		},
		// A crash, as near as Hyper-V has one: the VM turned off.
		Kill: func(t *testing.T, bb backend.Backend, id string) {
			b := bb.(*Backend)
			if err := b.run(context.Background(), scriptStopVM, powershell.Args{"Name": vmName(id)}, nil); err != nil {
				t.Fatal(err)
			}
		},
		Leftovers: func(t *testing.T, bb backend.Backend, id string, before backend.Info) []string {
			b := bb.(*Backend)
			var left []string
			var recs []vmRecord
			if err := b.run(context.Background(), scriptGetVMs, powershell.Args{"Name": vmName(id)}, &recs); err != nil {
				left = append(left, "Get-VM: "+err.Error())
			}
			for _, r := range recs {
				left = append(left, "VM "+r.Name)
			}
			if _, err := os.Stat(b.sbDir(id)); err == nil {
				left = append(left, b.sbDir(id))
			}
			return left
		},
		OS:      guest.WindowsOS{},
		Timeout: 60 * time.Minute,
	})
}

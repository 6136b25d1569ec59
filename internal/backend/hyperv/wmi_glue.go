package hyperv

import (
	"context"
	"fmt"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/powershell"
)

// The screen and the input devices are reached through WMI
// (root\virtualization\v2) by package wmi. These are its entry points.

var errNoWMI = fmt.Errorf("screen and input through WMI: %w", api.ErrUnsupported)

// TODO lead: replace with wmi.Screenshot
func wmiScreenshot(ctx context.Context, r powershell.Runner, vmName string, opts backend.ScreenshotOptions) ([]byte, string, error) {
	return nil, "", errNoWMI
}

// TODO lead: replace with wmi.ScreenSize
func wmiScreenSize(ctx context.Context, r powershell.Runner, vmName string) (int, int, error) {
	return 0, 0, errNoWMI
}

// TODO lead: replace with wmi.SendInput
func wmiSendInput(ctx context.Context, r powershell.Runner, vmName string, evs []backend.InputEvent) error {
	return errNoWMI
}

// TODO lead: replace with wmi.TypeText
func wmiTypeText(ctx context.Context, r powershell.Runner, vmName, text string) error {
	return errNoWMI
}

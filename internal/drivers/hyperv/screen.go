package hyperv

import (
	"context"
	"errors"
	"fmt"
	"github.com/hvkube/hvkube/internal/drivers/hyperv/wmi"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

var (
	_ backend.Screen    = (*Backend)(nil)
	_ backend.Input     = (*Backend)(nil)
	_ backend.TextInput = (*Backend)(nil)
	_ backend.Cursor    = (*Backend)(nil)
)

// Screenshot implements backend.Screen: Hyper-V's own picture of the VM's
// screen (Msvm_VirtualSystemManagementService GetVirtualSystemThumbnailImage),
// which needs nothing in the guest.
func (b *Backend) Screenshot(ctx context.Context, id string, opts backend.ScreenshotOptions) ([]byte, string, error) {
	if err := checkID(id); err != nil {
		return nil, "", err
	}
	return wmi.Screenshot(ctx, b.cfg.Runner, vmName(id), opts)
}

// ScreenSize implements backend.Screen: the VM's screen as Hyper-V sees
// it, or else the resolution the sandbox was made with.
func (b *Backend) ScreenSize(ctx context.Context, id string) (int, int, error) {
	if err := checkID(id); err != nil {
		return 0, 0, err
	}
	w, h, err := wmi.ScreenSize(ctx, b.cfg.Runner, vmName(id))
	if !errors.Is(err, api.ErrUnsupported) {
		return w, h, err
	}
	m, merr := b.sandboxMeta(ctx, id)
	if merr != nil {
		return 0, 0, merr
	}
	return api.ParseResolution(m.resolution)
}

// SendInput implements backend.Input through the VM's synthetic keyboard
// and mouse (Msvm_Keyboard, Msvm_SyntheticMouse). Events are checked
// against the sandbox's resolution first.
func (b *Backend) SendInput(ctx context.Context, id string, evs []backend.InputEvent) error {
	if err := checkID(id); err != nil {
		return err
	}
	m, err := b.sandboxMeta(ctx, id)
	if err != nil {
		return err
	}
	w, h, err := api.ParseResolution(m.resolution)
	if err != nil {
		return fmt.Errorf("sandbox %s: resolution %q: %w", id, m.resolution, err)
	}
	if err := wmi.CheckEvents(evs, w, h); err != nil {
		return err
	}
	return wmi.SendInput(ctx, b.cfg.Runner, vmName(id), evs)
}

// TypeText implements backend.TextInput: the synthetic keyboard types the
// text if it can, else the guest OS does.
func (b *Backend) TypeText(ctx context.Context, id, text string) error {
	if err := checkID(id); err != nil {
		return err
	}
	err := wmi.TypeText(ctx, b.cfg.Runner, vmName(id), text)
	if !errors.Is(err, api.ErrUnsupported) {
		return err
	}
	osys, err := b.guestOS(ctx, id)
	if err != nil {
		return err
	}
	return osys.TypeText(ctx, b.runner(id), text)
}

// CursorPosition implements backend.Cursor: the guest OS says where its
// pointer is.
func (b *Backend) CursorPosition(ctx context.Context, id string) (int, int, error) {
	if err := checkID(id); err != nil {
		return 0, 0, err
	}
	osys, err := b.guestOS(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	return osys.Cursor(ctx, b.runner(id))
}

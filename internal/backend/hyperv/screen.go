package hyperv

import (
	"context"
	"errors"
	"fmt"
	"github.com/hvkube/hvkube/internal/backend/hyperv/wmi"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
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
	if err := checkEvents(evs, w, h); err != nil {
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

// checkEvents checks raw events against a width x height screen.
func checkEvents(evs []backend.InputEvent, w, h int) error {
	for i, e := range evs {
		switch e.Kind {
		case backend.EventMove:
			if err := display.CheckPoint(e.X, e.Y, w, h); err != nil {
				return api.Invalid(fmt.Sprintf("events[%d]", i), "%v", err)
			}
		case backend.EventButton:
			switch e.Button {
			case backend.ButtonLeft, backend.ButtonRight, backend.ButtonMiddle, backend.ButtonBack, backend.ButtonForward,
				backend.ButtonWheelUp, backend.ButtonWheelDown, backend.ButtonWheelLeft, backend.ButtonWheelRight:
			default:
				return api.Invalid(fmt.Sprintf("events[%d].button", i), "unknown button %q", e.Button)
			}
		case backend.EventKey:
			if !display.IsQCode(e.Key) {
				return api.Invalid(fmt.Sprintf("events[%d].key", i), "unknown key %q", e.Key)
			}
		default:
			return api.Invalid(fmt.Sprintf("events[%d].kind", i), "unknown event kind %q", e.Kind)
		}
	}
	return nil
}

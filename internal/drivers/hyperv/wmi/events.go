package wmi

import (
	"fmt"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
)

// buttonIndex is each button's 1-based ButtonIndex on Msvm_SyntheticMouse,
// which reports five buttons (NumberOfButtons = 5). Left, right and middle
// are 1, 2 and 3; back and forward are taken to be the fourth and fifth
// buttons, as a HID mouse orders them (Windows' XBUTTON1 and XBUTTON2).
var buttonIndex = map[string]uint32{
	backend.ButtonLeft:    1,
	backend.ButtonRight:   2,
	backend.ButtonMiddle:  3,
	backend.ButtonBack:    4,
	backend.ButtonForward: 5,
}

// wheelNotch is the Msvm_SyntheticMouse.SetScrollPosition delta of one
// wheel notch: Windows' WHEEL_DELTA, positive away from the user (up).
const wheelNotch = 120

// op is one call the send-input script makes: the events of a SendInput
// call translated to the devices' terms.
type op struct {
	// I is the index of the event it comes from, for errors.
	I int `json:"i"`
	// Op is move (SetAbsolutePosition), button (SetButtonState), key
	// (PressKey or ReleaseKey) or scroll (SetScrollPosition).
	Op string `json:"op"`
	// X and Y are a move's position in desktop pixels.
	X int `json:"x"`
	Y int `json:"y"`
	// Code is a key's virtual-key code or a button's index.
	Code uint32 `json:"code"`
	// Down presses a key or a button; false releases it.
	Down bool `json:"down"`
	// Delta is a scroll's SetScrollPosition delta.
	Delta int `json:"delta"`
}

// CheckEvents checks raw input events as SendInput would deliver them to a
// width×height screen: known kinds, buttons and keys, and positions on the
// screen. With width or height 0 only negative positions are refused (the
// screen's size is then checked by SendInput's script against the VM's
// current resolution). Unknown values are api.ErrInvalid naming the field
// ("events[2].key"); values the Hyper-V devices cannot deliver (horizontal
// wheel, keys without a virtual-key code) are api.ErrUnsupported.
func CheckEvents(evs []backend.InputEvent, width, height int) error {
	_, err := opsOf(evs, width, height)
	return err
}

// opsOf translates and checks events (see CheckEvents).
func opsOf(evs []backend.InputEvent, width, height int) ([]op, error) {
	ops := make([]op, 0, len(evs))
	for i, e := range evs {
		switch e.Kind {
		case backend.EventMove:
			if width > 0 && height > 0 {
				if err := display.CheckPoint(e.X, e.Y, width, height); err != nil {
					return nil, api.Invalid(fmt.Sprintf("events[%d]", i), "%v", err)
				}
			} else if e.X < 0 || e.Y < 0 {
				return nil, api.Invalid(fmt.Sprintf("events[%d]", i), "coordinate [%d, %d] is negative", e.X, e.Y)
			}
			ops = append(ops, op{I: i, Op: "move", X: e.X, Y: e.Y})
		case backend.EventButton:
			switch e.Button {
			case backend.ButtonWheelUp, backend.ButtonWheelDown:
				// The wheel turns one notch per press; its release is
				// nothing on the synthetic mouse.
				if e.Down {
					d := wheelNotch
					if e.Button == backend.ButtonWheelDown {
						d = -wheelNotch
					}
					ops = append(ops, op{I: i, Op: "scroll", Delta: d})
				}
			case backend.ButtonWheelLeft, backend.ButtonWheelRight:
				return nil, fmt.Errorf("events[%d].button: %q: the Hyper-V synthetic mouse has only a vertical wheel: %w", i, e.Button, api.ErrUnsupported)
			default:
				idx, ok := buttonIndex[e.Button]
				if !ok {
					return nil, api.Invalid(fmt.Sprintf("events[%d].button", i), "unknown button %q", e.Button)
				}
				ops = append(ops, op{I: i, Op: "button", Code: idx, Down: e.Down})
			}
		case backend.EventKey:
			if !display.IsQCode(e.Key) {
				return nil, api.Invalid(fmt.Sprintf("events[%d].key", i), "unknown key %q", e.Key)
			}
			vk, ok := VirtualKey(e.Key)
			if !ok {
				why := "is not in the Hyper-V key map"
				if unsupportedKeys[e.Key] {
					why = "has no Windows virtual-key code"
				}
				return nil, fmt.Errorf("events[%d].key: %q %s: %w", i, e.Key, why, api.ErrUnsupported)
			}
			ops = append(ops, op{I: i, Op: "key", Code: vk, Down: e.Down})
		default:
			return nil, api.Invalid(fmt.Sprintf("events[%d].kind", i), "unknown event kind %q", e.Kind)
		}
	}
	return ops, nil
}

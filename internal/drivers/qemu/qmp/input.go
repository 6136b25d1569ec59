package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// AbsMax is the largest absolute pointer coordinate on either axis; 0 is the
// top or left edge of the screen and AbsMax the bottom or right edge.
const AbsMax = 32767

// Button is a pointer button (QAPI InputButton).
type Button string

// Pointer buttons. The wheel "buttons" are one notch of scrolling each: send
// a down and an up per notch.
const (
	ButtonLeft       Button = "left"
	ButtonMiddle     Button = "middle"
	ButtonRight      Button = "right"
	ButtonWheelUp    Button = "wheel-up"
	ButtonWheelDown  Button = "wheel-down"
	ButtonWheelLeft  Button = "wheel-left"
	ButtonWheelRight Button = "wheel-right"
	ButtonSide       Button = "side"
	ButtonExtra      Button = "extra"
)

// Event kinds of an InputEvent.
const (
	InputKey = "key" // keyboard key, by QKeyCode name
	InputBtn = "btn" // pointer button
	InputAbs = "abs" // absolute pointer position on one axis
)

// InputEvent is one event for InputSendEvent. Build it with KeyDown, KeyUp,
// ButtonDown, ButtonUp or AbsMove; it marshals to the QAPI InputEvent union.
type InputEvent struct {
	// Type is InputKey, InputBtn or InputAbs.
	Type string
	// Key is the QKeyCode name (e.g. "ctrl", "a", "ret") of a key event.
	Key string
	// Button is the button of a btn event.
	Button Button
	// Axis is "x" or "y" for an abs event.
	Axis string
	// Value is the coordinate of an abs event, 0..AbsMax.
	Value int
	// Down is true for a press and false for a release (key and btn events).
	Down bool
}

// KeyDown returns the press of the key named by a QKeyCode (e.g. "shift",
// "a", "ret", "kp_enter").
func KeyDown(qcode string) InputEvent { return InputEvent{Type: InputKey, Key: qcode, Down: true} }

// KeyUp returns the release of the key named by a QKeyCode.
func KeyUp(qcode string) InputEvent { return InputEvent{Type: InputKey, Key: qcode} }

// ButtonDown returns the press of a pointer button.
func ButtonDown(b Button) InputEvent { return InputEvent{Type: InputBtn, Button: b, Down: true} }

// ButtonUp returns the release of a pointer button.
func ButtonUp(b Button) InputEvent { return InputEvent{Type: InputBtn, Button: b} }

// AbsMove returns the two events that move an absolute pointer (the USB
// tablet) to x, y, each in 0..AbsMax.
func AbsMove(x, y int) []InputEvent {
	return []InputEvent{
		{Type: InputAbs, Axis: "x", Value: x},
		{Type: InputAbs, Axis: "y", Value: y},
	}
}

// MarshalJSON encodes the event as a QAPI InputEvent.
func (e InputEvent) MarshalJSON() ([]byte, error) {
	type keyValue struct {
		Type string `json:"type"`
		Data string `json:"data"`
	}
	var data any
	switch e.Type {
	case InputKey:
		data = struct {
			Key  keyValue `json:"key"`
			Down bool     `json:"down"`
		}{keyValue{"qcode", e.Key}, e.Down}
	case InputBtn:
		data = struct {
			Button Button `json:"button"`
			Down   bool   `json:"down"`
		}{e.Button, e.Down}
	case InputAbs:
		data = struct {
			Axis  string `json:"axis"`
			Value int    `json:"value"`
		}{e.Axis, e.Value}
	default:
		return nil, fmt.Errorf("input event type %q not supported", e.Type)
	}
	return json.Marshal(struct {
		Type string `json:"type"`
		Data any    `json:"data"`
	}{e.Type, data})
}

func (e InputEvent) validate() error {
	switch e.Type {
	case InputKey:
		if e.Key == "" {
			return errors.New("key event without key")
		}
	case InputBtn:
		if e.Button == "" {
			return errors.New("btn event without button")
		}
	case InputAbs:
		if e.Axis != "x" && e.Axis != "y" {
			return fmt.Errorf("abs event axis %q, want x or y", e.Axis)
		}
		// QEMU does not check the range; a value outside it lands wherever
		// the guest's driver clamps it.
		if e.Value < 0 || e.Value > AbsMax {
			return fmt.Errorf("abs %s value %d out of range 0..%d", e.Axis, e.Value, AbsMax)
		}
	default:
		return fmt.Errorf("input event type %q not supported", e.Type)
	}
	return nil
}

// InputSendEvent sends input events to the guest (input-send-event) as one
// batch; QEMU delivers them to the devices together.
//
// Things the caller must know:
//   - QEMU refuses input while the VM is not running (GenericError "VM not
//     running"), including in the prelaunch and paused states.
//   - Send each state change of a key or button in its own call: a key's down
//     and up in one batch can be merged by the device and lost. A move and a
//     button press may share a batch.
//   - Absolute events go to the USB tablet (-device usb-tablet); buttons go to
//     the current mouse (see QueryMice).
//
// Events are checked before anything is sent; an invalid one (unknown type,
// abs value outside 0..AbsMax) fails the whole call.
func (m *Monitor) InputSendEvent(ctx context.Context, events []InputEvent) error {
	if len(events) == 0 {
		return errors.New("qmp input-send-event: no events")
	}
	for i, e := range events {
		if err := e.validate(); err != nil {
			return fmt.Errorf("qmp input-send-event: event %d: %w", i, err)
		}
	}
	return m.Execute(ctx, "input-send-event", map[string]any{"events": events}, nil)
}

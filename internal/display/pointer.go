package display

import (
	"fmt"
	"strings"
)

// FieldError is an invalid input value, naming the field (as the input API
// and MCP tools spell it) so that callers can report it to the client.
type FieldError struct {
	// Field is the input field, e.g. "button", "scroll_direction",
	// "coordinate".
	Field string
	// Value is the rejected value as the client gave it.
	Value string
	// Reason says what is wrong or what is allowed.
	Reason string
}

// Error implements error: "field: invalid value "v": reason".
func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: invalid value %q: %s", e.Field, e.Value, e.Reason)
}

// Button is a mouse button.
type Button string

// Mouse buttons. The names are also QEMU's InputButton names.
const (
	ButtonLeft   Button = "left"
	ButtonRight  Button = "right"
	ButtonMiddle Button = "middle"
)

// ParseButton parses a button name (left, right or middle; case and
// surrounding space are ignored). A bad name yields a *FieldError for field
// "button".
func ParseButton(s string) (Button, error) {
	switch b := Button(strings.ToLower(strings.TrimSpace(s))); b {
	case ButtonLeft, ButtonRight, ButtonMiddle:
		return b, nil
	}
	return "", &FieldError{Field: "button", Value: s, Reason: "want left, right or middle"}
}

// ScrollDirection is a scroll direction.
type ScrollDirection string

// Scroll directions.
const (
	ScrollUp    ScrollDirection = "up"
	ScrollDown  ScrollDirection = "down"
	ScrollLeft  ScrollDirection = "left"
	ScrollRight ScrollDirection = "right"
)

// ParseScrollDirection parses a scroll direction (up, down, left or right;
// case and surrounding space are ignored). A bad name yields a *FieldError
// for field "scroll_direction".
func ParseScrollDirection(s string) (ScrollDirection, error) {
	switch d := ScrollDirection(strings.ToLower(strings.TrimSpace(s))); d {
	case ScrollUp, ScrollDown, ScrollLeft, ScrollRight:
		return d, nil
	}
	return "", &FieldError{Field: "scroll_direction", Value: s, Reason: "want up, down, left or right"}
}

// WheelButton returns the QEMU InputButton that scrolls one notch in the
// direction: wheel-up, wheel-down, wheel-left or wheel-right (the last two
// are accepted by QEMU 7.2; whether the guest acts on them depends on its
// tablet driver, and shift+wheel is the usual fallback for horizontal
// scrolling in X applications).
func (d ScrollDirection) WheelButton() string { return "wheel-" + string(d) }

// CheckPoint reports whether (x, y) lies on a width×height screen, with a
// *FieldError for field "coordinate" if it does not.
func CheckPoint(x, y, width, height int) error {
	if x < 0 || y < 0 || x >= width || y >= height {
		return &FieldError{
			Field:  "coordinate",
			Value:  fmt.Sprintf("[%d, %d]", x, y),
			Reason: fmt.Sprintf("outside the %dx%d screen", width, height),
		}
	}
	return nil
}

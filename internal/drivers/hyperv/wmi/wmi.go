// Package wmi reaches a Hyper-V VM's screen, keyboard and mouse from the
// host, without RDP and without anything in the guest, through the
// virtualization WMI provider (namespace root\virtualization\v2) called with
// PowerShell's CIM cmdlets.
//
//   - The screen is Msvm_VirtualSystemManagementService's
//     GetVirtualSystemThumbnailImage of the VM's realized
//     Msvm_VirtualSystemSettingData, asked for at the resolution of the VM's
//     Msvm_VideoHead (or at the size a screenshot asks for, scaled by
//     Hyper-V): raw RGB565 pixels, decoded here.
//   - Keys go to Msvm_Keyboard's PressKey and ReleaseKey as Windows
//     virtual-key codes (see VirtualKey), and text to its TypeText.
//   - The pointer is Msvm_SyntheticMouse: SetAbsolutePosition in desktop
//     pixels, SetButtonState for buttons, SetScrollPosition for the wheel.
//
// Devices are found from the VM's Msvm_ComputerSystem, looked up by its
// display name (ElementName). A method that returns anything but 0 (done) or
// 4096 (a job, which is waited for) fails with an error naming the class,
// the method and the code. Each call of this package runs one PowerShell
// script, so the events of a SendInput call cost one process start, however
// many they are. A VM that is not found is api.ErrNotFound.
package wmi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/powershell"
)

// encoder is shared: it pools its buffers and is safe for concurrent use.
var encoder display.Encoder

// Screenshot returns the screen of the VM named vmName, encoded as opts say
// (PNG by default), and its content type. Without opts.Width and
// opts.Height the image has the screen's resolution; with them Hyper-V
// scales the thumbnail to that size (one of them alone keeps the screen's
// aspect ratio). The VM must be running or paused. Bad options are
// api.ErrInvalid naming the option, checked before the VM is asked.
func Screenshot(ctx context.Context, r powershell.Runner, vmName string, opts backend.ScreenshotOptions) ([]byte, string, error) {
	if err := checkName(vmName); err != nil {
		return nil, "", err
	}
	eo, err := encodeOptions(opts)
	if err != nil {
		return nil, "", err
	}
	var out thumbnail
	if err := r.Run(ctx, screenshotScript, powershell.Args{"VMName": vmName, "Width": opts.Width, "Height": opts.Height}, &out); err != nil {
		return nil, "", classify(err)
	}
	img, err := RGB565ToImage(out.Data, out.Width, out.Height)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", screenshotScript.Name, err)
	}
	var buf bytes.Buffer
	if err := encoder.Encode(&buf, img, eo); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), eo.Format.ContentType(), nil
}

// thumbnail is what the screenshot script returns.
type thumbnail struct {
	Width  int    `json:"Width"`
	Height int    `json:"Height"`
	Data   []byte `json:"Data"` // RGB565, base64 in the JSON
}

// encodeOptions checks a screenshot's options and returns the encoder's.
// Width and Height are asked of Hyper-V; the encoder gets them too, so that
// the image comes out at exactly that size whatever Hyper-V returns.
func encodeOptions(opts backend.ScreenshotOptions) (display.EncodeOptions, error) {
	eo := display.EncodeOptions{Format: display.Format(opts.Format), Quality: opts.Quality, Width: opts.Width, Height: opts.Height}
	switch eo.Format {
	case "", display.PNG:
		eo.Format = display.PNG
		if opts.Quality != 0 {
			return eo, api.Invalid("quality", "only applies to jpeg")
		}
	case display.JPEG:
		if opts.Quality < 0 || opts.Quality > 100 {
			return eo, api.Invalid("quality", "%d is out of range 1..100", opts.Quality)
		}
	default:
		return eo, api.Invalid("format", "unknown format %q, want png or jpeg", opts.Format)
	}
	for _, d := range []struct {
		field string
		v     int
	}{{"width", opts.Width}, {"height", opts.Height}} {
		if d.v < 0 || d.v > display.MaxDimension {
			return eo, api.Invalid(d.field, "%d is out of range 0..%d", d.v, display.MaxDimension)
		}
	}
	return eo, nil
}

// ScreenSize returns the resolution of the VM's screen (its Msvm_VideoHead),
// which is also the space of SendInput's pointer positions.
func ScreenSize(ctx context.Context, r powershell.Runner, vmName string) (width, height int, err error) {
	if err := checkName(vmName); err != nil {
		return 0, 0, err
	}
	var out struct {
		Width  int `json:"Width"`
		Height int `json:"Height"`
	}
	if err := r.Run(ctx, screenSizeScript, powershell.Args{"VMName": vmName}, &out); err != nil {
		return 0, 0, classify(err)
	}
	if out.Width <= 0 || out.Height <= 0 {
		return 0, 0, fmt.Errorf("%s: VM %s reported a screen of %dx%d", screenSizeScript.Name, vmName, out.Width, out.Height)
	}
	return out.Width, out.Height, nil
}

// SendInput delivers raw input events to the VM, in order, in one script
// run. They are checked first as CheckEvents does without a screen size:
// positions only for being negative here, and against the screen's current
// resolution by the script before any event is sent (off-screen is
// api.ErrInvalid naming the event, "events[3]"). A backend that knows the
// resolution can call CheckEvents with it to refuse such events sooner.
//
// Wheel presses turn the wheel one notch (their releases do nothing);
// back and forward are the mouse's fourth and fifth buttons; the horizontal
// wheel and keys without a virtual-key code are api.ErrUnsupported. If an
// event fails, the keys and buttons pressed earlier in the same call and
// not yet released are released; keys held from an earlier call stay down.
func SendInput(ctx context.Context, r powershell.Runner, vmName string, evs []backend.InputEvent) error {
	if err := checkName(vmName); err != nil {
		return err
	}
	ops, err := opsOf(evs, 0, 0)
	if err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	return classify(r.Run(ctx, sendInputScript, powershell.Args{"VMName": vmName, "Ops": ops}, nil))
}

// maxTypeTextUnits bounds the text of one Msvm_Keyboard.TypeText call, in
// UTF-16 code units. The method takes up to 512 ASCII characters and 256 to
// 512 other ones (fewer with surrogate pairs); 256 units always fit.
const maxTypeTextUnits = 256

// TypeText types text on the VM's keyboard with Msvm_Keyboard.TypeText, in
// pieces of at most 256 UTF-16 code units, all in one script run. The
// method takes Unicode as well as ASCII: characters the keyboard cannot
// type make it fail (api.ErrInvalid), and a keyboard whose UnicodeSupported
// is false refuses text beyond ASCII (api.ErrUnsupported). Empty text does
// nothing.
func TypeText(ctx context.Context, r powershell.Runner, vmName, text string) error {
	if err := checkName(vmName); err != nil {
		return err
	}
	if !utf8.ValidString(text) {
		return api.Invalid("text", "is not valid UTF-8")
	}
	if i := strings.IndexByte(text, 0); i >= 0 {
		return api.Invalid("text", "holds a NUL character at offset %d", i)
	}
	if text == "" {
		return nil
	}
	args := powershell.Args{"VMName": vmName, "Chunks": splitUTF16(text, maxTypeTextUnits), "Unicode": !isASCII(text)}
	return classify(r.Run(ctx, typeTextScript, args, nil))
}

// splitUTF16 cuts s into pieces of at most n UTF-16 code units, never
// between the two halves of a surrogate pair.
func splitUTF16(s string, n int) []string {
	var chunks []string
	start, units := 0, 0
	for i, c := range s {
		u := utf16.RuneLen(c)
		if units+u > n {
			chunks = append(chunks, s[start:i])
			start, units = i, 0
		}
		units += u
	}
	return append(chunks, s[start:])
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func checkName(vmName string) error {
	if strings.TrimSpace(vmName) == "" {
		return api.Invalid("name", "a VM name is required")
	}
	return nil
}

// classify adds hvkube's error categories to what the scripts report
// beyond those powershell.Error knows (not found, invalid).
func classify(err error) error {
	var pe *powershell.Error
	if errors.As(err, &pe) && strings.HasPrefix(pe.ErrorID, "HvkubeUnsupported") {
		return fmt.Errorf("%w: %w", err, api.ErrUnsupported)
	}
	return err
}

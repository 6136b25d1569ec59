package wmi

import (
	"testing"

	"github.com/hvkube/hvkube/internal/display"
)

// TestKeyMapComplete checks that every key internal/display can produce, by
// any name it accepts or any character it types, maps to a virtual-key code
// or is listed as unsupported, and never both.
func TestKeyMapComplete(t *testing.T) {
	var strokes []display.KeyStroke
	for _, name := range display.KeyNames() {
		k, err := display.ParseKeyCombo(name)
		if err != nil {
			t.Errorf("display rejects its own name %q: %v", name, err)
			continue
		}
		strokes = append(strokes, k)
	}
	// Every character display types as key strokes, space, newline and tab
	// among them.
	var text []byte
	for c := byte(' '); c <= '~'; c++ {
		text = append(text, c)
	}
	typed, err := display.TypeText(string(text) + "\n\t")
	if err != nil {
		t.Fatal(err)
	}
	strokes = append(strokes, typed...)
	seen := map[string]bool{}
	for _, k := range strokes {
		for _, q := range append(k.Modifiers, k.Key) {
			seen[q] = true
		}
	}
	for q := range seen {
		_, mapped := virtualKeys[q]
		switch {
		case mapped && unsupportedKeys[q]:
			t.Errorf("%q is both mapped and unsupported", q)
		case !mapped && !unsupportedKeys[q]:
			t.Errorf("%q (from internal/display) is neither mapped nor listed as unsupported", q)
		}
	}
	for q := range virtualKeys {
		if !display.IsQCode(q) {
			t.Errorf("mapped %q is not a QKeyCode", q)
		}
	}
	for q := range unsupportedKeys {
		if !display.IsQCode(q) {
			t.Errorf("unsupported %q is not a QKeyCode", q)
		}
	}
	// The characters a US keyboard types are all there: display falls
	// back to TypeText only for text beyond them.
	for _, k := range typed {
		if _, ok := VirtualKey(k.Key); !ok {
			t.Errorf("key %s, which display types characters with, has no virtual-key code", k.Key)
		}
	}
}

func TestVirtualKey(t *testing.T) {
	for q, want := range map[string]uint32{
		"a": 0x41, "z": 0x5A, "0": 0x30, "9": 0x39,
		"f1": 0x70, "f12": 0x7B,
		"ret": 0x0D, "esc": 0x1B, "tab": 0x09, "spc": 0x20, "backspace": 0x08,
		"shift": 0xA0, "shift_r": 0xA1, "ctrl": 0xA2, "ctrl_r": 0xA3, "alt": 0xA4, "alt_r": 0xA5,
		"meta_l": 0x5B, "meta_r": 0x5C, "compose": 0x5D,
		"left": 0x25, "up": 0x26, "right": 0x27, "down": 0x28,
		"home": 0x24, "end": 0x23, "pgup": 0x21, "pgdn": 0x22, "insert": 0x2D, "delete": 0x2E,
		"minus": 0xBD, "equal": 0xBB, "bracket_left": 0xDB, "bracket_right": 0xDD,
		"semicolon": 0xBA, "apostrophe": 0xDE, "grave_accent": 0xC0, "backslash": 0xDC,
		"comma": 0xBC, "dot": 0xBE, "slash": 0xBF, "less": 0xE2,
		"kp_0": 0x60, "kp_9": 0x69, "kp_multiply": 0x6A, "kp_add": 0x6B, "kp_subtract": 0x6D,
		"kp_decimal": 0x6E, "kp_divide": 0x6F, "kp_enter": 0x0D,
		"caps_lock": 0x14, "num_lock": 0x90, "scroll_lock": 0x91, "print": 0x2C, "pause": 0x13,
		"audiomute": 0xAD, "volumeup": 0xAF, "volumedown": 0xAE,
	} {
		got, ok := VirtualKey(q)
		if !ok || got != want {
			t.Errorf("VirtualKey(%q) = 0x%02X, %v; want 0x%02X", q, got, ok, want)
		}
	}
	if _, ok := VirtualKey("Return"); ok {
		t.Error("VirtualKey takes QKeyCode names only")
	}
}

package display

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseKeyCombo(t *testing.T) {
	tests := []struct {
		in   string
		want string // KeyStroke.String()
	}{
		{"ctrl+shift+t", "ctrl+shift+t"},
		{"Return", "ret"},
		{"return", "ret"},
		{"Enter", "ret"},
		{"super", "meta_l"},
		{"Super_L", "meta_l"},
		{"win+e", "meta_l+e"},
		{"cmd+c", "meta_l+c"},
		{"meta+Tab", "meta_l+tab"},
		{"alt+F4", "alt+f4"},
		{"Page_Down", "pgdn"},
		{"Page_Up", "pgup"},
		{"Prior", "pgup"},
		{"Next", "pgdn"},
		{"KP_Enter", "kp_enter"},
		{"KP_0", "kp_0"},
		{"KP_Add", "kp_add"},
		{"a", "a"},
		{"A", "shift+a"},
		{"ctrl+A", "ctrl+shift+a"},
		{"shift+A", "shift+a"},
		{"space", "spc"},
		{"BackSpace", "backspace"},
		{"Escape", "esc"},
		{"esc", "esc"},
		{"Tab", "tab"},
		{"ISO_Left_Tab", "shift+tab"},
		{"Left", "left"},
		{"Right", "right"},
		{"Up", "up"},
		{"Down", "down"},
		{"Home", "home"},
		{"End", "end"},
		{"Insert", "insert"},
		{"Delete", "delete"},
		{"F1", "f1"},
		{"F12", "f12"},
		{"ctrl+alt+Delete", "ctrl+alt+delete"},
		{"CTRL+ALT+DELETE", "ctrl+alt+delete"},
		{"Control+c", "ctrl+c"},
		{"control_r+c", "ctrl_r+c"},
		{"Shift+Insert", "shift+insert"},
		{"shift", "shift"},
		{"ctrl+shift", "ctrl+shift"},
		{"ctrl", "ctrl"},
		{"1", "1"},
		{"!", "shift+1"},
		{"ctrl+plus", "ctrl+shift+equal"},
		{"ctrl+minus", "ctrl+minus"},
		{"ctrl+-", "ctrl+minus"},
		{"ctrl+=", "ctrl+equal"},
		{"ctrl++", "ctrl+shift+equal"},
		{"+", "shift+equal"},
		{"ctrl+/", "ctrl+slash"},
		{"ctrl+period", "ctrl+dot"},
		{"question", "shift+slash"},
		{"less", "shift+comma"}, // the X keysym, not the ISO 102nd key
		{"bracketleft", "bracket_left"},
		{"grave", "grave_accent"},
		{"asciitilde", "shift+grave_accent"},
		{"quotedbl", "shift+apostrophe"},
		{"Menu", "compose"},
		{"Print", "print"},
		{"Caps_Lock", "caps_lock"},
		{"XF86AudioMute", "audiomute"},
		{"grave_accent", "grave_accent"}, // a QKeyCode name
		{"ctrl+ret", "ctrl+ret"},
		{"alt+shift+shift+x", "alt+shift+x"}, // repeated modifier held once
		{" ctrl + c ", "ctrl+c"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			k, err := ParseKeyCombo(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := k.String(); got != tt.want {
				t.Errorf("ParseKeyCombo(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseKeyComboErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"Foo", `unknown key "Foo"`},
		{"ctrl+Foo", `unknown key "Foo"`},
		{"ctlr+c", `unknown key "ctlr"`},
		{"F13", `unknown key "F13"`}, // QEMU 8.0+ only
		{"é", `unknown key "é"`},
		{"", "empty key combination"},
		{"   ", "empty key combination"},
		{"ctrl+", `empty key name in "ctrl+"`},
		{"+a", `empty key name in "+a"`},
		{"ctrl++a", `empty key name in "ctrl++a"`},
	}
	for _, tt := range tests {
		_, err := ParseKeyCombo(tt.in)
		if err == nil || err.Error() != tt.want {
			t.Errorf("ParseKeyCombo(%q) error = %v, want %q", tt.in, err, tt.want)
		}
	}
}

func TestParseKeys(t *testing.T) {
	got, err := ParseKeys("ctrl+a  Delete\tReturn")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range got {
		names = append(names, k.String())
	}
	if want := []string{"ctrl+a", "delete", "ret"}; !slices.Equal(names, want) {
		t.Errorf("ParseKeys = %v, want %v", names, want)
	}
	if _, err := ParseKeys("ctrl+a Bogus"); err == nil || !strings.Contains(err.Error(), `"Bogus"`) {
		t.Errorf("ParseKeys with a bad key: %v", err)
	}
	if _, err := ParseKeys(" "); err == nil {
		t.Error("ParseKeys of blank succeeded")
	}
}

func TestKeyStrokeEvents(t *testing.T) {
	k := KeyStroke{Modifiers: []string{"ctrl", "shift"}, Key: "t"}
	want := []KeyEvent{
		{"ctrl", true}, {"shift", true}, {"t", true},
		{"t", false}, {"shift", false}, {"ctrl", false},
	}
	if got := k.Events(); !reflect.DeepEqual(got, want) {
		t.Errorf("Events() = %v\nwant %v", got, want)
	}
	if got := k.Press(); !reflect.DeepEqual(got, want[:3]) {
		t.Errorf("Press() = %v", got)
	}
	if got := k.Release(); !reflect.DeepEqual(got, want[3:]) {
		t.Errorf("Release() = %v", got)
	}
	single := KeyStroke{Key: "ret"}
	if got, want := single.Events(), []KeyEvent{{"ret", true}, {"ret", false}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Events() = %v, want %v", got, want)
	}
	// String must not alias the Modifiers slice.
	mods := make([]string, 1, 4)
	mods[0] = "alt"
	k2 := KeyStroke{Modifiers: mods, Key: "x"}
	_ = k2.String()
	if got := mods[:2][1]; got != "" {
		t.Errorf("String wrote into the caller's slice: %q", got)
	}
}

func TestTypeText(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"aA1!", []string{"a", "shift+a", "1", "shift+1"}},
		{"Hi there.", []string{"shift+h", "i", "spc", "t", "h", "e", "r", "e", "dot"}},
		{">_\"~", []string{"shift+dot", "shift+minus", "shift+apostrophe", "shift+grave_accent"}},
		{"a\nb\tc", []string{"a", "ret", "b", "tab", "c"}},
		{"a\r\nb\rc", []string{"a", "ret", "b", "ret", "c"}},
		{"{}|:<?", []string{"shift+bracket_left", "shift+bracket_right", "shift+backslash", "shift+semicolon", "shift+comma", "shift+slash"}},
		{"@#$%^&*()+", []string{"shift+2", "shift+3", "shift+4", "shift+5", "shift+6", "shift+7", "shift+8", "shift+9", "shift+0", "shift+equal"}},
		{"-=[]\\;'`,./", []string{"minus", "equal", "bracket_left", "bracket_right", "backslash", "semicolon", "apostrophe", "grave_accent", "comma", "dot", "slash"}},
		{"", nil},
	}
	for _, tt := range tests {
		got, err := TypeText(tt.in)
		if err != nil {
			t.Errorf("TypeText(%q): %v", tt.in, err)
			continue
		}
		var names []string
		for _, k := range got {
			names = append(names, k.String())
		}
		if !slices.Equal(names, tt.want) {
			t.Errorf("TypeText(%q) = %v\nwant %v", tt.in, names, tt.want)
		}
	}
}

func TestTypeTextEveryPrintable(t *testing.T) {
	for c := byte(' '); c <= '~'; c++ {
		got, err := TypeText(string(c))
		if err != nil || len(got) != 1 {
			t.Errorf("TypeText(%q) = %v, %v", c, got, err)
			continue
		}
		if c == ' ' {
			continue // a blank combination is empty; the key is "space"
		}
		// The stroke for a character agrees with the key name parser.
		k, err := ParseKeyCombo(string(c))
		if err != nil {
			t.Errorf("ParseKeyCombo(%q): %v", c, err)
			continue
		}
		if k.String() != got[0].String() {
			t.Errorf("%q: TypeText %s, ParseKeyCombo %s", c, got[0], k)
		}
	}
}

func TestTypeTextErrors(t *testing.T) {
	tests := []struct {
		in       string
		notASCII bool
		want     string
	}{
		{"héllo", true, `character 'é' at offset 1`},
		{"日本", true, `character '日' at offset 0`},
		{"ok\x7f", true, `at offset 2`}, // DEL is not printable
		{"a\x1bb", false, `character '\x1b' at offset 1: control characters`},
		{"\x00", false, `offset 0`},
	}
	for _, tt := range tests {
		_, err := TypeText(tt.in)
		if err == nil {
			t.Errorf("TypeText(%q) succeeded", tt.in)
			continue
		}
		if got := errors.Is(err, ErrNotASCII); got != tt.notASCII {
			t.Errorf("TypeText(%q) = %v, ErrNotASCII=%v want %v", tt.in, err, got, tt.notASCII)
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("TypeText(%q) error %q, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

func TestKeyNamesAreQKeyCodes(t *testing.T) {
	names := KeyNames()
	if !slices.IsSorted(names) {
		t.Error("KeyNames not sorted")
	}
	for _, want := range []string{"return", "page_down", "kp_enter", "super", "f12", "bracket_left"} {
		if !slices.Contains(names, want) {
			t.Errorf("KeyNames lacks %q", want)
		}
	}
	// Every name (and every character) produces only QEMU 7.2 QKeyCodes.
	var all []string
	all = append(all, names...)
	for c := byte('!'); c <= '~'; c++ {
		all = append(all, string(c))
	}
	for _, n := range all {
		k, err := ParseKeyCombo(n)
		if err != nil {
			t.Errorf("KeyNames entry %q does not parse: %v", n, err)
			continue
		}
		for _, q := range append(slices.Clone(k.Modifiers), k.Key) {
			if !slices.Contains(qkeyCodes, q) {
				t.Errorf("%q maps to %q, not a QKeyCode", n, q)
			}
		}
	}
}

func FuzzParseKeyCombo(f *testing.F) {
	for _, s := range []string{"ctrl+shift+t", "Return", "A", "ctrl++", "+", "alt+F4", "ctrl+", "é", "a+b+c", "KP_Enter"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKeyCombo(s)
		if err != nil {
			if k.Key != "" || k.Modifiers != nil {
				t.Fatalf("ParseKeyCombo(%q) returned %v with error %v", s, k, err)
			}
			return
		}
		if k.Key == "" {
			t.Fatalf("ParseKeyCombo(%q) = empty key", s)
		}
		for _, q := range append(slices.Clone(k.Modifiers), k.Key) {
			if !slices.Contains(qkeyCodes, q) {
				t.Fatalf("ParseKeyCombo(%q) produced %q, not a QKeyCode", s, q)
			}
		}
		seen := map[string]bool{}
		for _, m := range k.Modifiers {
			if seen[m] {
				t.Fatalf("ParseKeyCombo(%q) holds %q twice", s, m)
			}
			seen[m] = true
		}
		evs := k.Events()
		if len(evs) != 2*(len(k.Modifiers)+1) {
			t.Fatalf("Events of %v: %v", k, evs)
		}
		// The stroke's own spelling parses back to the same stroke.
		again, err := ParseKeyCombo(k.String())
		if err != nil || !reflect.DeepEqual(again, k) {
			t.Fatalf("ParseKeyCombo(%q) = %v, reparsed %q = %v, %v", s, k, k.String(), again, err)
		}
	})
}

package display

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// KeyStroke is one key pressed while zero or more other keys (usually
// modifiers) are held, in QEMU QKeyCode names: ctrl+shift+t is
// {Modifiers: ["ctrl", "shift"], Key: "t"}.
type KeyStroke struct {
	// Modifiers are held, in order, before Key is pressed.
	Modifiers []string
	// Key is the key pressed and released.
	Key string
}

// KeyEvent is one key press (Down) or release, by QKeyCode name.
type KeyEvent struct {
	QCode string
	Down  bool
}

// Press returns the events that press the stroke's keys and keep them down:
// the modifiers in order, then the key.
func (k KeyStroke) Press() []KeyEvent {
	evs := make([]KeyEvent, 0, len(k.Modifiers)+1)
	for _, m := range k.Modifiers {
		evs = append(evs, KeyEvent{m, true})
	}
	return append(evs, KeyEvent{k.Key, true})
}

// Release returns the events that release what Press pressed: the key, then
// the modifiers in reverse order.
func (k KeyStroke) Release() []KeyEvent {
	evs := make([]KeyEvent, 0, len(k.Modifiers)+1)
	evs = append(evs, KeyEvent{k.Key, false})
	for i := len(k.Modifiers) - 1; i >= 0; i-- {
		evs = append(evs, KeyEvent{k.Modifiers[i], false})
	}
	return evs
}

// Events returns the whole stroke: Press followed by Release. Backends that
// deliver events in batches should still deliver each event on its own (on
// QEMU a key's press and release in one input-send-event can be lost).
func (k KeyStroke) Events() []KeyEvent { return append(k.Press(), k.Release()...) }

// String returns the stroke as "mod+mod+key" in QKeyCode names.
func (k KeyStroke) String() string {
	return strings.Join(append(slices.Clone(k.Modifiers), k.Key), "+")
}

// ParseKeys parses a whitespace-separated sequence of key combinations, as
// xdotool key takes them ("ctrl+a Delete"), into one stroke each. It fails
// on the first bad combination.
func ParseKeys(s string) ([]KeyStroke, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, errors.New("empty key combination")
	}
	strokes := make([]KeyStroke, 0, len(fields))
	for _, f := range fields {
		k, err := ParseKeyCombo(f)
		if err != nil {
			return nil, err
		}
		strokes = append(strokes, k)
	}
	return strokes, nil
}

// ParseKeyCombo parses one xdotool-style key combination such as
// "ctrl+shift+t", "alt+F4", "Return", "super", "KP_Enter" or "A": key names
// joined by "+", where every key but the last is held while the last is
// pressed. A trailing "++" or a lone "+" names the plus key itself.
//
// Names longer than one character — X keysym names (Return, BackSpace,
// Page_Down, Prior, KP_Add, bracketleft, ...), modifiers (ctrl, control,
// shift, alt, super, win, cmd, meta) and common aliases (enter, esc, del,
// pgdn) — are matched case-insensitively. A single character names the key
// that types it on a US keyboard, so it is case-sensitive: "a" is a, "A" is
// shift+a, "!" is shift+1. QKeyCode names are accepted as well where they do
// not clash with an X keysym name. An unknown name fails with an error that
// quotes it (unknown key "Foo").
func ParseKeyCombo(s string) (KeyStroke, error) {
	if strings.TrimSpace(s) == "" {
		return KeyStroke{}, errors.New("empty key combination")
	}
	var parts []string
	switch {
	case s == "+":
		parts = []string{"+"}
	case strings.HasSuffix(s, "++"):
		parts = append(strings.Split(s[:len(s)-2], "+"), "+")
	default:
		parts = strings.Split(s, "+")
	}

	var k KeyStroke
	needShift := false
	for i, p := range parts {
		name := strings.TrimSpace(p)
		if name == "" {
			return KeyStroke{}, fmt.Errorf("empty key name in %q", s)
		}
		def, ok := lookupKey(name)
		if !ok {
			return KeyStroke{}, fmt.Errorf("unknown key %q", name)
		}
		if i < len(parts)-1 {
			if !slices.Contains(k.Modifiers, def.qcode) {
				k.Modifiers = append(k.Modifiers, def.qcode)
			}
			needShift = needShift || def.shift
			continue
		}
		k.Key = def.qcode
		needShift = needShift || def.shift
	}
	if needShift && k.Key != "shift" && !slices.Contains(k.Modifiers, "shift") {
		k.Modifiers = append(k.Modifiers, "shift")
	}
	return k, nil
}

// ErrNotASCII is wrapped by TypeText's error when the text holds a character
// that cannot be typed as US-keyboard key strokes. Callers fall back to
// typing through the guest (for example xdotool type) for such text.
var ErrNotASCII = errors.New("text is not printable ASCII")

// TypeText returns the key strokes that type text on a US keyboard layout:
// printable ASCII characters (with shift where the character needs it),
// "\n" and "\r\n" as Return, a lone "\r" as Return, and "\t" as Tab. Any
// other character fails: a non-ASCII one with an error wrapping
// ErrNotASCII, an ASCII control character with a plain error. Both name the
// character and its byte offset.
func TypeText(text string) ([]KeyStroke, error) {
	strokes := make([]KeyStroke, 0, len(text))
	for i, r := range text {
		if r == '\n' && i > 0 && text[i-1] == '\r' {
			continue // "\r\n" is one Return
		}
		if r == '\r' {
			r = '\n'
		}
		if r > 0x7e {
			return nil, fmt.Errorf("character %q at offset %d: %w", r, i, ErrNotASCII)
		}
		def, ok := charKeys[byte(r)]
		if !ok {
			return nil, fmt.Errorf("character %q at offset %d: control characters other than newline and tab cannot be typed", r, i)
		}
		k := KeyStroke{Key: def.qcode}
		if def.shift {
			k.Modifiers = []string{"shift"}
		}
		strokes = append(strokes, k)
	}
	return strokes, nil
}

// KeyNames returns every multi-character key name ParseKeyCombo accepts
// (lower case; matching ignores case), sorted. Single printable ASCII
// characters are accepted too and are not listed.
func KeyNames() []string {
	seen := make(map[string]bool)
	for n := range namedKeys {
		seen[n] = true
	}
	for _, q := range qkeyCodes {
		if len(q) > 1 {
			seen[q] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

type keyDef struct {
	qcode string
	shift bool // the key must be pressed with shift to mean this name
}

func lookupKey(name string) (keyDef, bool) {
	if len(name) == 1 {
		def, ok := charKeys[name[0]]
		if ok && name[0] >= ' ' {
			return def, true
		}
		return keyDef{}, false
	}
	lower := strings.ToLower(name)
	if def, ok := namedKeys[lower]; ok {
		return def, true
	}
	if slices.Contains(qkeyCodes, lower) {
		return keyDef{qcode: lower}, true
	}
	return keyDef{}, false
}

// charKeys maps each character a US keyboard types to its key.
var charKeys = func() map[byte]keyDef {
	m := map[byte]keyDef{
		' ': {qcode: "spc"}, '\n': {qcode: "ret"}, '\t': {qcode: "tab"},
		'-': {qcode: "minus"}, '=': {qcode: "equal"},
		'[': {qcode: "bracket_left"}, ']': {qcode: "bracket_right"}, '\\': {qcode: "backslash"},
		';': {qcode: "semicolon"}, '\'': {qcode: "apostrophe"}, '`': {qcode: "grave_accent"},
		',': {qcode: "comma"}, '.': {qcode: "dot"}, '/': {qcode: "slash"},
	}
	for c := byte('a'); c <= 'z'; c++ {
		m[c] = keyDef{qcode: string(c)}
		m[c-'a'+'A'] = keyDef{qcode: string(c), shift: true}
	}
	for c := byte('0'); c <= '9'; c++ {
		m[c] = keyDef{qcode: string(c)}
	}
	// The characters on the shifted keys.
	for shifted, base := range map[byte]byte{
		'!': '1', '@': '2', '#': '3', '$': '4', '%': '5', '^': '6', '&': '7', '*': '8', '(': '9', ')': '0',
		'_': '-', '+': '=', '{': '[', '}': ']', '|': '\\', ':': ';', '"': '\'', '~': '`',
		'<': ',', '>': '.', '?': '/',
	} {
		m[shifted] = keyDef{qcode: m[base].qcode, shift: true}
	}
	return m
}()

// namedQCodes maps lower-cased X keysym names and aliases to QKeyCodes.
var namedQCodes = map[string]string{
	// Modifiers.
	"shift":            "shift",
	"shift_l":          "shift",
	"shift_r":          "shift_r",
	"ctrl":             "ctrl",
	"control":          "ctrl",
	"ctl":              "ctrl",
	"control_l":        "ctrl",
	"ctrl_l":           "ctrl",
	"control_r":        "ctrl_r",
	"ctrl_r":           "ctrl_r",
	"alt":              "alt",
	"alt_l":            "alt",
	"option":           "alt",
	"alt_r":            "alt_r",
	"altgr":            "alt_r",
	"iso_level3_shift": "alt_r",
	"super":            "meta_l",
	"super_l":          "meta_l",
	"win":              "meta_l",
	"windows":          "meta_l",
	"cmd":              "meta_l",
	"command":          "meta_l",
	"meta":             "meta_l",
	"meta_l":           "meta_l",
	"super_r":          "meta_r",
	"meta_r":           "meta_r",

	// Editing and navigation.
	"return":      "ret",
	"enter":       "ret",
	"ret":         "ret",
	"escape":      "esc",
	"esc":         "esc",
	"tab":         "tab",
	"space":       "spc",
	"spc":         "spc",
	"backspace":   "backspace",
	"delete":      "delete",
	"del":         "delete",
	"insert":      "insert",
	"ins":         "insert",
	"home":        "home",
	"end":         "end",
	"page_up":     "pgup",
	"pageup":      "pgup",
	"prior":       "pgup",
	"pgup":        "pgup",
	"page_down":   "pgdn",
	"pagedown":    "pgdn",
	"next":        "pgdn",
	"pgdn":        "pgdn",
	"left":        "left",
	"right":       "right",
	"up":          "up",
	"down":        "down",
	"caps_lock":   "caps_lock",
	"num_lock":    "num_lock",
	"scroll_lock": "scroll_lock",
	"print":       "print",
	"sys_req":     "sysrq",
	"pause":       "pause",
	"break":       "pause",

	// X's Menu key is the PC "application" key, which QEMU calls compose
	// (its "menu" qcode is a different, rarely mapped key).
	"menu": "compose",

	// Keypad.
	"kp_enter":     "kp_enter",
	"kp_add":       "kp_add",
	"kp_subtract":  "kp_subtract",
	"kp_multiply":  "kp_multiply",
	"kp_divide":    "kp_divide",
	"kp_decimal":   "kp_decimal",
	"kp_separator": "kp_comma",
	"kp_equal":     "kp_equals",

	// Media keys.
	"xf86audiomute":        "audiomute",
	"xf86audioraisevolume": "volumeup",
	"xf86audiolowervolume": "volumedown",
	"xf86audioplay":        "audioplay",
	"xf86audiostop":        "audiostop",
	"xf86audionext":        "audionext",
	"xf86audioprev":        "audioprev",
}

// namedKeys maps lower-cased key names to keys: namedQCodes, F1 to F12, the
// keypad digits, and the X keysym names of the characters on a US keyboard.
var namedKeys = func() map[string]keyDef {
	m := make(map[string]keyDef, len(namedQCodes)+64)
	for name, q := range namedQCodes {
		m[name] = keyDef{qcode: q}
	}
	// X's name for shift+Tab.
	m["iso_left_tab"] = keyDef{qcode: "tab", shift: true}
	// F13 and up need QEMU 8.0.
	for i := 1; i <= 12; i++ {
		m[fmt.Sprintf("f%d", i)] = keyDef{qcode: fmt.Sprintf("f%d", i)}
	}
	for i := 0; i <= 9; i++ {
		m[fmt.Sprintf("kp_%d", i)] = keyDef{qcode: fmt.Sprintf("kp_%d", i)}
	}
	// X keysym names of the characters on a US keyboard.
	for name, c := range map[string]byte{
		"minus": '-', "equal": '=', "plus": '+', "comma": ',', "period": '.', "slash": '/',
		"backslash": '\\', "semicolon": ';', "apostrophe": '\'', "quoteright": '\'',
		"grave": '`', "quoteleft": '`', "asciitilde": '~', "exclam": '!', "at": '@',
		"numbersign": '#', "dollar": '$', "percent": '%', "asciicircum": '^',
		"ampersand": '&', "asterisk": '*', "parenleft": '(', "parenright": ')',
		"underscore": '_', "braceleft": '{', "braceright": '}', "bracketleft": '[',
		"bracketright": ']', "bar": '|', "colon": ':', "quotedbl": '"', "less": '<',
		"greater": '>', "question": '?',
	} {
		m[name] = charKeys[c]
	}
	return m
}()

// qkeyCodes are the QAPI QKeyCode names of QEMU 7.2 (qapi/ui.json). f13 to
// f24 came in 8.0 and are left out, so strokes this package produces work
// on 7.2.
var qkeyCodes = []string{
	"unmapped", "shift", "shift_r", "alt", "alt_r", "ctrl", "ctrl_r", "menu", "esc",
	"1", "2", "3", "4", "5", "6", "7", "8", "9", "0", "minus", "equal", "backspace",
	"tab", "q", "w", "e", "r", "t", "y", "u", "i", "o", "p", "bracket_left",
	"bracket_right", "ret", "a", "s", "d", "f", "g", "h", "j", "k", "l", "semicolon",
	"apostrophe", "grave_accent", "backslash", "z", "x", "c", "v", "b", "n", "m",
	"comma", "dot", "slash", "asterisk", "spc", "caps_lock", "f1", "f2", "f3", "f4",
	"f5", "f6", "f7", "f8", "f9", "f10", "num_lock", "scroll_lock", "kp_divide",
	"kp_multiply", "kp_subtract", "kp_add", "kp_enter", "kp_decimal", "sysrq", "kp_0",
	"kp_1", "kp_2", "kp_3", "kp_4", "kp_5", "kp_6", "kp_7", "kp_8", "kp_9", "less",
	"f11", "f12", "print", "home", "pgup", "pgdn", "end", "left", "up", "down", "right",
	"insert", "delete", "stop", "again", "props", "undo", "front", "copy", "open",
	"paste", "find", "cut", "lf", "help", "meta_l", "meta_r", "compose", "pause", "ro",
	"hiragana", "henkan", "yen", "muhenkan", "katakanahiragana", "kp_comma",
	"kp_equals", "power", "sleep", "wake", "audionext", "audioprev", "audiostop",
	"audioplay", "audiomute", "volumeup", "volumedown", "mediaselect", "mail",
	"calculator", "computer", "ac_home", "ac_back", "ac_forward", "ac_refresh",
	"ac_bookmarks", "lang1", "lang2",
}

// IsQCode reports whether name is a QKeyCode name (the names KeyEvent and
// backend input events carry).
func IsQCode(name string) bool { return slices.Contains(qkeyCodes, name) }

// CharOf returns the printable character a key press types on a US
// keyboard, with shift down or not: the inverse of TypeText for one key.
func CharOf(qcode string, shift bool) (rune, bool) {
	for c, def := range charKeys {
		if c >= ' ' && c <= '~' && def.qcode == qcode && def.shift == shift {
			return rune(c), true
		}
	}
	return 0, false
}

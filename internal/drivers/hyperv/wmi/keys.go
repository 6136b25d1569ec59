package wmi

import "strconv"

// Windows virtual-key codes of the QEMU QKeyCode names that internal/display
// produces. Msvm_Keyboard.PressKey and ReleaseKey take virtual-key codes and
// translate them to the guest's keystrokes themselves; they turn VK_SHIFT,
// VK_CONTROL and VK_MENU into the left-hand keys, so the table names the
// left- and right-hand modifiers directly.
//
// The numeric keypad's Enter has no virtual-key code of its own (Windows
// tells it from Return by the extended-key flag, which PressKey cannot
// carry): kp_enter presses Return. The US keyboard's SysRq is Alt+Print
// Screen on the same key: sysrq presses Print Screen. QEMU's asterisk is the
// keypad's *.
var virtualKeys = func() map[string]uint32 {
	m := map[string]uint32{
		// Modifiers.
		"shift":   0xA0, // VK_LSHIFT
		"shift_r": 0xA1, // VK_RSHIFT
		"ctrl":    0xA2, // VK_LCONTROL
		"ctrl_r":  0xA3, // VK_RCONTROL
		"alt":     0xA4, // VK_LMENU
		"alt_r":   0xA5, // VK_RMENU
		"meta_l":  0x5B, // VK_LWIN
		"meta_r":  0x5C, // VK_RWIN
		"compose": 0x5D, // VK_APPS, the application (menu) key

		// Editing and navigation.
		"esc":         0x1B, // VK_ESCAPE
		"backspace":   0x08, // VK_BACK
		"tab":         0x09, // VK_TAB
		"ret":         0x0D, // VK_RETURN
		"spc":         0x20, // VK_SPACE
		"caps_lock":   0x14, // VK_CAPITAL
		"num_lock":    0x90, // VK_NUMLOCK
		"scroll_lock": 0x91, // VK_SCROLL
		"print":       0x2C, // VK_SNAPSHOT
		"sysrq":       0x2C, // VK_SNAPSHOT
		"pause":       0x13, // VK_PAUSE
		"insert":      0x2D, // VK_INSERT
		"delete":      0x2E, // VK_DELETE
		"home":        0x24, // VK_HOME
		"end":         0x23, // VK_END
		"pgup":        0x21, // VK_PRIOR
		"pgdn":        0x22, // VK_NEXT
		"left":        0x25, // VK_LEFT
		"up":          0x26, // VK_UP
		"right":       0x27, // VK_RIGHT
		"down":        0x28, // VK_DOWN
		"help":        0x2F, // VK_HELP

		// Punctuation, as on a US keyboard.
		"minus":         0xBD, // VK_OEM_MINUS
		"equal":         0xBB, // VK_OEM_PLUS
		"bracket_left":  0xDB, // VK_OEM_4
		"bracket_right": 0xDD, // VK_OEM_6
		"semicolon":     0xBA, // VK_OEM_1
		"apostrophe":    0xDE, // VK_OEM_7
		"grave_accent":  0xC0, // VK_OEM_3
		"backslash":     0xDC, // VK_OEM_5
		"comma":         0xBC, // VK_OEM_COMMA
		"dot":           0xBE, // VK_OEM_PERIOD
		"slash":         0xBF, // VK_OEM_2
		"less":          0xE2, // VK_OEM_102, the ISO keyboard's extra key

		// Keypad.
		"kp_divide":   0x6F, // VK_DIVIDE
		"kp_multiply": 0x6A, // VK_MULTIPLY
		"asterisk":    0x6A, // VK_MULTIPLY
		"kp_subtract": 0x6D, // VK_SUBTRACT
		"kp_add":      0x6B, // VK_ADD
		"kp_enter":    0x0D, // VK_RETURN
		"kp_decimal":  0x6E, // VK_DECIMAL

		// Media and application keys.
		"audiomute":    0xAD, // VK_VOLUME_MUTE
		"volumedown":   0xAE, // VK_VOLUME_DOWN
		"volumeup":     0xAF, // VK_VOLUME_UP
		"audionext":    0xB0, // VK_MEDIA_NEXT_TRACK
		"audioprev":    0xB1, // VK_MEDIA_PREV_TRACK
		"audiostop":    0xB2, // VK_MEDIA_STOP
		"audioplay":    0xB3, // VK_MEDIA_PLAY_PAUSE
		"mail":         0xB4, // VK_LAUNCH_MAIL
		"mediaselect":  0xB5, // VK_LAUNCH_MEDIA_SELECT
		"computer":     0xB6, // VK_LAUNCH_APP1
		"calculator":   0xB7, // VK_LAUNCH_APP2
		"ac_back":      0xA6, // VK_BROWSER_BACK
		"ac_forward":   0xA7, // VK_BROWSER_FORWARD
		"ac_refresh":   0xA8, // VK_BROWSER_REFRESH
		"ac_bookmarks": 0xAB, // VK_BROWSER_FAVORITES
		"ac_home":      0xAC, // VK_BROWSER_HOME
		"sleep":        0x5F, // VK_SLEEP
	}
	for c := 'a'; c <= 'z'; c++ {
		m[string(c)] = uint32('A' + c - 'a') // VK_A..VK_Z are the upper-case letters
	}
	for c := '0'; c <= '9'; c++ {
		m[string(c)] = uint32(c)                    // VK_0..VK_9
		m["kp_"+string(c)] = uint32(0x60 + c - '0') // VK_NUMPAD0..VK_NUMPAD9
	}
	for i := 1; i <= 12; i++ {
		m["f"+strconv.Itoa(i)] = uint32(0x70 + i - 1) // VK_F1..VK_F12
	}
	return m
}()

// unsupportedKeys are the QKeyCode names with no virtual-key code that a US
// keyboard layout in the guest would turn back into the same key: Sun
// keyboard keys, Japanese and Korean input keys, and keys without a code.
// Sending one fails with api.ErrUnsupported.
var unsupportedKeys = map[string]bool{
	"unmapped": true,
	// QEMU's menu is not the PC application key (that is compose).
	"menu": true,
	// Sun keyboard keys.
	"stop": true, "again": true, "props": true, "undo": true, "front": true,
	"copy": true, "open": true, "paste": true, "find": true, "cut": true, "lf": true,
	// Japanese and Korean keys: their virtual-key codes mean something only
	// under those layouts.
	"ro": true, "hiragana": true, "henkan": true, "yen": true, "muhenkan": true,
	"katakanahiragana": true, "lang1": true, "lang2": true,
	// Keypad keys of other countries' keyboards.
	"kp_comma": true, "kp_equals": true,
	// Power keys have no virtual-key code.
	"power": true, "wake": true,
}

// VirtualKey returns the Windows virtual-key code that Msvm_Keyboard presses
// for a QKeyCode name, and whether there is one.
func VirtualKey(qcode string) (uint32, bool) {
	vk, ok := virtualKeys[qcode]
	return vk, ok
}

package browsertool

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/hvkube/hvkube/internal/cdp"
)

// keyDef is a key as DevTools' Input.dispatchKeyEvent takes it.
type keyDef struct {
	key  string // KeyboardEvent.key
	code string // KeyboardEvent.code
	vk   int    // windowsVirtualKeyCode
	text string // what it types, when no modifier but shift is held
}

// namedKeys are the keys a key's text may name, by lower-case name.
var namedKeys = map[string]keyDef{
	"enter": {"Enter", "Enter", 13, "\r"}, "return": {"Enter", "Enter", 13, "\r"},
	"tab":    {"Tab", "Tab", 9, ""},
	"escape": {"Escape", "Escape", 27, ""}, "esc": {"Escape", "Escape", 27, ""},
	"backspace": {"Backspace", "Backspace", 8, ""},
	"delete":    {"Delete", "Delete", 46, ""}, "del": {"Delete", "Delete", 46, ""},
	"space": {" ", "Space", 32, " "},
	"up":    {"ArrowUp", "ArrowUp", 38, ""}, "arrowup": {"ArrowUp", "ArrowUp", 38, ""},
	"down": {"ArrowDown", "ArrowDown", 40, ""}, "arrowdown": {"ArrowDown", "ArrowDown", 40, ""},
	"left": {"ArrowLeft", "ArrowLeft", 37, ""}, "arrowleft": {"ArrowLeft", "ArrowLeft", 37, ""},
	"right": {"ArrowRight", "ArrowRight", 39, ""}, "arrowright": {"ArrowRight", "ArrowRight", 39, ""},
	"home": {"Home", "Home", 36, ""}, "end": {"End", "End", 35, ""},
	"pageup": {"PageUp", "PageUp", 33, ""}, "page_up": {"PageUp", "PageUp", 33, ""},
	"pagedown": {"PageDown", "PageDown", 34, ""}, "page_down": {"PageDown", "PageDown", 34, ""},
	"insert": {"Insert", "Insert", 45, ""},
	"shift":  {"Shift", "ShiftLeft", 16, ""}, "ctrl": {"Control", "ControlLeft", 17, ""}, "control": {"Control", "ControlLeft", 17, ""},
	"alt": {"Alt", "AltLeft", 18, ""}, "meta": {"Meta", "MetaLeft", 91, ""}, "cmd": {"Meta", "MetaLeft", 91, ""}, "super": {"Meta", "MetaLeft", 91, ""},
}

// keyFor reads one key's name: a named key, F1-F24, or one character.
func keyFor(name string) (keyDef, error) {
	if k, ok := namedKeys[strings.ToLower(name)]; ok {
		return k, nil
	}
	var n int
	if len(name) >= 2 && (name[0] == 'F' || name[0] == 'f') {
		if _, err := fmt.Sscanf(name[1:], "%d", &n); err == nil && n >= 1 && n <= 24 && fmt.Sprint(n) == name[1:] {
			return keyDef{key: "F" + fmt.Sprint(n), code: "F" + fmt.Sprint(n), vk: 111 + n}, nil
		}
	}
	r := []rune(name)
	if len(r) != 1 || !unicode.IsPrint(r[0]) {
		return keyDef{}, fmt.Errorf("%q is not a key (a name such as Enter, Tab, Escape, BackSpace, ArrowUp, F5, or one character)", name)
	}
	c := r[0]
	k := keyDef{key: string(c), text: string(c)}
	switch {
	case c >= 'a' && c <= 'z':
		k.code, k.vk = "Key"+strings.ToUpper(string(c)), int(c-'a'+'A')
	case c >= 'A' && c <= 'Z':
		k.code, k.vk = "Key"+string(c), int(c)
	case c >= '0' && c <= '9':
		k.code, k.vk = "Digit"+string(c), int(c)
	}
	return k, nil
}

// chord is keys held together: the last is pressed with the others'
// modifiers down.
type chord struct {
	mods int
	keys []keyDef
}

// parseKeys reads a key text: chords joined by +, pressed one after the
// other where spaces separate them.
func parseKeys(s string) ([]chord, error) {
	var out []chord
	for _, part := range strings.Fields(s) {
		var c chord
		for _, name := range strings.Split(part, "+") {
			if name == "" {
				return nil, fmt.Errorf("%q: an empty key in a chord", part)
			}
			k, err := keyFor(name)
			if err != nil {
				return nil, err
			}
			c.mods |= keyBits[k.key]
			c.keys = append(c.keys, k)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no key")
	}
	return out, nil
}

// down presses the keys of c in order (held until up).
func (c chord) down(ctx context.Context, p *cdp.Page) error {
	mods := 0
	for _, k := range c.keys {
		mods |= keyBits[k.key]
		if mods&modShift != 0 && len([]rune(k.text)) == 1 && unicode.IsLower([]rune(k.text)[0]) {
			k.key, k.text = strings.ToUpper(k.key), strings.ToUpper(k.text)
		}
		ev := map[string]any{"type": "rawKeyDown", "key": k.key, "code": k.code, "windowsVirtualKeyCode": k.vk, "nativeVirtualKeyCode": k.vk, "modifiers": mods}
		if k.text != "" && mods&^modShift == 0 {
			ev["type"], ev["text"], ev["unmodifiedText"] = "keyDown", k.text, k.text
		}
		if err := p.Conn().Call(ctx, "Input.dispatchKeyEvent", ev, nil); err != nil {
			return err
		}
	}
	return nil
}

// keyBits are the modifier keys' bits, by KeyboardEvent.key.
var keyBits = map[string]int{"Alt": modAlt, "Control": modCtrl, "Meta": modMeta, "Shift": modShift}

// up releases the keys of c, the last first.
func (c chord) up(ctx context.Context, p *cdp.Page) error {
	for i := len(c.keys) - 1; i >= 0; i-- {
		k := c.keys[i]
		if err := p.Conn().Call(ctx, "Input.dispatchKeyEvent", map[string]any{"type": "keyUp", "key": k.key, "code": k.code,
			"windowsVirtualKeyCode": k.vk, "nativeVirtualKeyCode": k.vk, "modifiers": c.mods}, nil); err != nil {
			return err
		}
	}
	return nil
}

func keyMember(ctx context.Context, in input, p *cdp.Page) ([]any, error) {
	s, err := in.str("text", true, 256)
	if err != nil {
		return nil, err
	}
	chords, err := parseKeys(s)
	if err != nil {
		return nil, fmt.Errorf("text: %v", err)
	}
	n, err := in.intIn("repeat", 1, 1, 100)
	if err != nil {
		return nil, err
	}
	err = p.Settling(ctx, settleGrace, func() error {
		for range n {
			for _, c := range chords {
				if err := c.down(ctx, p); err != nil {
					return err
				}
				if err := c.up(ctx, p); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return []any{text("Pressed " + s + ".")}, nil
}

func holdKey(ctx context.Context, in input, p *cdp.Page) ([]any, error) {
	s, err := in.str("text", true, 256)
	if err != nil {
		return nil, err
	}
	d, err := in.seconds("duration")
	if err != nil {
		return nil, err
	}
	chords, err := parseKeys(s)
	if err != nil {
		return nil, fmt.Errorf("text: %v", err)
	}
	if len(chords) != 1 {
		return nil, fmt.Errorf("text: hold one key or chord, not a sequence")
	}
	if err := chords[0].down(ctx, p); err != nil {
		return nil, err
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	// Released whatever the wait did: a key left down would stay down.
	if err := chords[0].up(context.WithoutCancel(ctx), p); err != nil {
		return nil, err
	}
	return []any{text(fmt.Sprintf("Held %s for %gs.", s, d.Seconds()))}, ctx.Err()
}

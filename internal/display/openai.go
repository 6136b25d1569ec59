package display

import (
	"encoding/json"
	"fmt"
	"image"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// openAIScrollStep is how many pixels of scroll_x/scroll_y one wheel notch
// stands for.
const openAIScrollStep = 100

// IsOpenAI reports whether body is an OpenAI computer action or
// computer_call item: it has a type (other than Gemini's function_call)
// and no action of Anthropic's.
func IsOpenAI(body []byte) bool {
	var probe map[string]json.RawMessage
	if json.Unmarshal(body, &probe) != nil {
		return false
	}
	var typ, action string
	if json.Unmarshal(probe["type"], &typ) != nil || typ == "" || typ == "function_call" {
		return false
	}
	return json.Unmarshal(probe["action"], &action) != nil || action == ""
}

// FromOpenAI reads an action of OpenAI's computer-use tool, or a
// computer_call item, as api.DecodeAction does, and checks it as far as
// it can without a screen (unknown types, fields and keys fail naming
// them). The action layer (Run) translates it.
func FromOpenAI(raw []byte) ([]api.Action, error) {
	a, err := api.DecodeAction(raw)
	if err != nil {
		return nil, err
	}
	if err := api.ValidateAction("", a, 0, 0, false); err != nil {
		return nil, err
	}
	anyScreen := scaler{dw: api.MaxScreenWidth, dh: api.MaxScreenHeight, sw: api.MaxScreenWidth, sh: api.MaxScreenHeight}
	if _, err := expand("", a, anyScreen); err != nil {
		return nil, err
	}
	return []api.Action{a}, nil
}

// openAISteps translates an action of OpenAI's computer-use tool: click
// (left, right, wheel = middle, back and forward = alt+Left and
// alt+Right), double_click, move, drag along a path, scroll by pixels (a
// notch per 100, at least one), type, keypress (keys held together:
// ["CTRL", "C"]), wait and screenshot. The pointer actions hold their
// modifier keys around what they do.
func openAISteps(p string, o api.Action, s scaler) ([]step, error) {
	at := func(x, y int) image.Point {
		dx, dy := s.toDesktop(x, y)
		return image.Point{X: dx, Y: dy}
	}
	var mods []KeyStroke
	if o.Type != "keypress" {
		var err error
		if mods, err = modifiers(p, "", o.Keys); err != nil {
			return nil, err
		}
	}
	switch o.Type {
	case "screenshot":
		return []step{{kind: stepShot, s: s}}, nil
	case "click":
		pt := at(*o.X, *o.Y)
		switch strings.ToLower(o.Button) {
		case "", "left":
			return []step{clickStep(&pt, backend.ButtonLeft, 1, mods)}, nil
		case "right":
			return []step{clickStep(&pt, backend.ButtonRight, 1, mods)}, nil
		case "wheel", "middle":
			return []step{clickStep(&pt, backend.ButtonMiddle, 1, mods)}, nil
		case "back", "forward":
			k, _ := ParseKeyCombo(map[string]string{"back": "alt+Left", "forward": "alt+Right"}[strings.ToLower(o.Button)])
			return []step{pointer(&pt, mods, func(e *inputs) { e.keys(k.Events()) })}, nil
		}
		return nil, api.Invalid(field(p, "button"), "%q: want left, right, wheel, back or forward", o.Button)
	case "double_click":
		pt := at(*o.X, *o.Y)
		return []step{clickStep(&pt, backend.ButtonLeft, 2, mods)}, nil
	case "move":
		return []step{moveStep(at(*o.X, *o.Y), mods)}, nil
	case "drag":
		path := make([]image.Point, len(o.Path))
		for i, pt := range o.Path {
			path[i] = at(pt.X, pt.Y)
		}
		return []step{pathStep(path, mods)}, nil
	case "scroll":
		var turns []wheel
		add := func(px int, neg, pos ScrollDirection) {
			if px == 0 {
				return
			}
			d := pos
			if px < 0 {
				d, px = neg, -px
			}
			turns = append(turns, wheel{d, min(max(1, px/openAIScrollStep), api.MaxScrollStep)})
		}
		add(o.ScrollY, ScrollUp, ScrollDown)
		add(o.ScrollX, ScrollLeft, ScrollRight)
		pt := at(*o.X, *o.Y)
		return []step{scrollStep(&pt, mods, turns...)}, nil
	case "type":
		st, err := typeStep(field(p, "text"), o.Text)
		return []step{st}, err
	case "keypress":
		names := make([]string, len(o.Keys))
		for i, k := range o.Keys {
			n, err := agentKey(k)
			if err != nil {
				return nil, api.Invalid(field(p, fmt.Sprintf("keys[%d]", i)), "%v", err)
			}
			names[i] = n
		}
		k, err := ParseKeyCombo(strings.Join(names, "+"))
		if err != nil {
			return nil, api.Invalid(field(p, "keys"), "%v", err)
		}
		return []step{keyStep(k)}, nil
	case "wait":
		d := 1.0
		if o.MS != nil {
			d = float64(*o.MS) / 1000
		}
		return []step{{kind: stepWait, d: seconds(d)}}, nil
	}
	return nil, api.Invalid(field(p, "type"), "unknown OpenAI computer action %q", o.Type)
}

// agentKeys are key names of the agent vocabularies (OpenAI's, and the
// browser names Gemini uses) that are not also this layer's, upper case.
var agentKeys = map[string]string{
	"ARROWUP": "Up", "ARROWDOWN": "Down", "ARROWLEFT": "Left", "ARROWRIGHT": "Right",
	"CMD": "super", "META": "super", "WIN": "super", "OS": "super", "OPTION": "alt",
	"SPACE": "space", "PAGEUP": "Page_Up", "PAGEDOWN": "Page_Down",
	"CAPSLOCK": "Caps_Lock", "NUMLOCK": "Num_Lock", "SCROLLLOCK": "Scroll_Lock",
	"PRINTSCREEN": "Print", "CONTEXTMENU": "Menu",
}

// agentKey maps one key name of an agent vocabulary (OpenAI's "CTRL",
// "ENTER", "ARROWLEFT", "a"; Gemini's "Control", "ArrowDown") onto this
// layer's. Names are matched without case; a letter names its key, not a
// character ("C" is c: shift is its own key).
func agentKey(k string) (string, error) {
	if n, ok := agentKeys[strings.ToUpper(k)]; ok {
		return n, nil
	}
	name := strings.ToLower(k)
	if name == "+" {
		return "plus", nil
	}
	if _, err := ParseKeyCombo(name); err != nil {
		return "", err
	}
	return name, nil
}

package display

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
)

// openAIAction is an action of OpenAI's computer-use tool, as a
// computer_call carries it: {"type": "click", "button": "left", "x": 10,
// "y": 20}.
type openAIAction struct {
	Type    string        `json:"type"`
	Button  string        `json:"button,omitempty"`
	X       *int          `json:"x,omitempty"`
	Y       *int          `json:"y,omitempty"`
	ScrollX int           `json:"scroll_x,omitempty"`
	ScrollY int           `json:"scroll_y,omitempty"`
	Text    string        `json:"text,omitempty"`
	Keys    []string      `json:"keys,omitempty"`
	Path    []openAIPoint `json:"path,omitempty"`
	// MS is how long a wait lasts (not part of OpenAI's action; a wait
	// without it lasts a second).
	MS *int `json:"ms,omitempty"`
}

type openAIPoint struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// openAIScrollStep is how many pixels of scroll_x/scroll_y one wheel notch
// stands for.
const openAIScrollStep = 100

// IsOpenAI reports whether body is an OpenAI computer action (it has a
// "type" and no "action").
func IsOpenAI(body []byte) bool {
	var probe map[string]json.RawMessage
	if json.Unmarshal(body, &probe) != nil {
		return false
	}
	_, hasType := probe["type"]
	_, hasAction := probe["action"]
	return hasType && !hasAction
}

// FromOpenAI maps an action of OpenAI's computer-use tool onto the
// Anthropic-style actions of this layer: click (left, right, wheel = middle,
// back and forward = alt+Left and alt+Right), double_click, move, drag along
// a path, scroll by pixels (a notch per 100, at least one), type, keypress
// (keys held together: ["CTRL", "C"]), wait and screenshot. Unknown types
// and fields fail naming them.
func FromOpenAI(raw []byte) ([]api.Action, error) {
	if err := api.CheckJSON(raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var o openAIAction
	if err := dec.Decode(&o); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return nil, api.Invalid(strings.Trim(f, `"`), "unknown field of an OpenAI computer action")
		}
		return nil, api.Invalid("", "invalid OpenAI computer action: %v", err)
	}
	point := func() ([]int, error) {
		if o.X == nil || o.Y == nil {
			return nil, api.Invalid("x", "x and y are required for %s", o.Type)
		}
		return []int{*o.X, *o.Y}, nil
	}
	switch o.Type {
	case "screenshot":
		return []api.Action{{Action: "screenshot"}}, nil
	case "click":
		c, err := point()
		if err != nil {
			return nil, err
		}
		switch strings.ToLower(o.Button) {
		case "", "left":
			return []api.Action{{Action: "left_click", Coordinate: c}}, nil
		case "right":
			return []api.Action{{Action: "right_click", Coordinate: c}}, nil
		case "wheel", "middle":
			return []api.Action{{Action: "middle_click", Coordinate: c}}, nil
		case "back":
			return []api.Action{{Action: "mouse_move", Coordinate: c}, {Action: "key", Text: "alt+Left"}}, nil
		case "forward":
			return []api.Action{{Action: "mouse_move", Coordinate: c}, {Action: "key", Text: "alt+Right"}}, nil
		}
		return nil, api.Invalid("button", "%q: want left, right, wheel, back or forward", o.Button)
	case "double_click":
		c, err := point()
		if err != nil {
			return nil, err
		}
		return []api.Action{{Action: "double_click", Coordinate: c}}, nil
	case "move":
		c, err := point()
		if err != nil {
			return nil, err
		}
		return []api.Action{{Action: "mouse_move", Coordinate: c}}, nil
	case "drag":
		if len(o.Path) < 2 {
			return nil, api.Invalid("path", "a drag needs at least two points")
		}
		if len(o.Path) > 1000 {
			return nil, api.Invalid("path", "%d points: at most 1000", len(o.Path))
		}
		acts := []api.Action{{Action: "left_mouse_down", Coordinate: []int{o.Path[0].X, o.Path[0].Y}}}
		for _, p := range o.Path[1 : len(o.Path)-1] {
			acts = append(acts, api.Action{Action: "mouse_move", Coordinate: []int{p.X, p.Y}})
		}
		last := o.Path[len(o.Path)-1]
		return append(acts, api.Action{Action: "left_mouse_up", Coordinate: []int{last.X, last.Y}}), nil
	case "scroll":
		c, err := point()
		if err != nil {
			return nil, err
		}
		var acts []api.Action
		add := func(px int, neg, pos string) {
			if px == 0 {
				return
			}
			dir := pos
			if px < 0 {
				dir, px = neg, -px
			}
			n := min(max(1, px/openAIScrollStep), api.MaxScrollStep)
			acts = append(acts, api.Action{Action: "scroll", Coordinate: c, ScrollDirection: dir, ScrollAmount: n})
		}
		add(o.ScrollY, "up", "down")
		add(o.ScrollX, "left", "right")
		if len(acts) == 0 {
			return []api.Action{{Action: "mouse_move", Coordinate: c}}, nil
		}
		return acts, nil
	case "type":
		return []api.Action{{Action: "type", Text: o.Text}}, nil
	case "keypress":
		if len(o.Keys) == 0 {
			return nil, api.Invalid("keys", "required for keypress")
		}
		names := make([]string, len(o.Keys))
		for i, k := range o.Keys {
			n, err := openAIKey(k)
			if err != nil {
				return nil, api.Invalid(fmt.Sprintf("keys[%d]", i), "%v", err)
			}
			names[i] = n
		}
		return []api.Action{{Action: "key", Text: strings.Join(names, "+")}}, nil
	case "wait":
		d := 1.0
		if o.MS != nil {
			if *o.MS < 1 || *o.MS > api.MaxWait*1000 {
				return nil, api.Invalid("ms", "%d is out of range 1..%d", *o.MS, api.MaxWait*1000)
			}
			d = float64(*o.MS) / 1000
		}
		return []api.Action{{Action: "wait", Duration: d}}, nil
	case "":
		return nil, api.Invalid("type", "required")
	}
	return nil, api.Invalid("type", "unknown OpenAI computer action %q", o.Type)
}

// openAIKeys are OpenAI's key names that are not also this layer's.
var openAIKeys = map[string]string{
	"ARROWUP": "Up", "ARROWDOWN": "Down", "ARROWLEFT": "Left", "ARROWRIGHT": "Right",
	"CMD": "super", "META": "super", "WIN": "super", "OPTION": "alt",
	"SPACE": "space", "PAGEUP": "Page_Up", "PAGEDOWN": "Page_Down",
	"CAPSLOCK": "Caps_Lock", "PRINTSCREEN": "Print",
}

// openAIKey maps one of OpenAI's key names ("CTRL", "ENTER", "ARROWLEFT",
// "a") onto this layer's. Names are matched without case.
func openAIKey(k string) (string, error) {
	if n, ok := openAIKeys[strings.ToUpper(k)]; ok {
		return n, nil
	}
	// Letters name keys, not characters: "C" is c (shift is its own key).
	name := strings.ToLower(k)
	if name == "+" {
		return "plus", nil
	}
	if _, err := ParseKeyCombo(name); err != nil {
		return "", err
	}
	return name, nil
}

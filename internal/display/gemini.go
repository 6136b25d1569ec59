package display

import (
	"fmt"
	"image"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// Gemini's scroll distances when a call gives none: scroll's in pixels,
// scroll_at's on the grid.
const (
	geminiScrollPixels = 300
	geminiScrollGrid   = 800
)

// geminiSteps translates a function call of Gemini's computer use, Gemini
// 3.5's names and the earlier models' (click_at, type_text_at, …). Its
// coordinates are on the 0-999 grid, mapped onto the screen so that 0 is
// the first pixel and 999 the last: x_px = round(x × (width−1) / 999). The
// browser's history and address bar are driven with their keys on the
// focused window: go_back is alt+Left, go_forward alt+Right, navigate is
// ctrl+l, the address typed, Return. What cannot be done faithfully was
// refused by api.ValidateAction.
func geminiSteps(p string, a api.Action, s scaler) ([]step, error) {
	g := s.gridded(api.GeminiGrid)
	args, an := a.FunctionArgs()
	ap := field(p, an)
	at := func(x, y *int) *image.Point {
		dx, dy := g.toDesktop(*x, *y)
		return &image.Point{X: dx, Y: dy}
	}
	key := func(f, combo string) (step, error) {
		k, err := geminiStroke(field(ap, f), combo)
		return keyStep(k), err
	}
	ret := keyStep(KeyStroke{Key: "ret"})
	switch a.Name {
	case "click", "click_at":
		return []step{clickStep(at(args.X, args.Y), backend.ButtonLeft, 1, nil)}, nil
	case "double_click":
		return []step{clickStep(at(args.X, args.Y), backend.ButtonLeft, 2, nil)}, nil
	case "triple_click":
		return []step{clickStep(at(args.X, args.Y), backend.ButtonLeft, 3, nil)}, nil
	case "middle_click":
		return []step{clickStep(at(args.X, args.Y), backend.ButtonMiddle, 1, nil)}, nil
	case "right_click":
		return []step{clickStep(at(args.X, args.Y), backend.ButtonRight, 1, nil)}, nil
	case "mouse_down", "mouse_up":
		return []step{pointer(at(args.X, args.Y), nil, func(e *inputs) {
			e.button(backend.ButtonLeft, a.Name == "mouse_down")
		})}, nil
	case "move", "hover_at":
		return []step{moveStep(*at(args.X, args.Y), nil)}, nil
	case "type":
		var steps []step
		if args.Text != "" {
			st, err := typeStep(field(ap, "text"), args.Text)
			if err != nil {
				return nil, err
			}
			steps = append(steps, st)
		}
		if args.PressEnter != nil && *args.PressEnter {
			steps = append(steps, ret)
		}
		return steps, nil
	case "type_text_at":
		// Click the field, select what it holds and delete it, type,
		// press Enter: clearing and Enter are on unless turned off.
		steps := []step{clickStep(at(args.X, args.Y), backend.ButtonLeft, 1, nil)}
		if args.ClearBeforeTyping == nil || *args.ClearBeforeTyping {
			steps = append(steps, keyStep(KeyStroke{Modifiers: []string{"ctrl"}, Key: "a"}, KeyStroke{Key: "backspace"}))
		}
		if args.Text != "" {
			st, err := typeStep(field(ap, "text"), args.Text)
			if err != nil {
				return nil, err
			}
			steps = append(steps, st)
		}
		if args.PressEnter == nil || *args.PressEnter {
			steps = append(steps, ret)
		}
		return steps, nil
	case "drag_and_drop":
		var from, to []int
		if args.StartX != nil {
			from, to = []int{*args.StartX, *args.StartY}, []int{*args.EndX, *args.EndY}
		} else {
			from, to = []int{*args.X, *args.Y}, []int{*args.DestinationX, *args.DestinationY}
		}
		return []step{dragStep(from, to, g, nil)}, nil
	case "wait", "wait_5_seconds":
		d := 1.0
		if a.Name == "wait_5_seconds" {
			d = 5
		} else if args.Seconds != nil {
			d = *args.Seconds
		}
		return []step{{kind: stepWait, d: seconds(d)}}, nil
	case "press_key":
		st, err := key("key", args.Key)
		return []step{st}, err
	case "hotkey", "key_combination":
		st, err := key("keys", strings.Join(args.Keys.Names(), "+"))
		return []step{st}, err
	case "key_down", "key_up":
		k, err := geminiStroke(field(ap, "key"), args.Key)
		return []step{holdStep([]KeyStroke{k}, a.Name == "key_down")}, err
	case "take_screenshot":
		return []step{{kind: stepShot, s: s}}, nil
	case "scroll", "scroll_at":
		d, err := ParseScrollDirection(args.Direction)
		if err != nil {
			return nil, api.Invalid(field(ap, "direction"), "%v", err)
		}
		px := geminiScrollPixels
		if a.Name == "scroll_at" {
			// The distance is on the grid, along the scroll.
			m, n := geminiScrollGrid, g.dh
			if args.Magnitude != nil {
				m = *args.Magnitude
			}
			if d == ScrollLeft || d == ScrollRight {
				n = g.dw
			}
			px = onLine(m, api.GeminiGrid, n)
		} else if args.MagnitudeInPixels != nil {
			px = *args.MagnitudeInPixels
		}
		var turns []wheel
		if px > 0 {
			turns = append(turns, wheel{d, max(1, px/openAIScrollStep)})
		}
		return []step{scrollStep(at(args.X, args.Y), nil, turns...)}, nil
	case "scroll_document":
		// Google's reference implementation pages the document with
		// the keyboard too; left and right have no key (refused).
		if args.Direction == "up" {
			return []step{keyStep(KeyStroke{Key: "pgup"})}, nil
		}
		return []step{keyStep(KeyStroke{Key: "pgdn"})}, nil
	case "navigate":
		typed, err := typeStep(field(ap, "url"), args.URL)
		if err != nil {
			return nil, err
		}
		return []step{keyStep(KeyStroke{Modifiers: []string{"ctrl"}, Key: "l"}), typed, ret}, nil
	case "go_back":
		return []step{keyStep(KeyStroke{Modifiers: []string{"alt"}, Key: "left"})}, nil
	case "go_forward":
		return []step{keyStep(KeyStroke{Modifiers: []string{"alt"}, Key: "right"})}, nil
	}
	if why := api.GeminiRefused(a.Name); why != "" {
		return nil, &api.FieldError{Field: field(p, "name"), Detail: fmt.Sprintf("%s is not supported: %s", a.Name, why), Category: api.ErrUnsupported}
	}
	return nil, api.Invalid(field(p, "name"), "unknown Gemini computer-use function %q", a.Name)
}

// geminiStroke reads Gemini's keys: one name ("Enter"), or names joined by
// "+" ("Control+A", "control+c"), held in order while the last is
// pressed. Names are OpenAI's and the browser's as agentKey takes them,
// and this layer's.
func geminiStroke(f, combo string) (KeyStroke, error) {
	var parts []string
	switch {
	case combo == "+":
		parts = []string{"+"}
	case strings.HasSuffix(combo, "++"):
		parts = append(strings.Split(combo[:len(combo)-2], "+"), "+")
	default:
		parts = strings.Split(combo, "+")
	}
	names := make([]string, len(parts))
	for i, part := range parts {
		n, err := agentKey(strings.TrimSpace(part))
		if err != nil {
			return KeyStroke{}, api.Invalid(f, "%v", err)
		}
		names[i] = n
	}
	k, err := ParseKeyCombo(strings.Join(names, "+"))
	if err != nil {
		return KeyStroke{}, api.Invalid(f, "%v", err)
	}
	return k, nil
}

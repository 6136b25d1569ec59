package display

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// runJSON decodes body as the input API does and runs it on a 1280x800
// recording desktop; it returns every event sent, compactly, and the
// waits the run slept.
func runJSON(t *testing.T, body string, sp Space) (string, []time.Duration, *recorder, error) {
	t.Helper()
	a, err := api.DecodeAction([]byte(body))
	if err != nil {
		return "", nil, nil, err
	}
	r := &recorder{w: 1280, h: 800}
	acts := NewActions(r)
	var slept []time.Duration
	acts.sleep = func(_ context.Context, d time.Duration) error {
		slept = append(slept, d)
		return nil
	}
	_, err = acts.Do(context.Background(), "sb", a, sp)
	var all []backend.InputEvent
	for _, evs := range r.events {
		all = append(all, evs...)
	}
	return short(all), slept, r, err
}

type vocabCase struct {
	name, body string
	want       string
}

func checkEvents(t *testing.T, tests []vocabCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, _, err := runJSON(t, tt.body, Space{})
			if err != nil {
				t.Fatalf("%s: %v", tt.body, err)
			}
			if got != tt.want {
				t.Errorf("%s\n got %s\nwant %s", tt.body, got, tt.want)
			}
		})
	}
}

func TestOpenAIEvents(t *testing.T) {
	checkEvents(t, []vocabCase{
		{"click", `{"type":"click","button":"left","x":10,"y":20}`, "m10,20 b+left b-left"},
		{"click without button", `{"type":"click","x":10,"y":20}`, "m10,20 b+left b-left"},
		{"right", `{"type":"click","button":"right","x":1,"y":2}`, "m1,2 b+right b-right"},
		{"wheel", `{"type":"click","button":"wheel","x":1,"y":2}`, "m1,2 b+middle b-middle"},
		{"back", `{"type":"click","button":"back","x":1,"y":2}`, "m1,2 k+alt k+left k-left k-alt"},
		{"forward", `{"type":"click","button":"forward","x":1,"y":2}`, "m1,2 k+alt k+right k-right k-alt"},
		{"ctrl click", `{"type":"click","button":"left","x":10,"y":20,"keys":["CTRL"]}`, "m10,20 k+ctrl b+left b-left k-ctrl"},
		{"ctrl shift click", `{"type":"click","x":10,"y":20,"keys":["CTRL","SHIFT"]}`, "m10,20 k+ctrl k+shift b+left b-left k-shift k-ctrl"},
		{"null keys", `{"type":"click","x":10,"y":20,"keys":null}`, "m10,20 b+left b-left"},
		{"double", `{"type":"double_click","x":3,"y":4}`, "m3,4 b+left b-left b+left b-left"},
		{"shift double", `{"type":"double_click","x":3,"y":4,"keys":["shift"]}`, "m3,4 k+shift b+left b-left b+left b-left k-shift"},
		{"move", `{"type":"move","x":3,"y":4}`, "m3,4"},
		{"alt move", `{"type":"move","x":3,"y":4,"keys":["ALT"]}`, "k+alt m3,4 k-alt"},
		{"drag", `{"type":"drag","path":[{"x":1,"y":1},{"x":5,"y":5},{"x":9,"y":9}]}`, "m1,1 b+left m5,5 m9,9 b-left"},
		{"ctrl drag", `{"type":"drag","path":[{"x":1,"y":1},{"x":9,"y":9}],"keys":["CTRL"]}`, "m1,1 k+ctrl b+left m9,9 b-left k-ctrl"},
		{"scroll", `{"type":"scroll","x":5,"y":6,"scroll_x":0,"scroll_y":300}`,
			"m5,6 b+wheel-down b-wheel-down b+wheel-down b-wheel-down b+wheel-down b-wheel-down"},
		{"scroll left", `{"type":"scroll","x":5,"y":6,"scroll_x":-40,"scroll_y":0}`, "m5,6 b+wheel-left b-wheel-left"},
		{"scroll both", `{"type":"scroll","x":5,"y":6,"scroll_x":100,"scroll_y":-100}`, "m5,6 b+wheel-up b-wheel-up b+wheel-right b-wheel-right"},
		{"ctrl scroll", `{"type":"scroll","x":5,"y":6,"scroll_x":0,"scroll_y":-100,"keys":["CTRL"]}`, "m5,6 k+ctrl b+wheel-up b-wheel-up k-ctrl"},
		{"scroll nowhere", `{"type":"scroll","x":5,"y":6,"scroll_x":0,"scroll_y":0}`, "m5,6"},
		{"type", `{"type":"type","text":"hi"}`, "k+h k-h k+i k-i"},
		{"keypress", `{"type":"keypress","keys":["CTRL","C"]}`, "k+ctrl k+c k-c k-ctrl"},
		{"enter", `{"type":"keypress","keys":["ENTER"]}`, "k+ret k-ret"},
		{"arrow", `{"type":"keypress","keys":["ARROWLEFT"]}`, "k+left k-left"},
		{"screenshot", `{"type":"screenshot"}`, ""},
		{"one-action computer_call", `{"type":"computer_call","call_id":"c1","id":"cu_1","status":"completed","pending_safety_checks":[],
			"action":{"type":"click","x":7,"y":8,"keys":["CTRL"]}}`, "m7,8 k+ctrl b+left b-left k-ctrl"},
		{"batch", `{"type":"computer_call","call_id":"c1","actions":[{"type":"click","x":7,"y":8},{"type":"type","text":"a"},{"type":"keypress","keys":["ENTER"]}]}`,
			"m7,8 b+left b-left k+a k-a k+ret k-ret"},
		{"batch in any vocabulary", `{"actions":[{"action":"left_click","coordinate":[1,2]},{"type":"move","x":3,"y":4},{"name":"click","args":{"x":0,"y":0}}]}`,
			"m1,2 b+left b-left m3,4 m0,0 b+left b-left"},
	})
	// Waits: a second, or ms.
	for body, want := range map[string]time.Duration{`{"type":"wait"}`: time.Second, `{"type":"wait","ms":250}`: 250 * time.Millisecond} {
		if _, slept, _, err := runJSON(t, body, Space{}); err != nil || len(slept) != 1 || slept[0] != want {
			t.Errorf("%s slept %v (%v), want %v", body, slept, err, want)
		}
	}
	// A scaled space maps OpenAI's pixels too.
	if got, _, _, err := runJSON(t, `{"type":"click","x":512,"y":320,"keys":["CTRL"]}`, Space{Width: 1024}); err != nil || got != "m640,400 k+ctrl b+left b-left k-ctrl" {
		t.Errorf("scaled ctrl+click: %s %v", got, err)
	}
	if !IsOpenAI([]byte(`{"type":"click","x":1,"y":1}`)) || !IsOpenAI([]byte(`{"type":"computer_call","action":{"type":"wait"}}`)) ||
		IsOpenAI([]byte(`{"action":"left_click"}`)) || IsOpenAI([]byte(`{"type":"function_call","name":"click"}`)) {
		t.Fatal("IsOpenAI tells the vocabularies apart")
	}
}

func TestAnthropicModifiers(t *testing.T) {
	checkEvents(t, []vocabCase{
		{"keys on a click", `{"action":"left_click","coordinate":[1,2],"keys":["CTRL"]}`, "m1,2 k+ctrl b+left b-left k-ctrl"},
		{"text and keys", `{"action":"right_click","coordinate":[1,2],"text":"shift","keys":["alt"]}`, "m1,2 k+shift k+alt b+right b-right k-alt k-shift"},
		{"move with text", `{"action":"mouse_move","coordinate":[5,6],"text":"shift"}`, "k+shift m5,6 k-shift"},
		{"drag with keys", `{"action":"left_click_drag","start_coordinate":[0,0],"coordinate":[16,0],"keys":["ctrl"]}`,
			"m0,0 k+ctrl b+left m2,0 m4,0 m6,0 m8,0 m10,0 m12,0 m14,0 m16,0 b-left k-ctrl"},
		{"scroll with keys", `{"action":"scroll","coordinate":[3,4],"scroll_direction":"up","scroll_amount":1,"keys":["CTRL"]}`,
			"m3,4 k+ctrl b+wheel-up b-wheel-up k-ctrl"},
	})
}

func TestGeminiEvents(t *testing.T) {
	// 1280x800: x_px = round(x × 1279 / 999), y_px = round(y × 799 / 999).
	checkEvents(t, []vocabCase{
		{"click", `{"name":"click","args":{"x":500,"y":500,"intent":"open the menu"}}`, "m640,400 b+left b-left"},
		{"click_at", `{"name":"click_at","args":{"x":500,"y":500}}`, "m640,400 b+left b-left"},
		{"top left", `{"name":"click","args":{"x":0,"y":0}}`, "m0,0 b+left b-left"},
		{"bottom right", `{"name":"click","args":{"x":999,"y":999}}`, "m1279,799 b+left b-left"},
		{"interactions", `{"type":"function_call","id":"fc_1","name":"click","arguments":{"x":999,"y":0,"intent":"close"}}`, "m1279,0 b+left b-left"},
		{"double", `{"name":"double_click","args":{"x":0,"y":0}}`, "m0,0 b+left b-left b+left b-left"},
		{"triple", `{"name":"triple_click","args":{"x":0,"y":0}}`, "m0,0 b+left b-left b+left b-left b+left b-left"},
		{"middle", `{"name":"middle_click","args":{"x":0,"y":0}}`, "m0,0 b+middle b-middle"},
		{"right", `{"name":"right_click","args":{"x":0,"y":0}}`, "m0,0 b+right b-right"},
		{"down", `{"name":"mouse_down","args":{"x":0,"y":999}}`, "m0,799 b+left"},
		{"up", `{"name":"mouse_up","args":{"x":999,"y":999}}`, "m1279,799 b-left"},
		{"move", `{"name":"move","args":{"x":250,"y":750}}`, "m320,600"},
		{"hover_at", `{"name":"hover_at","args":{"x":250,"y":750}}`, "m320,600"},
		{"type", `{"name":"type","args":{"text":"hi"}}`, "k+h k-h k+i k-i"},
		{"type and enter", `{"name":"type","args":{"text":"hi","press_enter":true}}`, "k+h k-h k+i k-i k+ret k-ret"},
		{"enter alone", `{"name":"type","args":{"text":"","press_enter":true}}`, "k+ret k-ret"},
		{"type_text_at", `{"name":"type_text_at","args":{"x":0,"y":0,"text":"a"}}`,
			"m0,0 b+left b-left k+ctrl k+a k-a k-ctrl k+backspace k-backspace k+a k-a k+ret k-ret"},
		{"type_text_at as is", `{"name":"type_text_at","args":{"x":0,"y":0,"text":"a","press_enter":false,"clear_before_typing":false}}`,
			"m0,0 b+left b-left k+a k-a"},
		{"drag_and_drop", `{"name":"drag_and_drop","args":{"start_x":0,"start_y":0,"end_x":999,"end_y":999}}`,
			"m0,0 b+left m159,99 m319,199 m479,299 m639,399 m799,499 m959,599 m1119,699 m1279,799 b-left"},
		{"drag_and_drop, earlier names", `{"name":"drag_and_drop","args":{"x":0,"y":0,"destination_x":999,"destination_y":999}}`,
			"m0,0 b+left m159,99 m319,199 m479,299 m639,399 m799,499 m959,599 m1119,699 m1279,799 b-left"},
		{"press_key", `{"name":"press_key","args":{"key":"Enter"}}`, "k+ret k-ret"},
		{"press_key combo", `{"name":"press_key","args":{"key":"Control+A"}}`, "k+ctrl k+a k-a k-ctrl"},
		{"hotkey", `{"name":"hotkey","args":{"keys":["Control","Shift","T"]}}`, "k+ctrl k+shift k+t k-t k-shift k-ctrl"},
		{"key_combination", `{"name":"key_combination","args":{"keys":"control+c"}}`, "k+ctrl k+c k-c k-ctrl"},
		{"key_down", `{"name":"key_down","args":{"key":"Shift"}}`, "k+shift"},
		{"key_up", `{"name":"key_up","args":{"key":"Shift"}}`, "k-shift"},
		{"scroll", `{"name":"scroll","args":{"x":500,"y":500,"direction":"down"}}`,
			"m640,400 b+wheel-down b-wheel-down b+wheel-down b-wheel-down b+wheel-down b-wheel-down"},
		{"scroll by pixels", `{"name":"scroll","args":{"x":500,"y":500,"direction":"left","magnitude_in_pixels":100}}`, "m640,400 b+wheel-left b-wheel-left"},
		{"scroll by nothing", `{"name":"scroll","args":{"x":500,"y":500,"direction":"up","magnitude_in_pixels":0}}`, "m640,400"},
		// 400 of the grid on an 800-high screen is 320 pixels: 3 notches.
		{"scroll_at", `{"name":"scroll_at","args":{"x":500,"y":500,"direction":"up","magnitude":400}}`,
			"m640,400 b+wheel-up b-wheel-up b+wheel-up b-wheel-up b+wheel-up b-wheel-up"},
		{"scroll_document", `{"name":"scroll_document","args":{"direction":"down"}}`, "k+pgdn k-pgdn"},
		{"scroll_document up", `{"name":"scroll_document","args":{"direction":"up"}}`, "k+pgup k-pgup"},
		{"take_screenshot", `{"name":"take_screenshot","args":{"intent":"look"}}`, ""},
		{"navigate", `{"name":"navigate","args":{"url":"a.b/c"}}`,
			"k+ctrl k+l k-l k-ctrl k+a k-a k+dot k-dot k+b k-b k+slash k-slash k+c k-c k+ret k-ret"},
		{"go_back", `{"name":"go_back","args":{}}`, "k+alt k+left k-left k-alt"},
		{"go_forward", `{"name":"go_forward"}`, "k+alt k+right k-right k-alt"},
		{"safety decision", `{"name":"click","args":{"x":0,"y":0,"safety_decision":{"decision":"require_confirmation","explanation":"a captcha"}}}`,
			"m0,0 b+left b-left"},
	})
	for body, want := range map[string]time.Duration{
		`{"name":"wait","args":{}}`:                   time.Second,
		`{"name":"wait","args":{"seconds":3}}`:        3 * time.Second,
		`{"name":"wait_5_seconds"}`:                   5 * time.Second,
		`{"name":"wait","args":{"seconds":0.5}}`:      500 * time.Millisecond,
		`{"name":"wait","args":{"intent":"loading"}}`: time.Second,
	} {
		if _, slept, _, err := runJSON(t, body, Space{}); err != nil || len(slept) != 1 || slept[0] != want {
			t.Errorf("%s slept %v (%v), want %v", body, slept, err, want)
		}
	}
	// The grid does not care for the caller's space.
	if got, _, _, err := runJSON(t, `{"name":"click","args":{"x":999,"y":999}}`, Space{Width: 1024}); err != nil || got != "m1279,799 b+left b-left" {
		t.Errorf("a Gemini click with a 1024-wide space: %s %v", got, err)
	}
	// take_screenshot answers the screen.
	a, _ := api.DecodeAction([]byte(`{"name":"take_screenshot"}`))
	res, err := NewActions(&recorder{w: 64, h: 48}).Do(context.Background(), "sb", a, Space{})
	if err != nil || res.Image == nil {
		t.Fatalf("take_screenshot: %v", err)
	}
}

// TestGeminiGrid: 0 lands on the first pixel, 999 on the last, the middle
// of the grid in the middle of the screen, on screens of every shape.
func TestGeminiGrid(t *testing.T) {
	for _, sz := range [][2]int{{1280, 800}, {1024, 768}, {1920, 1080}, {3840, 2160}, {800, 1280}, {1000, 1000}, {640, 480}, {2, 2}} {
		w, h := sz[0], sz[1]
		g := scaler{dw: w, dh: h, sw: w, sh: h}.gridded(api.GeminiGrid)
		for _, c := range []struct{ gx, gy, wx, wy int }{
			{0, 0, 0, 0},
			{999, 999, w - 1, h - 1},
			{999, 0, w - 1, 0},
			{0, 999, 0, h - 1},
			// The centre: round(499.5 × (w−1) / 999) = half of the last pixel, rounded up.
			{500, 500, (500*(w-1)*2 + 999) / 1998, (500*(h-1)*2 + 999) / 1998},
		} {
			if x, y := g.toDesktop(c.gx, c.gy); x != c.wx || y != c.wy {
				t.Errorf("%dx%d: grid (%d,%d) is pixel (%d,%d), want (%d,%d)", w, h, c.gx, c.gy, x, y, c.wx, c.wy)
			}
		}
		// Every grid point lands on the screen, in order, and back.
		last := -1
		for v := range api.GeminiGrid {
			x, _ := g.toDesktop(v, 0)
			if x < last || x < 0 || x >= w {
				t.Fatalf("%dx%d: grid %d is pixel %d after %d", w, h, v, x, last)
			}
			last = x
		}
		if x, y := g.toCaller(w-1, h-1); x != 999 || y != 999 {
			t.Errorf("%dx%d: the last pixel is grid (%d,%d)", w, h, x, y)
		}
	}
	// On 1280x800, the centre of the grid is the pixel right of and below
	// the screen's centre line.
	if x, y := (scaler{dw: 1280, dh: 800, sw: 1280, sh: 800}).gridded(1000).toDesktop(500, 500); x != 640 || y != 400 {
		t.Errorf("1280x800 centre: (%d,%d)", x, y)
	}
}

// TestVocabularyErrors: bad input in any vocabulary is refused before
// anything is sent, naming the field; what hvkube cannot do faithfully is
// ErrUnsupported.
func TestVocabularyErrors(t *testing.T) {
	tests := []struct {
		name, body string
		field      string
		category   error
	}{
		// OpenAI.
		{"openai unknown type", `{"type":"teleport"}`, "type", api.ErrInvalid},
		{"openai no y", `{"type":"click","x":1}`, "x", api.ErrInvalid},
		{"openai no x", `{"type":"move","y":1}`, "x", api.ErrInvalid},
		{"openai off screen", `{"type":"click","x":1280,"y":1}`, "x", api.ErrInvalid},
		{"openai negative", `{"type":"move","x":1,"y":-1}`, "y", api.ErrInvalid},
		{"openai button", `{"type":"click","x":1,"y":1,"button":"thumb"}`, "button", api.ErrInvalid},
		{"openai unknown field", `{"type":"click","x":1,"y":1,"colour":"red"}`, "colour", api.ErrInvalid},
		{"openai field of another action", `{"type":"keypress","keys":["A"],"x":1}`, "x", api.ErrInvalid},
		{"openai unknown key", `{"type":"keypress","keys":["CTRL","WARP"]}`, "keys[1]", api.ErrInvalid},
		{"openai unknown modifier", `{"type":"click","x":1,"y":1,"keys":["HYPER"]}`, "keys[0]", api.ErrInvalid},
		{"openai empty modifier", `{"type":"click","x":1,"y":1,"keys":[""]}`, "keys[0]", api.ErrInvalid},
		{"openai keypress without keys", `{"type":"keypress"}`, "keys", api.ErrInvalid},
		{"openai one-point drag", `{"type":"drag","path":[{"x":1,"y":1}]}`, "path", api.ErrInvalid},
		{"openai drag off screen", `{"type":"drag","path":[{"x":1,"y":1},{"x":1,"y":800}]}`, "path[1].y", api.ErrInvalid},
		{"openai wait 0", `{"type":"wait","ms":0}`, "ms", api.ErrInvalid},
		{"openai coordinate as float", `{"type":"click","x":1.5,"y":1}`, "x", api.ErrInvalid},
		{"openai duplicate type", `{"type":"click","type":"move","x":1,"y":1}`, "type", api.ErrInvalid},
		{"computer_call without actions", `{"type":"computer_call","call_id":"c"}`, "actions", api.ErrInvalid},
		{"computer_call with both", `{"type":"computer_call","action":{"type":"wait"},"actions":[]}`, "action", api.ErrInvalid},
		// Batches.
		{"empty batch", `{"actions":[]}`, "actions", api.ErrInvalid},
		{"bad action in a batch", `{"actions":[{"type":"wait"},{"type":"click","x":5000,"y":1}]}`, "actions[1].x", api.ErrInvalid},
		{"batch in a batch", `{"actions":[{"actions":[{"type":"wait"}]}]}`, "actions[0].actions", api.ErrInvalid},
		{"unknown key in a batch", `{"actions":[{"type":"wait"},{"name":"press_key","args":{"key":"Warp"}}]}`, "actions[1].args.key", api.ErrInvalid},
		{"a batch waits too long", `{"actions":[{"type":"wait","ms":60000},{"name":"wait","args":{"seconds":50}}]}`, "actions[1]", api.ErrInvalid},
		{"two vocabularies", `{"action":"left_click","type":"click"}`, "action", api.ErrInvalid},
		// Gemini.
		{"gemini off the grid", `{"name":"click","args":{"x":1000,"y":5}}`, "args.x", api.ErrInvalid},
		{"gemini negative", `{"name":"click_at","args":{"x":1,"y":-1}}`, "args.y", api.ErrInvalid},
		{"gemini missing y", `{"name":"click","args":{"x":1}}`, "args.y", api.ErrInvalid},
		{"gemini no args", `{"name":"move"}`, "args.x", api.ErrInvalid},
		{"gemini unknown function", `{"name":"teleport","args":{}}`, "name", api.ErrInvalid},
		{"gemini unknown arg", `{"name":"click","args":{"x":1,"y":1,"z":3}}`, "args.z", api.ErrInvalid},
		{"gemini arg of another function", `{"name":"click","args":{"x":1,"y":1,"text":"a"}}`, "args.text", api.ErrInvalid},
		{"gemini type without text", `{"name":"type","args":{}}`, "args.text", api.ErrInvalid},
		{"gemini type at a point", `{"name":"type","args":{"text":"a","x":1,"y":1}}`, "args.x", api.ErrInvalid},
		{"gemini unknown key", `{"name":"hotkey","args":{"keys":["Control","Warp"]}}`, "args.keys", api.ErrInvalid},
		{"gemini empty keys", `{"name":"hotkey","args":{"keys":[]}}`, "args.keys", api.ErrInvalid},
		{"gemini bad direction", `{"name":"scroll","args":{"x":1,"y":1,"direction":"inward"}}`, "args.direction", api.ErrInvalid},
		{"gemini magnitude", `{"name":"scroll_at","args":{"x":1,"y":1,"direction":"up","magnitude":1000}}`, "args.magnitude", api.ErrInvalid},
		{"gemini half a drag", `{"name":"drag_and_drop","args":{"start_x":1,"start_y":1,"end_x":2}}`, "args.end_y", api.ErrInvalid},
		{"gemini mixed drag", `{"name":"drag_and_drop","args":{"start_x":1,"start_y":1,"end_x":2,"end_y":2,"destination_x":3}}`, "args.destination_x", api.ErrInvalid},
		{"gemini wait too long", `{"name":"wait","args":{"seconds":101}}`, "args.seconds", api.ErrInvalid},
		{"gemini url with a newline", `{"name":"navigate","args":{"url":"a.b\nrm -rf"}}`, "args.url", api.ErrInvalid},
		{"gemini url missing", `{"name":"navigate","args":{}}`, "args.url", api.ErrInvalid},
		{"gemini args and arguments", `{"type":"function_call","name":"click","args":{"x":1,"y":1}}`, "args", api.ErrInvalid},
		{"gemini arguments without type", `{"name":"click","arguments":{"x":1,"y":1}}`, "arguments", api.ErrInvalid},
		{"gemini interactions off the grid", `{"type":"function_call","name":"click","arguments":{"x":1,"y":1000}}`, "arguments.y", api.ErrInvalid},
		{"gemini coordinate as text", `{"name":"click","args":{"x":"1","y":1}}`, "args.x", api.ErrInvalid},
		{"gemini search", `{"name":"search","args":{}}`, "name", api.ErrUnsupported},
		{"gemini open_web_browser", `{"name":"open_web_browser"}`, "name", api.ErrUnsupported},
		{"gemini mobile", `{"name":"long_press","args":{"x":1,"y":1}}`, "name", api.ErrUnsupported},
		{"gemini sideways page", `{"name":"scroll_document","args":{"direction":"left"}}`, "args.direction", api.ErrUnsupported},
		// Anthropic.
		{"anthropic keys on a key", `{"action":"key","text":"a","keys":["CTRL"]}`, "keys", api.ErrInvalid},
		{"anthropic modifiers on mouse down", `{"action":"left_mouse_down","text":"shift"}`, "text", api.ErrInvalid},
		{"anthropic unknown modifier key", `{"action":"left_click","keys":["WARP"]}`, "keys[0]", api.ErrInvalid},
		{"anthropic OpenAI field", `{"action":"left_click","x":1}`, "x", api.ErrInvalid},
		{"gemini name as an action", `{"action":"click_at","coordinate":[1,1]}`, "action", api.ErrInvalid},
		{"no action at all", `{}`, "action", api.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, r, err := runJSON(t, tt.body, Space{})
			if !errors.Is(err, tt.category) || api.FieldOf(err) != tt.field {
				t.Fatalf("%s: got %v (field %q), want %v naming %s", tt.body, err, api.FieldOf(err), tt.category, tt.field)
			}
			if tt.category == api.ErrUnsupported && errors.Is(err, api.ErrInvalid) {
				t.Fatalf("%s: %v is both unsupported and invalid", tt.body, err)
			}
			if r != nil && len(r.events) != 0 {
				t.Fatalf("events sent for bad input: %v", r.events)
			}
		})
	}
}

// TestBatchStopsAtFailure: a batch that fails part way stops there; what it
// pressed (a held button, Gemini's key_down, an OpenAI modifier) is
// released, and the actions after the failure are not sent.
func TestBatchStopsAtFailure(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
		// wantBefore are the events delivered before the failure.
		wantBefore string
		// sends: the input, and the release when something was held.
		sends int
	}{
		{"mixed", `{"actions":[
			{"action":"left_mouse_down","coordinate":[3,3]},
			{"name":"key_down","args":{"key":"Control"}},
			{"type":"move","x":9,"y":9,"keys":["SHIFT"]},
			{"type":"type","text":"grüße"},
			{"type":"click","x":1,"y":1},
			{"name":"key_up","args":{"key":"Control"}}]}`,
			"m3,3 b+left k+ctrl k+shift m9,9 k-shift", 2},
		{"computer_call", `{"type":"computer_call","call_id":"c","actions":[
			{"type":"drag","path":[{"x":1,"y":1},{"x":2,"y":2}],"keys":["CTRL"]},
			{"type":"type","text":"déjà"},
			{"type":"keypress","keys":["ENTER"]}]}`,
			"m1,1 k+ctrl b+left m2,2 b-left k-ctrl", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := api.DecodeAction([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			r := &recorder{w: 100, h: 100, typeErr: errInjected}
			_, err = NewActions(r).Do(context.Background(), "sb", a, Space{})
			if !errors.Is(err, errInjected) {
				t.Fatalf("got %v, want the failure of the typing", err)
			}
			if len(r.events) != tt.sends {
				t.Fatalf("sends %v: want %d", r.events, tt.sends)
			}
			if got := short(r.events[0]); got != tt.wantBefore {
				t.Errorf("before the failure\n got %s\nwant %s", got, tt.wantBefore)
			}
			if d := r.down(); len(d) > 0 {
				t.Errorf("%v still held after the failure (sent: %v)", d, r.events)
			}
		})
	}
	// Every event of a mixed batch failing in turn leaves nothing held.
	a, err := api.DecodeAction([]byte(`{"actions":[{"name":"mouse_down","args":{"x":1,"y":1}},{"name":"key_down","args":{"key":"Shift"}},
		{"type":"drag","path":[{"x":1,"y":1},{"x":5,"y":5}],"keys":["CTRL","ALT"]},{"type":"scroll","x":3,"y":3,"scroll_x":0,"scroll_y":200,"keys":["CTRL"]},
		{"name":"key_up","args":{"key":"Shift"}},{"name":"mouse_up","args":{"x":2,"y":2}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	ok := &recorder{w: 100, h: 100}
	if _, err := NewActions(ok).Do(context.Background(), "sb", a, Space{}); err != nil || ok.sends != 1 {
		t.Fatalf("the batch: %v, %d sends, want one", err, ok.sends)
	}
	if d := ok.down(); len(d) > 0 {
		t.Fatalf("a batch that releases what it pressed leaves %v down", d)
	}
	for n := 1; n <= ok.sent; n++ {
		ctx, cancel := context.WithCancel(context.Background())
		r := &recorder{w: 100, h: 100, failAt: n, onFail: cancel}
		_, err := NewActions(r).Do(ctx, "sb", a, Space{})
		cancel()
		if !errors.Is(err, errInjected) {
			t.Fatalf("event %d failed: got %v", n, err)
		}
		if d := r.down(); len(d) > 0 {
			t.Errorf("event %d of %d failed: %v still held", n, ok.sent, d)
		}
	}
	// A key_down that succeeds stays down: its key_up may come later.
	a, _ = api.DecodeAction([]byte(`{"name":"key_down","args":{"key":"Shift"}}`))
	r := &recorder{w: 100, h: 100}
	if _, err := NewActions(r).Do(context.Background(), "sb", a, Space{}); err != nil || fmt.Sprint(r.down()) != "[shift]" {
		t.Fatalf("key_down: %v, down %v", err, r.down())
	}
}

func TestIntents(t *testing.T) {
	a, err := api.DecodeAction([]byte(`{"intent":"log in","actions":[{"name":"click","args":{"x":1,"y":1,"intent":"focus the name field"}},
		{"type":"type","text":"me"},{"type":"function_call","name":"type","arguments":{"text":"pw","press_enter":true,"intent":"submit"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(a.Intents(), " | "); got != "log in | focus the name field | submit" {
		t.Errorf("intents %q", got)
	}
	if got := a.Describe(); got != "a batch of 3 actions" {
		t.Errorf("describe %q", got)
	}
}

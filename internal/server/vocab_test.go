package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
)

// vocabDesk is a fake 1280x800 desktop that records the input events
// the action layer sends it and what they leave pressed; typing through
// the guest fails (to fail a batch part way).
type vocabDesk struct {
	Sandboxes
	mu     sync.Mutex
	events []string
	down   []string
	x, y   int
}

func (d *vocabDesk) Screenshot(context.Context, string, backend.ScreenshotOptions) ([]byte, string, error) {
	var b bytes.Buffer
	png.Encode(&b, image.NewGray(image.Rect(0, 0, 8, 5)))
	return b.Bytes(), "image/png", nil
}

func (d *vocabDesk) ScreenSize(context.Context, string) (int, int, error) { return 1280, 800, nil }

func (d *vocabDesk) SendInput(_ context.Context, _ string, evs []backend.InputEvent) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range evs {
		sign := map[bool]string{true: "+", false: "-"}[e.Down]
		switch e.Kind {
		case backend.EventMove:
			d.x, d.y = e.X, e.Y
			d.events = append(d.events, fmt.Sprintf("m%d,%d", e.X, e.Y))
			continue
		case backend.EventButton:
			d.events = append(d.events, "b"+sign+e.Button)
		case backend.EventKey:
			d.events = append(d.events, "k"+sign+e.Key)
		}
		i := slices.Index(d.down, e.Key+e.Button)
		switch {
		case e.Down && i < 0:
			d.down = append(d.down, e.Key+e.Button)
		case !e.Down && i >= 0:
			d.down = slices.Delete(d.down, i, i+1)
		}
	}
	return nil
}

func (d *vocabDesk) TypeText(context.Context, string, string) error {
	return errors.New("the guest agent does not answer")
}

func (d *vocabDesk) CursorPosition(context.Context, string) (int, int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.x, d.y, nil
}

func (d *vocabDesk) take() (events string, down []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	events, down = strings.Join(d.events, " "), slices.Clone(d.down)
	d.events = nil
	return events, down
}

func startVocabDesk(t *testing.T) (*testServer, *vocabDesk) {
	t.Helper()
	d := &vocabDesk{}
	ts := start(t, Options{Sandboxes: d, Actions: display.NewActions(d)})
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "desk"
	api.Default(sb)
	if _, err := ts.st.Create(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	return ts, d
}

// TestInputVocabularies: POST .../input takes Anthropic's, OpenAI's and
// Gemini's actions and batches of them, told apart by what names the
// action, and answers with the intents they gave.
func TestInputVocabularies(t *testing.T) {
	ts, d := startVocabDesk(t)
	for _, tt := range []struct {
		name, query, body string
		events            string
		answer            string
	}{
		{"anthropic", "", `{"action":"left_click","coordinate":[10,20]}`, "m10,20 b+left b-left", `{"ok":true}`},
		{"anthropic with keys", "", `{"action":"left_click","coordinate":[10,20],"keys":["CTRL"]}`, "m10,20 k+ctrl b+left b-left k-ctrl", `{"ok":true}`},
		{"openai ctrl+click", "", `{"type":"click","button":"left","x":10,"y":20,"keys":["CTRL"]}`, "m10,20 k+ctrl b+left b-left k-ctrl", `{"ok":true}`},
		{"openai scaled", "?width=640", `{"type":"double_click","x":320,"y":200,"keys":["SHIFT"]}`,
			"m641,401 k+shift b+left b-left b+left b-left k-shift", `{"ok":true}`},
		{"openai computer_call with one action", "", `{"type":"computer_call","id":"cu_1","call_id":"call_1","status":"completed","pending_safety_checks":[],
			"action":{"type":"scroll","x":5,"y":5,"scroll_x":0,"scroll_y":-100,"keys":["CTRL"]}}`,
			"m5,5 k+ctrl b+wheel-up b-wheel-up k-ctrl", `{"ok":true}`},
		{"openai batch", "", `{"type":"computer_call","call_id":"call_2","actions":[
			{"type":"drag","path":[{"x":1,"y":1},{"x":3,"y":3}],"keys":["ALT"]},{"type":"keypress","keys":["CTRL","S"]}]}`,
			"m1,1 k+alt b+left m3,3 b-left k-alt k+ctrl k+s k-s k-ctrl", `{"ok":true}`},
		{"gemini corner", "", `{"name":"click","args":{"x":999,"y":999,"intent":"the corner"}}`, "m1279,799 b+left b-left",
			`{"ok":true,"intents":["the corner"]}`},
		{"gemini grid ignores width", "?width=640", `{"name":"move","args":{"x":0,"y":999}}`, "m0,799", `{"ok":true}`},
		{"gemini interactions", "", `{"type":"function_call","id":"fc_1","name":"type_text_at","arguments":{"x":500,"y":0,"text":"a","press_enter":false,"intent":"fill"}}`,
			"m640,0 b+left b-left k+ctrl k+a k-a k-ctrl k+backspace k-backspace k+a k-a", `{"ok":true,"intents":["fill"]}`},
		{"gemini go_back", "", `{"name":"go_back","args":{}}`, "k+alt k+left k-left k-alt", `{"ok":true}`},
		{"mixed batch", "", `{"intent":"select all","actions":[{"name":"key_down","args":{"key":"Control"}},{"action":"key","text":"a"},
			{"name":"key_up","args":{"key":"Control"}},{"type":"move","x":3,"y":4},{"action":"cursor_position"}]}`,
			"k+ctrl k+a k-a k-ctrl m3,4", `{"ok":true,"coordinate":[3,4],"intents":["select all"]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := ts.do(t, "POST", "/api/v1/sandboxes/desk/input"+tt.query, "application/json", tt.body)
			if code != http.StatusOK || strings.TrimSpace(string(body)) != tt.answer {
				t.Fatalf("%d %s, want 200 %s", code, body, tt.answer)
			}
			if evs, down := d.take(); evs != tt.events || len(down) > 0 {
				t.Errorf("events\n got %s\nwant %s\n(held after: %v)", evs, tt.events, down)
			}
		})
	}
	// Gemini's take_screenshot answers the screen.
	code, h, body := ts.do(t, "POST", "/api/v1/sandboxes/desk/input", "application/json", `{"name":"take_screenshot","args":{"intent":"look"}}`)
	if code != http.StatusOK || h.Get("Content-Type") != "image/png" || !bytes.HasPrefix(body, []byte("\x89PNG")) {
		t.Errorf("take_screenshot: %d %s", code, h.Get("Content-Type"))
	}
}

// TestInputVocabularyErrors: bad input in any vocabulary is a 400 naming
// the field; what hvkube cannot do faithfully, a 501; nothing is sent.
func TestInputVocabularyErrors(t *testing.T) {
	ts, d := startVocabDesk(t)
	for _, tt := range []struct {
		body  string
		code  int
		field string
	}{
		{`{"name":"click","args":{"x":1000,"y":5}}`, 400, "args.x"},
		{`{"name":"click","args":{"x":5}}`, 400, "args.y"},
		{`{"name":"teleport","args":{}}`, 400, "name"},
		{`{"name":"scroll","args":{"x":1,"y":1,"direction":"inward"}}`, 400, "args.direction"},
		{`{"name":"hotkey","args":{"keys":["Control","Hyper"]}}`, 400, "args.keys"},
		{`{"name":"search","args":{}}`, 501, "name"},
		{`{"name":"open_web_browser"}`, 501, "name"},
		{`{"name":"scroll_document","args":{"direction":"right"}}`, 501, "args.direction"},
		{`{"type":"click","x":1}`, 400, "x"},
		{`{"type":"click","x":1,"y":1,"keys":["CTRL","WARP"]}`, 400, "keys[1]"},
		{`{"type":"click","x":1280,"y":1}`, 400, "x"},
		{`{"type":"teleport"}`, 400, "type"},
		{`{"type":"computer_call","actions":[{"type":"wait"},{"type":"move","x":1,"y":900}]}`, 400, "actions[1].y"},
		{`{"type":"computer_call","actions":[]}`, 400, "actions"},
		{`{"actions":[{"name":"click","args":{"x":1,"y":1}},{"action":"exec","command":["ls"]}]}`, 400, "actions[1].action"},
		{`{"action":"teleport"}`, 400, "action"},
		{`{"action":"left_click","x":1}`, 400, "x"},
		{`{}`, 400, "action"},
		{``, 400, ""},
	} {
		code, _, body := ts.do(t, "POST", "/api/v1/sandboxes/desk/input", "application/json", tt.body)
		var e errorBody
		json.Unmarshal(body, &e)
		if code != tt.code || e.Field != tt.field {
			t.Errorf("%s: %d %s, want %d naming %q", tt.body, code, body, tt.code, tt.field)
		}
	}
	if evs, _ := d.take(); evs != "" {
		t.Errorf("bad input sent %s", evs)
	}
}

// TestInputBatchFailsPartWay: a batch stops at the action that fails; what
// the actions before it pressed is released, and the ones after it are
// not sent.
func TestInputBatchFailsPartWay(t *testing.T) {
	ts, d := startVocabDesk(t)
	code, _, body := ts.do(t, "POST", "/api/v1/sandboxes/desk/input", "application/json", `{"type":"computer_call","actions":[
		{"name":"mouse_down","args":{"x":0,"y":0}},
		{"type":"move","x":9,"y":9,"keys":["SHIFT"]},
		{"name":"key_down","args":{"key":"Control"}},
		{"type":"type","text":"naïve"},
		{"type":"click","x":1,"y":1},
		{"name":"key_up","args":{"key":"Control"}}]}`)
	if code != http.StatusInternalServerError || !strings.Contains(string(body), "guest agent") {
		t.Fatalf("%d %s, want 500 with the typing's failure", code, body)
	}
	evs, down := d.take()
	if want := "m0,0 b+left k+shift m9,9 k-shift k+ctrl k-ctrl b-left"; evs != want || len(down) > 0 {
		t.Errorf("events\n got %s\nwant %s\n(held after: %v)", evs, want, down)
	}
}

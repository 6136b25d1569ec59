package display

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// recorder is a Desktop that records what the action layer sends: the
// translation from actions to events is checked here, delivery by the
// backends' conformance suite.
type recorder struct {
	mu     sync.Mutex
	w, h   int
	events [][]backend.InputEvent
	typed  []string
	x, y   int
	// frames are the screenshots served in turn (the last one repeats).
	frames [][]byte
	shots  int
	// failAt, when not 0, makes the failAt-th event sent (counting from 1
	// over all calls) fail: the events before it are delivered, and
	// onFail (if set) runs, as when the request ends mid-way.
	failAt int
	onFail func()
	sent   int // events delivered or failed so far
	sizes  int // ScreenSize calls
	sends  int // SendInput calls
	// typeErr, when set, is what TypeText fails with.
	typeErr error
}

func (r *recorder) Screenshot(ctx context.Context, _ string, opts backend.ScreenshotOptions) ([]byte, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.frames) == 0 {
		img := image.NewRGBA(image.Rect(0, 0, r.w, r.h))
		for y := range r.h {
			for x := range r.w {
				img.Set(x, y, color.RGBA{uint8(x), uint8(y), 0, 255})
			}
		}
		var b bytes.Buffer
		png.Encode(&b, img)
		return b.Bytes(), "image/png", nil
	}
	f := r.frames[min(r.shots, len(r.frames)-1)]
	r.shots++
	return f, "image/png", nil
}

func (r *recorder) ScreenSize(context.Context, string) (int, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sizes++
	return r.w, r.h, nil
}

var errInjected = errors.New("injected failure")

func (r *recorder) SendInput(ctx context.Context, _ string, evs []backend.InputEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sends++
	if err := ctx.Err(); err != nil {
		return err
	}
	var err error
	if r.failAt > r.sent && r.failAt <= r.sent+len(evs) {
		evs = evs[:r.failAt-r.sent-1]
		err = errInjected
		if r.onFail != nil {
			r.onFail()
		}
	}
	r.sent += len(evs)
	if err != nil {
		r.sent++ // the failed event
	}
	r.events = append(r.events, evs)
	for _, e := range evs {
		if e.Kind == backend.EventMove {
			r.x, r.y = e.X, e.Y
		}
	}
	return err
}

// down lists the keys and buttons the delivered events leave pressed.
func (r *recorder) down() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var held []string
	for _, evs := range r.events {
		for _, e := range evs {
			name := e.Key + e.Button
			if e.Kind == backend.EventMove {
				continue
			}
			i := slices.Index(held, name)
			switch {
			case e.Down && i < 0:
				held = append(held, name)
			case !e.Down && i >= 0:
				held = slices.Delete(held, i, i+1)
			}
		}
	}
	return held
}

func (r *recorder) TypeText(_ context.Context, _ string, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.typeErr != nil {
		return r.typeErr
	}
	r.typed = append(r.typed, text)
	return nil
}

func (r *recorder) CursorPosition(context.Context, string) (int, int, error) { return r.x, r.y, nil }

// short writes events compactly: m100,200 b+left b-left k+shift k-a.
func short(evs []backend.InputEvent) string {
	var parts []string
	for _, e := range evs {
		sign := "-"
		if e.Down {
			sign = "+"
		}
		switch e.Kind {
		case backend.EventMove:
			parts = append(parts, fmt.Sprintf("m%d,%d", e.X, e.Y))
		case backend.EventButton:
			parts = append(parts, "b"+sign+e.Button)
		case backend.EventKey:
			parts = append(parts, "k"+sign+e.Key)
		}
	}
	return strings.Join(parts, " ")
}

func TestActionEvents(t *testing.T) {
	tests := []struct {
		name string
		a    api.Action
		sp   Space
		want string
	}{
		{"click", api.Action{Action: "left_click", Coordinate: []int{10, 20}}, Space{}, "m10,20 b+left b-left"},
		{"click here", api.Action{Action: "left_click"}, Space{}, "b+left b-left"},
		{"shift click", api.Action{Action: "left_click", Coordinate: []int{1, 2}, Text: "shift"}, Space{}, "m1,2 k+shift b+left b-left k-shift"},
		{"right", api.Action{Action: "right_click", Coordinate: []int{1, 2}}, Space{}, "m1,2 b+right b-right"},
		{"middle", api.Action{Action: "middle_click", Coordinate: []int{1, 2}}, Space{}, "m1,2 b+middle b-middle"},
		{"double", api.Action{Action: "double_click", Coordinate: []int{1, 2}}, Space{}, "m1,2 b+left b-left b+left b-left"},
		{"triple", api.Action{Action: "triple_click"}, Space{}, "b+left b-left b+left b-left b+left b-left"},
		{"move", api.Action{Action: "mouse_move", Coordinate: []int{5, 6}}, Space{}, "m5,6"},
		{"down", api.Action{Action: "left_mouse_down", Coordinate: []int{5, 6}}, Space{}, "m5,6 b+left"},
		{"up", api.Action{Action: "left_mouse_up"}, Space{}, "b-left"},
		{"drag", api.Action{Action: "left_click_drag", StartCoordinate: []int{0, 0}, Coordinate: []int{80, 8}}, Space{},
			"m0,0 b+left m10,1 m20,2 m30,3 m40,4 m50,5 m60,6 m70,7 m80,8 b-left"},
		{"scroll default", api.Action{Action: "scroll", Coordinate: []int{3, 4}, ScrollDirection: "down"}, Space{},
			"m3,4 b+wheel-down b-wheel-down b+wheel-down b-wheel-down b+wheel-down b-wheel-down"},
		{"scroll with ctrl", api.Action{Action: "scroll", ScrollDirection: "up", ScrollAmount: 1, Text: "ctrl"}, Space{},
			"k+ctrl b+wheel-up b-wheel-up k-ctrl"},
		{"key combo", api.Action{Action: "key", Text: "ctrl+shift+t"}, Space{}, "k+ctrl k+shift k+t k-t k-shift k-ctrl"},
		{"keys", api.Action{Action: "key", Text: "Return a"}, Space{}, "k+ret k-ret k+a k-a"},
		{"type", api.Action{Action: "type", Text: "aB"}, Space{}, "k+a k-a k+shift k+b k-b k-shift"},
		// 1280x800 seen as 1024x640: points map to the pixel under their centre.
		{"scaled click", api.Action{Action: "left_click", Coordinate: []int{512, 320}}, Space{Width: 1024}, "m640,400 b+left b-left"},
		{"scaled corner", api.Action{Action: "mouse_move", Coordinate: []int{1023, 639}}, Space{Width: 1024}, "m1279,799"},
		{"scaled origin", api.Action{Action: "mouse_move", Coordinate: []int{0, 0}}, Space{Width: 1024, Height: 640}, "m0,0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{w: 1280, h: 800}
			if _, err := NewActions(r).Do(context.Background(), "sb", tt.a, tt.sp); err != nil {
				t.Fatal(err)
			}
			var all []backend.InputEvent
			for _, evs := range r.events {
				all = append(all, evs...)
			}
			if got := short(all); got != tt.want {
				t.Errorf("events\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestActionErrors(t *testing.T) {
	tests := []struct {
		name  string
		a     api.Action
		sp    Space
		field string
	}{
		{"off screen", api.Action{Action: "left_click", Coordinate: []int{1280, 1}}, Space{}, "coordinate"},
		{"off the scaled screen", api.Action{Action: "left_click", Coordinate: []int{1024, 1}}, Space{Width: 1024}, "coordinate"},
		{"unknown key", api.Action{Action: "key", Text: "ctrl+warp"}, Space{}, "text"},
		{"bad modifier", api.Action{Action: "left_click", Text: "warp"}, Space{}, "text"},
		{"unknown action", api.Action{Action: "teleport"}, Space{}, "action"},
		{"workflow only", api.Action{Action: "exec", Command: []string{"true"}}, Space{}, "action"},
		{"control character", api.Action{Action: "type", Text: "a\x07"}, Space{}, "text"},
		{"width too big", api.Action{Action: "mouse_move", Coordinate: []int{1, 1}}, Space{Width: 1 << 20}, "width"},
		{"zoom outside", api.Action{Action: "zoom", Region: []int{0, 0, 2000, 10}}, Space{}, "region"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{w: 1280, h: 800}
			_, err := NewActions(r).Do(context.Background(), "sb", tt.a, tt.sp)
			if !errors.Is(err, api.ErrInvalid) || api.FieldOf(err) != tt.field {
				t.Fatalf("got %v (field %q), want ErrInvalid naming %s", err, api.FieldOf(err), tt.field)
			}
			if len(r.events) != 0 {
				t.Fatalf("events sent for bad input: %v", r.events)
			}
		})
	}
}

func TestActionQueries(t *testing.T) {
	ctx := context.Background()
	r := &recorder{w: 1280, h: 800, x: 1279, y: 400}
	a := NewActions(r)
	res, err := a.Do(ctx, "sb", api.Action{Action: "cursor_position"}, Space{Width: 1024})
	if err != nil || fmt.Sprint(res.Coordinate) != "[1023 320]" {
		t.Fatalf("cursor_position in a 1024-wide space: %v %v", res.Coordinate, err)
	}
	res, err = a.Do(ctx, "sb", api.Action{Action: "type", Text: "grüße"}, Space{})
	if err != nil || len(r.typed) != 1 || r.typed[0] != "grüße" {
		t.Fatalf("non-ASCII text goes through the guest: %v %v", r.typed, err)
	}
	// zoom returns the region at the desktop's resolution: a 1024-wide
	// region [0,0,512,320] is 640x400 desktop pixels.
	res, err = a.Do(ctx, "sb", api.Action{Action: "zoom", Region: []int{0, 0, 512, 320}}, Space{Width: 1024})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(res.Image))
	if err != nil || img.Bounds().Size() != image.Pt(640, 400) || res.ContentType != "image/png" {
		t.Fatalf("zoom: %v %v %s", img.Bounds(), err, res.ContentType)
	}
	if c := color.RGBAModel.Convert(img.At(10, 20)).(color.RGBA); c.R != 10 || c.G != 20 {
		t.Fatalf("zoom pixel (10,20) = %v", c)
	}
	res, err = a.Do(ctx, "sb", api.Action{Action: "zoom", Region: []int{0, 0, 320, 200}}, Space{Width: 640})
	if err != nil {
		t.Fatal(err)
	}
	if img, err := png.Decode(bytes.NewReader(res.Image)); err != nil || img.Bounds().Size() != image.Pt(640, 400) {
		t.Fatalf("zoom of a quarter of a 640-wide space: %v %v", img.Bounds(), err)
	}
}

func TestHoldReleasesWhenCancelled(t *testing.T) {
	r := &recorder{w: 100, h: 100}
	a := NewActions(r)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := a.Do(ctx, "sb", api.Action{Action: "hold_key", Text: "shift", Duration: 30}, Space{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hold cut short: %v", err)
	}
	if len(r.events) != 2 || short(r.events[0]) != "k+shift" || short(r.events[1]) != "k-shift" {
		t.Fatalf("events %v: the key must be released", r.events)
	}
}

func TestSettledScreenshot(t *testing.T) {
	ctx := context.Background()
	frame := func(n byte) []byte { return []byte{n} }
	// Three changes, then still: the last frame comes back.
	r := &recorder{w: 10, h: 10, frames: [][]byte{frame(1), frame(2), frame(3), frame(4)}}
	img, _, err := NewActions(r).Screenshot(ctx, "sb", ShotOptions{Settle: true, SettleTimeout: 5 * time.Second})
	if err != nil || !bytes.Equal(img, frame(4)) {
		t.Fatalf("settled on %v (%v), want the last frame", img, err)
	}
	if r.shots < 4+int(SettleQuiet/settlePoll)-1 {
		t.Fatalf("returned after %d samples: too early to know the screen is still", r.shots)
	}

	// A screen that never stops changing returns at the timeout.
	var frames [][]byte
	for i := range 1000 {
		frames = append(frames, frame(byte(i)))
	}
	r = &recorder{w: 10, h: 10, frames: frames}
	start := time.Now()
	if _, _, err := NewActions(r).Screenshot(ctx, "sb", ShotOptions{Settle: true, SettleTimeout: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("a changing screen held the call %v", el)
	}
	if _, _, err := NewActions(r).Screenshot(ctx, "sb", ShotOptions{Settle: true, SettleTimeout: time.Hour}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("an hour's settle: %v", err)
	}
}

// TestInputReleasedOnError fails every event of inputs that press keys or
// buttons in turn, with the request's context ending at the failure:
// afterwards nothing is held.
func TestInputReleasedOnError(t *testing.T) {
	for _, tt := range []struct {
		name string
		acts []api.Action
	}{
		{"shift click", []api.Action{{Action: "left_click", Coordinate: []int{1, 2}, Text: "shift"}}},
		{"ctrl+alt double click", []api.Action{{Action: "double_click", Text: "ctrl+alt"}}},
		{"drag", []api.Action{{Action: "left_click_drag", StartCoordinate: []int{0, 0}, Coordinate: []int{80, 8}, Text: "shift"}}},
		{"ctrl scroll", []api.Action{{Action: "scroll", ScrollDirection: "up", ScrollAmount: 2, Text: "ctrl"}}},
		{"key combo", []api.Action{{Action: "key", Text: "ctrl+shift+t ctrl+w"}}},
		{"type", []api.Action{{Action: "type", Text: "aBC d"}}},
		{"hold_key", []api.Action{{Action: "hold_key", Text: "ctrl+alt+shift", Duration: 0.01}}},
		{"mouse down", []api.Action{{Action: "left_mouse_down", Coordinate: []int{3, 3}}}},
		{"OpenAI drag", mustOpenAI(t, `{"type":"drag","path":[{"x":1,"y":1},{"x":5,"y":5},{"x":7,"y":5},{"x":9,"y":9}]}`)},
		{"batch", []api.Action{{Action: "left_mouse_down", Coordinate: []int{3, 3}}, {Action: "hold_key", Text: "shift", Duration: 0.01},
			{Action: "mouse_move", Coordinate: []int{9, 9}}, {Action: "left_mouse_up"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A run that succeeds counts the events.
			ok := &recorder{w: 100, h: 100}
			if _, err := NewActions(ok).Run(context.Background(), "sb", tt.acts, Space{}); err != nil {
				t.Fatal(err)
			}
			if ok.sent < 2 {
				t.Fatalf("%d events: nothing to fail part way", ok.sent)
			}
			for n := 1; n <= ok.sent; n++ {
				ctx, cancel := context.WithCancel(context.Background())
				r := &recorder{w: 100, h: 100, failAt: n, onFail: cancel}
				_, err := NewActions(r).Run(ctx, "sb", tt.acts, Space{})
				cancel()
				if !errors.Is(err, errInjected) {
					t.Fatalf("event %d failed: got %v", n, err)
				}
				if d := r.down(); len(d) > 0 {
					t.Errorf("event %d of %d failed: %v still held", n, ok.sent, d)
				}
			}
		})
	}
}

// TestInputReleasedOnErrorOneByOne is the same for inputs sent one action
// at a time (Do), as the MCP tools and workflows send them.
func TestInputReleasedOnErrorOneByOne(t *testing.T) {
	for _, a := range []api.Action{
		{Action: "left_click", Coordinate: []int{1, 2}, Text: "shift"},
		{Action: "left_click_drag", StartCoordinate: []int{0, 0}, Coordinate: []int{80, 8}},
		{Action: "scroll", ScrollDirection: "down", ScrollAmount: 1, Text: "ctrl"},
		{Action: "type", Text: "Ab"},
		{Action: "hold_key", Text: "ctrl+shift", Duration: 0.01},
	} {
		for n := 1; n <= 4; n++ {
			ctx, cancel := context.WithCancel(context.Background())
			r := &recorder{w: 100, h: 100, failAt: n, onFail: cancel}
			_, err := NewActions(r).Do(ctx, "sb", a, Space{})
			cancel()
			if err == nil {
				t.Fatalf("%s: event %d failed, yet no error", a.Action, n)
			}
			if d := r.down(); len(d) > 0 {
				t.Errorf("%s %q: event %d failed: %v still held", a.Action, a.Text, n, d)
			}
		}
	}
}

// TestRunReadsOnce: a batch reads the screen size once and sends its
// input in one call, in order.
func TestRunReadsOnce(t *testing.T) {
	acts := mustOpenAI(t, `{"type":"drag","path":[{"x":1,"y":1},{"x":5,"y":5},{"x":7,"y":5},{"x":9,"y":9}]}`)
	r := &recorder{w: 100, h: 100}
	if _, err := NewActions(r).Run(context.Background(), "sb", acts, Space{}); err != nil {
		t.Fatal(err)
	}
	if r.sizes != 1 || r.sends != 1 {
		t.Fatalf("a drag of %d actions read the screen size %d times and sent %d times, want 1 and 1", len(acts), r.sizes, r.sends)
	}
	if got, want := short(r.events[0]), "m1,1 b+left m5,5 m7,5 m9,9 b-left"; got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	// A bad action anywhere sends nothing.
	r = &recorder{w: 100, h: 100}
	acts = append(acts, api.Action{Action: "mouse_move", Coordinate: []int{100, 1}})
	if _, err := NewActions(r).Run(context.Background(), "sb", acts, Space{}); !errors.Is(err, api.ErrInvalid) || len(r.events) != 0 {
		t.Fatalf("a batch with a bad action: %v, sent %v", err, r.events)
	}
	// Results: the last coordinate and image.
	r = &recorder{w: 100, h: 100, x: 4, y: 5}
	res, err := NewActions(r).Run(context.Background(), "sb", []api.Action{{Action: "cursor_position"}, {Action: "screenshot"}, {Action: "mouse_move", Coordinate: []int{1, 1}}}, Space{})
	if err != nil || fmt.Sprint(res.Coordinate) != "[4 5]" || res.Image == nil || r.sizes != 1 {
		t.Fatalf("batch result %v %d bytes, %d size reads: %v", res.Coordinate, len(res.Image), r.sizes, err)
	}
}

func mustOpenAI(t *testing.T, s string) []api.Action {
	t.Helper()
	if !IsOpenAI([]byte(s)) {
		t.Fatalf("IsOpenAI(%s) is false", s)
	}
	acts, err := FromOpenAI([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return acts
}

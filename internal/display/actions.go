package display

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/clock"
)

// Desktop is what the action layer drives: the screens and raw input of a
// host's sandboxes, by sandbox name. The node implements it over its
// backend; errors follow the backend contract (api.ErrNotFound,
// api.ErrInvalid, api.ErrConflict for a sandbox in the wrong state or held
// by a person).
type Desktop interface {
	Screenshot(ctx context.Context, sandbox string, opts backend.ScreenshotOptions) ([]byte, string, error)
	ScreenSize(ctx context.Context, sandbox string) (width, height int, err error)
	// SendInput delivers raw events in order. While a person holds the
	// sandbox's input it refuses with api.ErrConflict, unless ctx carries
	// that take-over's ID (WithControl).
	SendInput(ctx context.Context, sandbox string, evs []backend.InputEvent) error
	// TypeText types text the key map cannot (beyond ASCII).
	TypeText(ctx context.Context, sandbox, text string) error
	CursorPosition(ctx context.Context, sandbox string) (x, y int, err error)
}

type controlKey struct{}

// WithControl marks input sent with ctx as coming from the holder of the
// take-over id (api.SandboxControl.ID).
func WithControl(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, controlKey{}, id)
}

// ControlFrom returns the take-over ID WithControl put in ctx, or "".
func ControlFrom(ctx context.Context) string {
	id, _ := ctx.Value(controlKey{}).(string)
	return id
}

// Space is the screen space a caller works in. Models are trained on small
// screens (XGA, WXGA): an agent may see the desktop scaled to Width and send
// coordinates in that space; they are mapped back to desktop pixels. Zero
// is the desktop's own space; a zero Height keeps the desktop's aspect.
type Space struct {
	Width, Height int
}

// Result is what an action returns.
type Result struct {
	// Coordinate answers cursor_position, in the caller's space.
	Coordinate []int
	// Image and ContentType answer screenshot and zoom.
	Image       []byte
	ContentType string
}

// ShotOptions shape a screenshot through the action layer.
type ShotOptions struct {
	backend.ScreenshotOptions
	// Settle returns the screen once it has stopped changing (no change
	// for SettleQuiet), or when SettleTimeout (default 3 s, at most 30 s)
	// has passed: the replacement for a fixed sleep after an action.
	Settle        bool
	SettleTimeout time.Duration
}

// Settling bounds.
const (
	DefaultSettleTimeout = 3 * time.Second
	MaxSettleTimeout     = 30 * time.Second
	// SettleQuiet is how long the screen must stay the same.
	SettleQuiet = 200 * time.Millisecond
	settlePoll  = 40 * time.Millisecond
)

// dragSteps is how many pointer moves a drag makes between its ends, so
// that applications see a drag.
const dragSteps = 8

// Actions turns computer-use actions (api.Action) into raw input events
// and screenshots. It is the one action layer under the input API, the MCP
// tools and workflow steps: bounds, scaling, key names and the timing of
// holds live here, and backends only deliver events.
type Actions struct {
	d   Desktop
	enc Encoder
	// sleep waits d or until ctx ends (a test may replace it).
	sleep func(ctx context.Context, d time.Duration) error
}

// NewActions returns the action layer over d.
func NewActions(d Desktop) *Actions {
	return &Actions{d: d, sleep: clock.Sleep}
}

// scaler maps between a caller's space and the desktop.
type scaler struct {
	dw, dh int // desktop
	sw, sh int // caller
}

func (a *Actions) scaler(ctx context.Context, sandbox string, sp Space) (scaler, error) {
	w, h, err := a.d.ScreenSize(ctx, sandbox)
	if err != nil {
		return scaler{}, err
	}
	s := scaler{dw: w, dh: h, sw: w, sh: h}
	if sp.Width < 0 || sp.Width > api.MaxScreenWidth {
		return scaler{}, api.Invalid("width", "%d is out of range 1..%d", sp.Width, api.MaxScreenWidth)
	}
	if sp.Height < 0 || sp.Height > api.MaxScreenHeight {
		return scaler{}, api.Invalid("height", "%d is out of range 1..%d", sp.Height, api.MaxScreenHeight)
	}
	if sp.Width > 0 {
		s.sw = sp.Width
		s.sh = sp.Height
		if s.sh == 0 {
			s.sh = max(1, (h*sp.Width+w/2)/w)
		}
	} else if sp.Height > 0 {
		s.sh = sp.Height
		s.sw = max(1, (w*sp.Height+h/2)/h)
	}
	return s, nil
}

func (s scaler) scaled() bool { return s.sw != s.dw || s.sh != s.dh }

// toDesktop maps a point of the caller's space to the desktop pixel under
// its centre.
func (s scaler) toDesktop(x, y int) (int, int) {
	if !s.scaled() {
		return x, y
	}
	dx := min((2*x+1)*s.dw/(2*s.sw), s.dw-1)
	dy := min((2*y+1)*s.dh/(2*s.sh), s.dh-1)
	return dx, dy
}

// toCaller maps a desktop pixel to the caller's space.
func (s scaler) toCaller(x, y int) (int, int) {
	if !s.scaled() {
		return x, y
	}
	return min(x*s.sw/s.dw, s.sw-1), min(y*s.sh/s.dh, s.sh-1)
}

// Do runs one action on sandbox, with coordinates in sp. Screenshot and
// zoom return images; cursor_position a coordinate; wait sleeps. The
// workflow-only actions (exec, assert) are not the layer's.
func (a *Actions) Do(ctx context.Context, sandbox string, act api.Action, sp Space) (Result, error) {
	s, err := a.scaler(ctx, sandbox, sp)
	if err != nil {
		return Result{}, err
	}
	if err := api.ValidateAction("", act, s.sw, s.sh, false); err != nil {
		return Result{}, err
	}
	switch act.Action {
	case "screenshot":
		opts := ShotOptions{}
		if s.scaled() {
			opts.Width, opts.Height = s.sw, s.sh
		}
		img, ctype, err := a.Screenshot(ctx, sandbox, opts)
		return Result{Image: img, ContentType: ctype}, err
	case "zoom":
		img, err := a.zoom(ctx, sandbox, s, act.Region)
		return Result{Image: img, ContentType: PNG.ContentType()}, err
	case "wait":
		return Result{}, a.sleep(ctx, seconds(act.Duration))
	case "cursor_position":
		x, y, err := a.d.CursorPosition(ctx, sandbox)
		if err != nil {
			return Result{}, err
		}
		x, y = s.toCaller(x, y)
		return Result{Coordinate: []int{x, y}}, nil
	case "type":
		return Result{}, a.typeText(ctx, sandbox, act.Text)
	case "hold_key":
		strokes, err := keysField("text", act.Text)
		if err != nil {
			return Result{}, err
		}
		return Result{}, a.hold(ctx, sandbox, strokes, seconds(act.Duration))
	}
	evs, err := events(act, s)
	if err != nil {
		return Result{}, err
	}
	return Result{}, a.d.SendInput(ctx, sandbox, evs)
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func keysField(field, text string) ([]KeyStroke, error) {
	strokes, err := ParseKeys(text)
	if err != nil {
		return nil, api.Invalid(field, "%v", err)
	}
	return strokes, nil
}

// events turns an action that is only input into its raw events.
func events(act api.Action, s scaler) ([]backend.InputEvent, error) {
	var evs []backend.InputEvent
	move := func(c []int) {
		if c != nil {
			x, y := s.toDesktop(c[0], c[1])
			evs = append(evs, backend.InputEvent{Kind: backend.EventMove, X: x, Y: y})
		}
	}
	button := func(b string, down bool) {
		evs = append(evs, backend.InputEvent{Kind: backend.EventButton, Button: b, Down: down})
	}
	keys := func(ks []KeyEvent) {
		for _, k := range ks {
			evs = append(evs, backend.InputEvent{Kind: backend.EventKey, Key: k.QCode, Down: k.Down})
		}
	}
	// Clicks and scrolls take modifier keys to hold in text ("shift").
	var held []KeyStroke
	if act.Text != "" && act.Action != "key" {
		var err error
		if held, err = keysField("text", act.Text); err != nil {
			return nil, err
		}
	}
	press := func() {
		for _, k := range held {
			keys(k.Press())
		}
	}
	release := func() {
		for i := len(held) - 1; i >= 0; i-- {
			keys(held[i].Release())
		}
	}
	switch act.Action {
	case "mouse_move":
		move(act.Coordinate)
	case "left_click", "right_click", "middle_click", "double_click", "triple_click":
		btn, clicks := backend.ButtonLeft, 1
		switch act.Action {
		case "right_click":
			btn = backend.ButtonRight
		case "middle_click":
			btn = backend.ButtonMiddle
		case "double_click":
			clicks = 2
		case "triple_click":
			clicks = 3
		}
		move(act.Coordinate)
		press()
		for range clicks {
			button(btn, true)
			button(btn, false)
		}
		release()
	case "left_mouse_down", "left_mouse_up":
		move(act.Coordinate)
		button(backend.ButtonLeft, act.Action == "left_mouse_down")
	case "left_click_drag":
		from, to := act.StartCoordinate, act.Coordinate
		move(from)
		press()
		button(backend.ButtonLeft, true)
		for i := 1; i <= dragSteps; i++ {
			move([]int{from[0] + (to[0]-from[0])*i/dragSteps, from[1] + (to[1]-from[1])*i/dragSteps})
		}
		button(backend.ButtonLeft, false)
		release()
	case "scroll":
		d, err := ParseScrollDirection(act.ScrollDirection)
		if err != nil {
			return nil, api.Invalid("scroll_direction", "%v", err)
		}
		amount := act.ScrollAmount
		if amount == 0 {
			amount = 3
		}
		move(act.Coordinate)
		press()
		for range amount {
			button(d.WheelButton(), true)
			button(d.WheelButton(), false)
		}
		release()
	case "key":
		strokes, err := keysField("text", act.Text)
		if err != nil {
			return nil, err
		}
		for _, k := range strokes {
			keys(k.Events())
		}
	default:
		return nil, api.Invalid("action", "%q is not an input action", act.Action)
	}
	return evs, nil
}

// typeText types text as key strokes, or through the guest when the key
// map cannot type it.
func (a *Actions) typeText(ctx context.Context, sandbox, text string) error {
	strokes, err := TypeText(text)
	if errors.Is(err, ErrNotASCII) {
		return a.d.TypeText(ctx, sandbox, text)
	}
	if err != nil {
		return api.Invalid("text", "%v", err)
	}
	evs := make([]backend.InputEvent, 0, 4*len(strokes))
	for _, k := range strokes {
		for _, e := range k.Events() {
			evs = append(evs, backend.InputEvent{Kind: backend.EventKey, Key: e.QCode, Down: e.Down})
		}
	}
	return a.d.SendInput(ctx, sandbox, evs)
}

// hold presses strokes, waits d and releases them; the release is sent even
// when ctx ends first, so that no key stays down.
func (a *Actions) hold(ctx context.Context, sandbox string, strokes []KeyStroke, d time.Duration) error {
	var down, up []backend.InputEvent
	for _, k := range strokes {
		for _, e := range k.Press() {
			down = append(down, backend.InputEvent{Kind: backend.EventKey, Key: e.QCode, Down: true})
		}
	}
	for i := len(strokes) - 1; i >= 0; i-- {
		for _, e := range strokes[i].Release() {
			up = append(up, backend.InputEvent{Kind: backend.EventKey, Key: e.QCode})
		}
	}
	if err := a.d.SendInput(ctx, sandbox, down); err != nil {
		return err
	}
	werr := a.sleep(ctx, d)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := a.d.SendInput(rctx, sandbox, up); err != nil {
		return err
	}
	return werr
}

// zoom returns the region (in the caller's space) of the screen at the
// desktop's full resolution, as PNG.
func (a *Actions) zoom(ctx context.Context, sandbox string, s scaler, region []int) ([]byte, error) {
	// The region's edges, not its pixels' centres, map to the desktop.
	edge := func(v, d, c int) int { return v * d / c }
	r := image.Rect(edge(region[0], s.dw, s.sw), edge(region[1], s.dh, s.sh), edge(region[2], s.dw, s.sw), edge(region[3], s.dh, s.sh))
	return a.Region(ctx, sandbox, r)
}

// Region returns a PNG of r (desktop pixels) of the sandbox's screen.
func (a *Actions) Region(ctx context.Context, sandbox string, r image.Rectangle) ([]byte, error) {
	b, _, err := a.d.Screenshot(ctx, sandbox, backend.ScreenshotOptions{Format: string(PNG)})
	if err != nil {
		return nil, err
	}
	img, _, err := image.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decode screenshot: %w", err)
	}
	r = r.Intersect(img.Bounds())
	if r.Empty() {
		return nil, api.Invalid("region", "outside the screen")
	}
	crop := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	draw.Draw(crop, crop.Bounds(), img, r.Min, draw.Src)
	var out bytes.Buffer
	if err := a.enc.Encode(&out, crop, EncodeOptions{Format: PNG}); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Screenshot returns the sandbox's screen, settled if asked: sampled until
// it has not changed for SettleQuiet, or until the timeout, when the
// latest is returned.
func (a *Actions) Screenshot(ctx context.Context, sandbox string, o ShotOptions) ([]byte, string, error) {
	if !o.Settle {
		return a.d.Screenshot(ctx, sandbox, o.ScreenshotOptions)
	}
	timeout := o.SettleTimeout
	if timeout == 0 {
		timeout = DefaultSettleTimeout
	}
	if timeout < 0 || timeout > MaxSettleTimeout {
		return nil, "", api.Invalid("settleTimeout", "%v is out of range 0..%v", timeout, MaxSettleTimeout)
	}
	start := time.Now()
	deadline := start.Add(timeout)
	img, ctype, err := a.d.Screenshot(ctx, sandbox, o.ScreenshotOptions)
	if err != nil {
		return nil, "", err
	}
	changed := start
	for {
		now := time.Now()
		if now.Sub(changed) >= SettleQuiet || !now.Before(deadline) {
			return img, ctype, nil
		}
		if err := a.sleep(ctx, min(settlePoll, deadline.Sub(now))); err != nil {
			return nil, "", err
		}
		next, nt, err := a.d.Screenshot(ctx, sandbox, o.ScreenshotOptions)
		if err != nil {
			return nil, "", err
		}
		if !bytes.Equal(next, img) {
			changed = time.Now()
		}
		img, ctype = next, nt
	}
}

package display

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"slices"
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
// workflow-only actions (exec, assert) are not the layer's. On an error,
// whatever the action pressed is released (see Run).
func (a *Actions) Do(ctx context.Context, sandbox string, act api.Action, sp Space) (Result, error) {
	return a.Run(ctx, sandbox, []api.Action{act}, sp)
}

// Run runs acts in order on sandbox, with coordinates in sp, as one input:
// the sandbox's screen is read once, every action is checked before any
// is sent, and actions that are only input (clicks, moves, keys, typing)
// next to each other go to the desktop in one SendInput. It stops at the
// first error, and then releases every key and button the actions pressed
// and had not released (a drag cut short leaves no button down), even
// when ctx has ended. The Result carries the last image and the last
// coordinate the actions returned.
func (a *Actions) Run(ctx context.Context, sandbox string, acts []api.Action, sp Space) (res Result, err error) {
	s, err := a.scaler(ctx, sandbox, sp)
	if err != nil {
		return Result{}, err
	}
	steps := make([]step, len(acts))
	for i, act := range acts {
		if err := api.ValidateAction("", act, s.sw, s.sh, false); err != nil {
			return Result{}, err
		}
		if steps[i], err = plan(act, s); err != nil {
			return Result{}, err
		}
	}
	in := &held{d: a.d, sandbox: sandbox}
	defer func() {
		if err != nil {
			err = in.releaseAll(ctx, err)
		}
	}()
	for i := 0; i < len(steps); i++ {
		if steps[i].input {
			evs := slices.Clone(steps[i].evs)
			for i+1 < len(steps) && steps[i+1].input {
				i++
				evs = append(evs, steps[i].evs...)
			}
			if err := in.send(ctx, evs); err != nil {
				return Result{}, err
			}
			continue
		}
		r, err := a.run(ctx, in, s, steps[i])
		if err != nil {
			return Result{}, err
		}
		if r.Image != nil {
			res.Image, res.ContentType = r.Image, r.ContentType
		}
		if r.Coordinate != nil {
			res.Coordinate = r.Coordinate
		}
	}
	return res, nil
}

// step is a checked action: its events when it is only input.
type step struct {
	act   api.Action
	input bool
	evs   []backend.InputEvent
	// strokes are hold_key's keys.
	strokes []KeyStroke
}

// plan checks what the action's text says and turns an action that is
// only input into its events.
func plan(act api.Action, s scaler) (step, error) {
	st := step{act: act}
	switch act.Action {
	case "screenshot", "zoom", "wait", "cursor_position":
		return st, nil
	case "hold_key":
		var err error
		st.strokes, err = keysField("text", act.Text)
		return st, err
	case "type":
		strokes, err := TypeText(act.Text)
		if errors.Is(err, ErrNotASCII) {
			return st, nil // typed by the guest
		}
		if err != nil {
			return st, api.Invalid("text", "%v", err)
		}
		st.input = true
		for _, k := range strokes {
			st.evs = appendKeys(st.evs, k.Events())
		}
		return st, nil
	}
	evs, err := events(act, s)
	return step{act: act, input: true, evs: evs}, err
}

// run runs a step that is not only input.
func (a *Actions) run(ctx context.Context, in *held, s scaler, st step) (Result, error) {
	sandbox := in.sandbox
	switch st.act.Action {
	case "screenshot":
		opts := ShotOptions{}
		if s.scaled() {
			opts.Width, opts.Height = s.sw, s.sh
		}
		img, ctype, err := a.Screenshot(ctx, sandbox, opts)
		return Result{Image: img, ContentType: ctype}, err
	case "zoom":
		img, err := a.zoom(ctx, sandbox, s, st.act.Region)
		return Result{Image: img, ContentType: PNG.ContentType()}, err
	case "wait":
		return Result{}, a.sleep(ctx, seconds(st.act.Duration))
	case "cursor_position":
		x, y, err := a.d.CursorPosition(ctx, sandbox)
		if err != nil {
			return Result{}, err
		}
		x, y = s.toCaller(x, y)
		return Result{Coordinate: []int{x, y}}, nil
	case "type":
		return Result{}, a.d.TypeText(ctx, sandbox, st.act.Text)
	case "hold_key":
		return Result{}, a.hold(ctx, in, st.strokes, seconds(st.act.Duration))
	}
	return Result{}, api.Invalid("action", "%q is not an action of this layer", st.act.Action)
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func keysField(field, text string) ([]KeyStroke, error) {
	strokes, err := ParseKeys(text)
	if err != nil {
		return nil, api.Invalid(field, "%v", err)
	}
	return strokes, nil
}

func appendKeys(evs []backend.InputEvent, ks []KeyEvent) []backend.InputEvent {
	for _, k := range ks {
		evs = append(evs, backend.InputEvent{Kind: backend.EventKey, Key: k.QCode, Down: k.Down})
	}
	return evs
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
	keys := func(ks []KeyEvent) { evs = appendKeys(evs, ks) }
	// Clicks and scrolls take modifier keys to hold in text ("shift").
	var mods []KeyStroke
	if act.Text != "" && act.Action != "key" {
		var err error
		if mods, err = keysField("text", act.Text); err != nil {
			return nil, err
		}
	}
	press := func() {
		for _, k := range mods {
			keys(k.Press())
		}
	}
	release := func() {
		for i := len(mods) - 1; i >= 0; i-- {
			keys(mods[i].Release())
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

// releaseTimeout bounds the release of what an input held, which is sent
// on a context of its own: the request's may have ended.
const releaseTimeout = 10 * time.Second

// held tracks what a run of actions holds down on one sandbox: the keys
// and buttons it pressed and has not released, in the order pressed.
type held struct {
	d       Desktop
	sandbox string
	down    []backend.InputEvent
}

// send delivers evs. When it fails, nobody knows how far delivery got:
// every press in evs counts as held, and no release in them as done.
func (h *held) send(ctx context.Context, evs []backend.InputEvent) error {
	err := h.d.SendInput(ctx, h.sandbox, evs)
	for _, e := range evs {
		if e.Kind == backend.EventMove {
			continue
		}
		i := slices.IndexFunc(h.down, func(d backend.InputEvent) bool { return d.Kind == e.Kind && d.Key == e.Key && d.Button == e.Button })
		switch {
		case e.Down && i < 0:
			h.down = append(h.down, e)
		case !e.Down && i >= 0 && err == nil:
			h.down = slices.Delete(h.down, i, i+1)
		}
	}
	return err
}

// releaseAll releases whatever is held, last pressed first, on a context
// of its own, and returns cause (with the release's failure, if any).
func (h *held) releaseAll(ctx context.Context, cause error) error {
	if len(h.down) == 0 {
		return cause
	}
	up := make([]backend.InputEvent, 0, len(h.down))
	for i := len(h.down) - 1; i >= 0; i-- {
		e := h.down[i]
		e.Down = false
		up = append(up, e)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err := h.d.SendInput(rctx, h.sandbox, up)
	switch {
	case err == nil:
		h.down = nil
	case !errors.Is(err, api.ErrConflict) && !errors.Is(err, api.ErrNotFound):
		return fmt.Errorf("%w (and releasing the keys and buttons it held failed: %v)", cause, err)
	}
	// A sandbox that refuses input (gone, stopped, taken over by a
	// person) refused what cause says: it needs no second word.
	return cause
}

// hold presses strokes, waits d and releases them; the release is sent even
// when ctx ends first, so that no key stays down.
func (a *Actions) hold(ctx context.Context, in *held, strokes []KeyStroke, d time.Duration) error {
	var down, up []backend.InputEvent
	for _, k := range strokes {
		down = appendKeys(down, k.Press())
	}
	for i := len(strokes) - 1; i >= 0; i-- {
		up = appendKeys(up, strokes[i].Release())
	}
	if err := in.send(ctx, down); err != nil {
		return err
	}
	werr := a.sleep(ctx, d)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := in.send(rctx, up); err != nil {
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

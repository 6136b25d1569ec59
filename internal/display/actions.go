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

// Actions turns computer-use actions (api.Action: Anthropic's, OpenAI's and
// Gemini's vocabularies, and batches of them) into raw input events and
// screenshots. It is the one action layer under the input API, the MCP
// tools and workflow steps: the translation of each vocabulary, bounds,
// scaling, key names and the timing of holds live here, and backends only
// deliver events.
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
	// grid: the caller's points are on an sw×sh grid whose first and
	// last lines fall on the screen's first and last pixels (Gemini's
	// 0-999), not pixels of a scaled screen.
	grid bool
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

// gridded is the desktop seen as an n×n grid.
func (s scaler) gridded(n int) scaler {
	return scaler{dw: s.dw, dh: s.dh, sw: n, sh: n, grid: true}
}

func (s scaler) scaled() bool { return s.grid || s.sw != s.dw || s.sh != s.dh }

// toDesktop maps a point of the caller's space to the desktop pixel under
// its centre, or, on a grid, to the pixel at its place between the first
// and the last.
func (s scaler) toDesktop(x, y int) (int, int) {
	if s.grid {
		return onLine(x, s.sw, s.dw), onLine(y, s.sh, s.dh)
	}
	if !s.scaled() {
		return x, y
	}
	dx := min((2*x+1)*s.dw/(2*s.sw), s.dw-1)
	dy := min((2*y+1)*s.dh/(2*s.sh), s.dh-1)
	return dx, dy
}

// toCaller maps a desktop pixel to the caller's space.
func (s scaler) toCaller(x, y int) (int, int) {
	if s.grid {
		return onLine(x, s.dw, s.sw), onLine(y, s.dh, s.sh)
	}
	if !s.scaled() {
		return x, y
	}
	return min(x*s.sw/s.dw, s.sw-1), min(y*s.sh/s.dh, s.sh-1)
}

// onLine maps point v of a line of n points onto a line of d points,
// first to first and last to last: round(v × (d−1) / (n−1)).
func onLine(v, n, d int) int {
	if n <= 1 || d <= 1 {
		return 0
	}
	return (2*v*(d-1) + n - 1) / (2 * (n - 1))
}

// Do runs one action, or a batch, on sandbox, with coordinates in sp (a
// Gemini action's are on its grid whatever sp says). Screenshot and zoom
// return images; cursor_position a coordinate; wait sleeps. The
// workflow-only actions (exec, assert) are not the layer's. On an error,
// whatever the action pressed is released (see Run).
func (a *Actions) Do(ctx context.Context, sandbox string, act api.Action, sp Space) (Result, error) {
	return a.Run(ctx, sandbox, []api.Action{act}, sp)
}

// Run runs acts in order on sandbox, with coordinates in sp, as one input.
// Each act is an action of any vocabulary api.Action takes (Anthropic's,
// OpenAI's, Gemini's), or a batch of them. The sandbox's screen is read
// once, every action is checked and translated before any is sent, and
// actions that are only input (clicks, moves, keys, typing) next to each
// other go to the desktop in one SendInput. It stops at the first error,
// and then releases every key and button the actions pressed and had not
// released (a drag cut short, or a key_down before the failure, leaves
// nothing down), even when ctx has ended. Keys and buttons that a run
// which succeeds leaves down (left_mouse_down, Gemini's key_down) stay
// down. The Result carries the last image and the last coordinate the
// actions returned.
func (a *Actions) Run(ctx context.Context, sandbox string, acts []api.Action, sp Space) (res Result, err error) {
	s, err := a.scaler(ctx, sandbox, sp)
	if err != nil {
		return Result{}, err
	}
	var steps []step
	for _, act := range acts {
		if err := api.ValidateAction("", act, s.sw, s.sh, false); err != nil {
			return Result{}, err
		}
		st, err := expand("", act, s)
		if err != nil {
			return Result{}, err
		}
		steps = append(steps, st...)
	}
	in := &held{d: a.d, sandbox: sandbox}
	defer func() {
		if err != nil {
			err = in.releaseAll(ctx, err)
		}
	}()
	for i := 0; i < len(steps); i++ {
		if steps[i].kind == stepInput {
			evs := slices.Clone(steps[i].evs)
			for i+1 < len(steps) && steps[i+1].kind == stepInput {
				i++
				evs = append(evs, steps[i].evs...)
			}
			if len(evs) == 0 {
				continue
			}
			if err := in.send(ctx, evs); err != nil {
				return Result{}, err
			}
			continue
		}
		r, err := a.run(ctx, in, steps[i])
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

// expand turns a checked action, of any vocabulary, or a batch, into the
// layer's steps. p is the action's field path, for errors.
func expand(p string, act api.Action, s scaler) ([]step, error) {
	switch act.Form() {
	case api.FormBatch:
		var steps []step
		for i, e := range act.Actions {
			st, err := expand(field(p, fmt.Sprintf("actions[%d]", i)), e, s)
			if err != nil {
				return nil, err
			}
			steps = append(steps, st...)
		}
		return steps, nil
	case api.FormOpenAI:
		return openAISteps(p, act, s)
	case api.FormGemini:
		return geminiSteps(p, act, s)
	}
	return anthropicSteps(p, act, s)
}

// field joins a field path.
func field(p, name string) string {
	if p == "" {
		return name
	}
	return p + "." + name
}

type stepKind int

const (
	stepInput     stepKind = iota // evs
	stepShot                      // a screenshot in s
	stepZoom                      // region (in s) at the desktop's resolution
	stepWait                      // d
	stepCursor                    // the pointer's position in s
	stepGuestType                 // text the key map cannot type
	stepHold                      // strokes held for d
)

// step is one thing the layer does for an action: input events, or one of
// the steps that are not only input.
type step struct {
	kind    stepKind
	evs     []backend.InputEvent
	s       scaler
	region  []int
	d       time.Duration
	text    string
	strokes []KeyStroke
}

// anthropicSteps translates an action of Anthropic's computer tool.
func anthropicSteps(p string, act api.Action, s scaler) ([]step, error) {
	switch act.Action {
	case "screenshot":
		return []step{{kind: stepShot, s: s}}, nil
	case "zoom":
		return []step{{kind: stepZoom, s: s, region: act.Region}}, nil
	case "wait":
		return []step{{kind: stepWait, d: seconds(act.Duration)}}, nil
	case "cursor_position":
		return []step{{kind: stepCursor, s: s}}, nil
	case "hold_key":
		strokes, err := keysField(field(p, "text"), act.Text)
		return []step{{kind: stepHold, strokes: strokes, d: seconds(act.Duration)}}, err
	case "type":
		st, err := typeStep(field(p, "text"), act.Text)
		return []step{st}, err
	case "key":
		strokes, err := keysField(field(p, "text"), act.Text)
		return []step{keyStep(strokes...)}, err
	}
	mods, err := modifiers(p, act.Text, act.Keys)
	if err != nil {
		return nil, err
	}
	at := func(c []int) *image.Point {
		if c == nil {
			return nil
		}
		x, y := s.toDesktop(c[0], c[1])
		return &image.Point{X: x, Y: y}
	}
	switch act.Action {
	case "mouse_move":
		return []step{moveStep(*at(act.Coordinate), mods)}, nil
	case "left_click", "right_click", "middle_click", "double_click", "triple_click":
		btn, n := backend.ButtonLeft, 1
		switch act.Action {
		case "right_click":
			btn = backend.ButtonRight
		case "middle_click":
			btn = backend.ButtonMiddle
		case "double_click":
			n = 2
		case "triple_click":
			n = 3
		}
		return []step{clickStep(at(act.Coordinate), btn, n, mods)}, nil
	case "left_mouse_down", "left_mouse_up":
		return []step{pointer(at(act.Coordinate), nil, func(e *inputs) {
			e.button(backend.ButtonLeft, act.Action == "left_mouse_down")
		})}, nil
	case "left_click_drag":
		return []step{dragStep(act.StartCoordinate, act.Coordinate, s, mods)}, nil
	case "scroll":
		d, err := ParseScrollDirection(act.ScrollDirection)
		if err != nil {
			return nil, api.Invalid(field(p, "scroll_direction"), "%v", err)
		}
		amount := act.ScrollAmount
		if amount == 0 {
			amount = 3
		}
		return []step{scrollStep(at(act.Coordinate), mods, wheel{d, amount})}, nil
	}
	return nil, api.Invalid(field(p, "action"), "%q is not an action of this layer", act.Action)
}

// run runs a step that is not only input.
func (a *Actions) run(ctx context.Context, in *held, st step) (Result, error) {
	sandbox := in.sandbox
	switch st.kind {
	case stepShot:
		opts := ShotOptions{}
		if st.s.scaled() && !st.s.grid {
			opts.Width, opts.Height = st.s.sw, st.s.sh
		}
		img, ctype, err := a.Screenshot(ctx, sandbox, opts)
		return Result{Image: img, ContentType: ctype}, err
	case stepZoom:
		img, err := a.zoom(ctx, sandbox, st.s, st.region)
		return Result{Image: img, ContentType: PNG.ContentType()}, err
	case stepWait:
		return Result{}, a.sleep(ctx, st.d)
	case stepCursor:
		x, y, err := a.d.CursorPosition(ctx, sandbox)
		if err != nil {
			return Result{}, err
		}
		x, y = st.s.toCaller(x, y)
		return Result{Coordinate: []int{x, y}}, nil
	case stepGuestType:
		return Result{}, a.d.TypeText(ctx, sandbox, st.text)
	case stepHold:
		return Result{}, a.hold(ctx, in, st.strokes, st.d)
	}
	return Result{}, fmt.Errorf("step of kind %d is not the layer's", st.kind)
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func keysField(field, text string) ([]KeyStroke, error) {
	strokes, err := ParseKeys(text)
	if err != nil {
		return nil, api.Invalid(field, "%v", err)
	}
	return strokes, nil
}

// modifiers are the keys a pointer action holds: text in xdotool's names
// ("ctrl+shift"), then keys in OpenAI's ("CTRL") or xdotool's.
func modifiers(p, text string, keys []string) ([]KeyStroke, error) {
	var mods []KeyStroke
	if text != "" {
		ks, err := keysField(field(p, "text"), text)
		if err != nil {
			return nil, err
		}
		mods = append(mods, ks...)
	}
	for i, k := range keys {
		n, err := agentKey(k)
		if err != nil {
			return nil, api.Invalid(field(p, fmt.Sprintf("keys[%d]", i)), "%v", err)
		}
		ks, err := ParseKeyCombo(n)
		if err != nil {
			return nil, api.Invalid(field(p, fmt.Sprintf("keys[%d]", i)), "%v", err)
		}
		mods = append(mods, ks)
	}
	return mods, nil
}

// typeStep types text: as key strokes when the key map can, through the
// guest when it holds what the map cannot (beyond ASCII).
func typeStep(f, text string) (step, error) {
	strokes, err := TypeText(text)
	if errors.Is(err, ErrNotASCII) {
		return step{kind: stepGuestType, text: text}, nil
	}
	if err != nil {
		return step{}, api.Invalid(f, "%v", err)
	}
	return keyStep(strokes...), nil
}

// keyStep presses and releases each stroke in turn.
func keyStep(strokes ...KeyStroke) step {
	var e inputs
	for _, k := range strokes {
		e.keys(k.Events())
	}
	return step{kind: stepInput, evs: e}
}

// holdStep presses the strokes' keys and keeps them down (down), or
// releases them, last pressed first.
func holdStep(strokes []KeyStroke, down bool) step {
	var e inputs
	if down {
		e.press(strokes)
	} else {
		e.release(strokes)
	}
	return step{kind: stepInput, evs: e}
}

// inputs builds raw input events.
type inputs []backend.InputEvent

func (e *inputs) move(p image.Point) {
	*e = append(*e, backend.InputEvent{Kind: backend.EventMove, X: p.X, Y: p.Y})
}

func (e *inputs) button(b string, down bool) {
	*e = append(*e, backend.InputEvent{Kind: backend.EventButton, Button: b, Down: down})
}

func (e *inputs) click(b string, n int) {
	for range n {
		e.button(b, true)
		e.button(b, false)
	}
}

func (e *inputs) keys(ks []KeyEvent) { *e = appendKeys(*e, ks) }

// press presses the strokes' keys in order and keeps them down.
func (e *inputs) press(strokes []KeyStroke) {
	for _, k := range strokes {
		e.keys(k.Press())
	}
}

// release releases what press pressed, last first.
func (e *inputs) release(strokes []KeyStroke) {
	for i := len(strokes) - 1; i >= 0; i-- {
		e.keys(strokes[i].Release())
	}
}

func appendKeys(evs []backend.InputEvent, ks []KeyEvent) []backend.InputEvent {
	for _, k := range ks {
		evs = append(evs, backend.InputEvent{Kind: backend.EventKey, Key: k.QCode, Down: k.Down})
	}
	return evs
}

// pointer is a pointer action: a move to at (unless nil: where the pointer
// is), then what do adds, with mods held around it and released after it
// in reverse order.
func pointer(at *image.Point, mods []KeyStroke, do func(*inputs)) step {
	var e inputs
	if at != nil {
		e.move(*at)
	}
	e.press(mods)
	do(&e)
	e.release(mods)
	return step{kind: stepInput, evs: e}
}

func clickStep(at *image.Point, btn string, n int, mods []KeyStroke) step {
	return pointer(at, mods, func(e *inputs) { e.click(btn, n) })
}

// moveStep moves the pointer with mods held.
func moveStep(to image.Point, mods []KeyStroke) step {
	return pointer(nil, mods, func(e *inputs) { e.move(to) })
}

// dragStep drags with the left button from one point of s to another,
// through dragSteps moves between them, with mods held.
func dragStep(from, to []int, s scaler, mods []KeyStroke) step {
	path := make([]image.Point, 0, dragSteps+1)
	for i := 0; i <= dragSteps; i++ {
		x, y := s.toDesktop(from[0]+(to[0]-from[0])*i/dragSteps, from[1]+(to[1]-from[1])*i/dragSteps)
		path = append(path, image.Point{X: x, Y: y})
	}
	return pathStep(path, mods)
}

// pathStep presses the left button at the first point, moves through the
// others and releases it at the last, with mods held.
func pathStep(path []image.Point, mods []KeyStroke) step {
	return pointer(&path[0], mods, func(e *inputs) {
		e.button(backend.ButtonLeft, true)
		for _, p := range path[1:] {
			e.move(p)
		}
		e.button(backend.ButtonLeft, false)
	})
}

// wheel is n notches of the wheel in one direction.
type wheel struct {
	d ScrollDirection
	n int
}

// scrollStep turns the wheel at at, with mods held.
func scrollStep(at *image.Point, mods []KeyStroke, turns ...wheel) step {
	return pointer(at, mods, func(e *inputs) {
		for _, w := range turns {
			e.click(w.d.WheelButton(), w.n)
		}
	})
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

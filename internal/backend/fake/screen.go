package fake

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"slices"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
)

// Input implements backend.Input. It checks the action as the qemu backend
// does (api.ValidateAction against the sandbox's resolution, key names in
// text; errors wrap api.ErrInvalid and name the field; screenshot, zoom and
// wait are not input actions), then needs a Running sandbox (else
// ErrConflict). It records the action (see Actions), moves the pointer to
// the action's coordinate, appends the text of a type action to Typed, and
// answers cursor_position with the pointer. Nothing waits: a hold_key
// returns at once.
func (b *Backend) Input(ctx context.Context, id string, a api.Action) (backend.InputResult, error) {
	if err := b.begin(ctx, OpInput, id); err != nil {
		return backend.InputResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.getLocked(id)
	if err != nil {
		return backend.InputResult{}, err
	}
	if err := api.ValidateAction("", a, s.w, s.h, false); err != nil {
		return backend.InputResult{}, err
	}
	switch a.Action {
	case "screenshot", "zoom", "wait":
		return backend.InputResult{}, api.Invalid("action", "%q is not an input action", a.Action)
	case "key", "hold_key", "left_click", "right_click", "middle_click", "double_click", "triple_click":
		// Clicks take held modifier keys in text.
		if a.Text != "" {
			if _, err := display.ParseKeys(a.Text); err != nil {
				return backend.InputResult{}, api.Invalid("text", "%v", err)
			}
		}
	}
	if err := s.needRunning(OpInput); err != nil {
		return backend.InputResult{}, err
	}
	rec := a
	rec.Coordinate, rec.StartCoordinate = slices.Clone(a.Coordinate), slices.Clone(a.StartCoordinate)
	rec.Region, rec.Command = slices.Clone(a.Region), slices.Clone(a.Command)
	s.actions = append(s.actions, rec)
	if a.Action == "cursor_position" {
		return backend.InputResult{X: s.x, Y: s.y}, nil
	}
	if len(a.Coordinate) == 2 {
		s.x, s.y = a.Coordinate[0], a.Coordinate[1]
	}
	if a.Action == "type" {
		s.typed.WriteString(a.Text)
	}
	s.frame++
	return backend.InputResult{}, nil
}

// Actions returns the input actions sandbox id accepted since it was
// created, in order (Reset keeps them); nil for a missing sandbox.
func (b *Backend) Actions(id string) []api.Action {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sandboxes[id]
	if !ok {
		return nil
	}
	return slices.Clone(s.actions)
}

// Typed returns the text of every type action sandbox id accepted since it
// was created, run together (Reset keeps it); "" for a missing sandbox.
func (b *Backend) Typed(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sandboxes[id]
	if !ok {
		return ""
	}
	return s.typed.String()
}

// Screenshot implements backend.Screen. The sandbox must be Running or
// Paused (else ErrConflict). The image is the sandbox's resolution, scaled
// and encoded as opts say (PNG by default, JPEG for "jpeg"; bad options
// are ErrInvalid). It is never blank, and it changes with every input
// action that is not a query, so that a test can see the screen change.
func (b *Backend) Screenshot(ctx context.Context, id string, opts backend.ScreenshotOptions) ([]byte, string, error) {
	if err := b.begin(ctx, OpScreenshot, id); err != nil {
		return nil, "", err
	}
	b.mu.Lock()
	s, err := b.getLocked(id)
	var w, h, frame, x, y int
	if err == nil {
		if !s.hasProcess() {
			err = s.conflict(OpScreenshot)
		}
		w, h, frame, x, y = s.w, s.h, s.frame, s.x, s.y
	}
	b.mu.Unlock()
	if err != nil {
		return nil, "", err
	}
	format := display.Format(opts.Format)
	if format == "" {
		format = display.PNG
	}
	var buf bytes.Buffer
	img := render(w, h, frame, x, y)
	if err := b.enc.Encode(&buf, img, display.EncodeOptions{Format: format, Quality: opts.Quality, Width: opts.Width, Height: opts.Height}); err != nil {
		return nil, "", api.Invalid("format", "%v", err)
	}
	return buf.Bytes(), format.ContentType(), nil
}

// ScreenSize implements backend.Screen: the sandbox's resolution, in any
// run state.
func (b *Backend) ScreenSize(ctx context.Context, id string) (int, int, error) {
	if err := b.begin(ctx, OpScreenSize, id); err != nil {
		return 0, 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.getLocked(id)
	if err != nil {
		return 0, 0, err
	}
	return s.w, s.h, nil
}

// render draws a fake desktop: a background whose colour follows frame, a
// window that moves with it, a task bar, and a pointer at (px, py).
func render(w, h, frame, px, py int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	bg := color.RGBA{uint8(40 + frame*37%160), uint8(60 + frame*53%140), uint8(90 + frame*71%120), 255}
	fill(img, img.Rect, bg)
	bar := h / 20
	fill(img, image.Rect(0, h-bar, w, h), color.RGBA{30, 30, 30, 255})
	ww, wh := w/2, h/2
	wx, wy := w/8+frame*13%(w/4), h/8+frame*7%(h/4)
	fill(img, image.Rect(wx, wy, wx+ww, wy+wh), color.RGBA{235, 235, 235, 255})
	fill(img, image.Rect(wx, wy, wx+ww, wy+h/32), color.RGBA{50, 90, 160, 255})
	fill(img, image.Rect(px, py, px+8, py+12), color.RGBA{0, 0, 0, 255})
	return img
}

// fill paints r (clipped to img) with c, one row at a time.
func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Rect)
	if r.Empty() {
		return
	}
	first := img.Pix[img.PixOffset(r.Min.X, r.Min.Y):img.PixOffset(r.Max.X, r.Min.Y)]
	for i := 0; i < len(first); i += 4 {
		first[i], first[i+1], first[i+2], first[i+3] = c.R, c.G, c.B, c.A
	}
	for y := r.Min.Y + 1; y < r.Max.Y; y++ {
		copy(img.Pix[img.PixOffset(r.Min.X, y):], first)
	}
}

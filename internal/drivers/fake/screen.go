package fake

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"slices"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
)

// SendInput implements backend.Input. It checks the events as the qemu
// backend does (points on the sandbox's screen, known buttons and QKeyCode
// names; errors wrap api.ErrInvalid and name the field), then needs a
// Running sandbox (else ErrConflict). It records the events (see Events),
// moves the pointer, and adds the characters that key presses type to
// Typed. Nothing is paced.
func (b *Backend) SendInput(ctx context.Context, id string, evs []backend.InputEvent) error {
	if err := b.begin(ctx, OpInput, id); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.getLocked(id)
	if err != nil {
		return err
	}
	for i, e := range evs {
		field := fmt.Sprintf("events[%d]", i)
		switch e.Kind {
		case backend.EventMove:
			if err := display.CheckPoint(e.X, e.Y, s.w, s.h); err != nil {
				return api.Invalid(field, "%v", err)
			}
		case backend.EventButton:
			if !slices.Contains(buttons, e.Button) {
				return api.Invalid(field+".button", "unknown button %q", e.Button)
			}
		case backend.EventKey:
			if !display.IsQCode(e.Key) {
				return api.Invalid(field+".key", "unknown key %q", e.Key)
			}
		default:
			return api.Invalid(field+".kind", "unknown event kind %q", e.Kind)
		}
	}
	if err := s.needRunning(OpInput); err != nil {
		return err
	}
	for _, e := range evs {
		s.events = append(s.events, e)
		switch e.Kind {
		case backend.EventMove:
			s.x, s.y = e.X, e.Y
		case backend.EventKey:
			switch e.Key {
			case "shift", "shift_r", "ctrl", "ctrl_r", "alt", "alt_r", "meta_l", "meta_r":
				if s.held == nil {
					s.held = map[string]bool{}
				}
				s.held[e.Key] = e.Down
			default:
				shift := s.held["shift"] || s.held["shift_r"]
				other := s.held["ctrl"] || s.held["ctrl_r"] || s.held["alt"] || s.held["alt_r"] || s.held["meta_l"] || s.held["meta_r"]
				if r, ok := display.CharOf(e.Key, shift); ok && e.Down && !other {
					s.typed.WriteRune(r)
				}
			}
		}
	}
	s.frame++
	return nil
}

var buttons = []string{
	backend.ButtonLeft, backend.ButtonRight, backend.ButtonMiddle, backend.ButtonBack, backend.ButtonForward,
	backend.ButtonWheelUp, backend.ButtonWheelDown, backend.ButtonWheelLeft, backend.ButtonWheelRight,
}

// TypeText implements backend.TextInput: the text is added to Typed as it
// is.
func (b *Backend) TypeText(ctx context.Context, id, text string) error {
	return b.lifecycle(ctx, OpInput, id, func(s *sandbox) error {
		if err := s.needRunning(OpInput); err != nil {
			return err
		}
		s.typed.WriteString(text)
		s.frame++
		return nil
	})
}

// CursorPosition implements backend.Cursor.
func (b *Backend) CursorPosition(ctx context.Context, id string) (x, y int, err error) {
	err = b.lifecycle(ctx, OpInput, id, func(s *sandbox) error {
		x, y = s.x, s.y
		return s.needRunning(OpInput)
	})
	return x, y, err
}

// Events returns the input events sandbox id accepted since it was
// created, in order (Reset keeps them); nil for a missing sandbox.
func (b *Backend) Events(id string) []backend.InputEvent {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sandboxes[id]
	if !ok {
		return nil
	}
	return slices.Clone(s.events)
}

// Typed returns the text that sandbox id's key presses and TypeText typed
// since it was created, run together (Reset keeps it); "" for a missing
// sandbox.
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

package mcptools

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// Screens is the screen and input API of the REST server, which Do drives
// for clients that reach hvkube over HTTP: a screenshot (scaled to a
// width), one action in desktop pixels, and the desktop's size.
type Screens interface {
	// Screenshot returns a PNG of the screen, width pixels wide when not 0.
	Screenshot(ctx context.Context, sandbox string, width int) ([]byte, error)
	// Input runs an action in desktop pixels; cursor_position answers
	// with the pointer's coordinate.
	Input(ctx context.Context, sandbox string, a api.Action) ([]int, error)
	// ScreenSize is the desktop's size in pixels.
	ScreenSize(ctx context.Context, sandbox string) (w, h int, err error)
}

// DoOver runs one action through Screens, in the caller's space of the
// given width: coordinates are validated in that space and mapped to
// desktop pixels, a zoom is cut from a full screenshot.
func DoOver(ctx context.Context, sc Screens, sandbox string, a api.Action, width int) (Result, error) {
	if width < 0 || width > api.MaxScreenWidth {
		return Result{}, api.Invalid("width", "%d is out of range 1..%d", width, api.MaxScreenWidth)
	}
	if a.Action == "screenshot" {
		if err := api.ValidateAction("", a, 0, 0, false); err != nil {
			return Result{}, err
		}
		img, err := sc.Screenshot(ctx, sandbox, width)
		return Result{Image: img, ContentType: "image/png"}, err
	}
	m := spaceMap{}
	needsMap := width > 0 || a.Action == "zoom"
	if needsMap {
		dw, dh, err := sc.ScreenSize(ctx, sandbox)
		if err != nil {
			return Result{}, err
		}
		m = newSpaceMap(dw, dh, width)
	}
	if err := api.ValidateAction("", a, m.sw, m.sh, false); err != nil {
		return Result{}, err
	}
	switch a.Action {
	case "zoom":
		img, err := sc.Screenshot(ctx, sandbox, 0)
		if err != nil {
			return Result{}, err
		}
		out, err := crop(img, m.rect(a.Region))
		return Result{Image: out, ContentType: "image/png"}, err
	case "wait":
		t := time.NewTimer(time.Duration(a.Duration * float64(time.Second)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-t.C:
			return Result{}, nil
		}
	}
	if needsMap {
		a.Coordinate = m.point(a.Coordinate)
		a.StartCoordinate = m.point(a.StartCoordinate)
	}
	c, err := sc.Input(ctx, sandbox, a)
	if err != nil {
		return Result{}, err
	}
	if a.Action == "cursor_position" {
		if len(c) != 2 {
			return Result{}, fmt.Errorf("cursor_position answered %v", c)
		}
		if needsMap {
			c = m.back(c)
		}
		return Result{Coordinate: c}, nil
	}
	return Result{}, nil
}

// spaceMap maps a caller's space (sw x sh) onto the desktop (dw x dh).
type spaceMap struct{ dw, dh, sw, sh int }

func newSpaceMap(dw, dh, width int) spaceMap {
	m := spaceMap{dw: dw, dh: dh, sw: dw, sh: dh}
	if width > 0 {
		m.sw, m.sh = width, max(1, (dh*width+dw/2)/dw)
	}
	return m
}

// point maps [x, y] to the desktop pixel under it.
func (m spaceMap) point(c []int) []int {
	if len(c) != 2 {
		return c
	}
	return []int{min(m.dw-1, c[0]*m.dw/m.sw), min(m.dh-1, c[1]*m.dh/m.sh)}
}

func (m spaceMap) back(c []int) []int {
	return []int{min(m.sw-1, c[0]*m.sw/m.dw), min(m.sh-1, c[1]*m.sh/m.dh)}
}

// rect maps a region [x0, y0, x1, y1) to desktop pixels.
func (m spaceMap) rect(r []int) image.Rectangle {
	return image.Rect(r[0]*m.dw/m.sw, r[1]*m.dh/m.sh, (r[2]*m.dw+m.sw-1)/m.sw, (r[3]*m.dh+m.sh-1)/m.sh)
}

// crop cuts r out of a PNG and encodes it as PNG.
func crop(b []byte, r image.Rectangle) ([]byte, error) {
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decode screenshot: %w", err)
	}
	r = r.Intersect(img.Bounds())
	if r.Empty() {
		return nil, api.Invalid("region", "outside the screen")
	}
	out := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	draw.Draw(out, out.Bounds(), img, r.Min, draw.Src)
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

package display

import (
	"image"
	"image/color"
	"math/rand/v2"
)

// desktopImage draws a deterministic desktop-like picture: a gradient
// wallpaper, a panel, and overlapping windows with title bars, flat client
// areas and lines of glyph-like marks. Compression and scaling behave on it
// much as on a real screenshot, unlike on a uniform or random image.
func desktopImage(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(r image.Rectangle, c color.RGBA) {
		r = r.Intersect(img.Rect)
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				img.SetRGBA(x, y, c)
			}
		}
	}
	// Wallpaper: a vertical gradient.
	for y := range h {
		c := color.RGBA{uint8(30 + 40*y/max(h, 1)), uint8(60 + 50*y/max(h, 1)), uint8(110 + 60*y/max(h, 1)), 255}
		fill(image.Rect(0, y, w, y+1), c)
	}
	// Panel at the bottom with a few icons.
	panel := image.Rect(0, h-h/25-1, w, h)
	fill(panel, color.RGBA{40, 40, 48, 255})
	for i := range 8 {
		x := 8 + i*(h/25+6)
		fill(image.Rect(x, panel.Min.Y+3, x+h/25-6, h-3), color.RGBA{uint8(80 + 20*i), 140, uint8(200 - 15*i), 255})
	}
	// Windows.
	for win := range 4 {
		x0 := w/20 + win*w/6
		y0 := h/20 + win*h/8
		r := image.Rect(x0, y0, x0+w/2, y0+h/2)
		fill(r.Inset(-1), color.RGBA{20, 20, 20, 255}) // border
		fill(r, color.RGBA{245, 245, 242, 255})        // client area
		title := image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Min.Y+22)
		fill(title, color.RGBA{52, 101, 164, 255})
		for b := range 3 { // title bar buttons
			bx := title.Max.X - 20*(b+1)
			fill(image.Rect(bx, title.Min.Y+5, bx+12, title.Min.Y+17), color.RGBA{220, 220, 220, 255})
		}
		// Text: rows of 6x10 cells with a random 5x7 glyph each, words
		// separated by spaces, ragged line ends.
		for line := 0; r.Min.Y+30+line*14+10 < r.Max.Y; line++ {
			ty := r.Min.Y + 30 + line*14
			end := r.Min.X + 8 + rng.IntN(max(1, r.Dx()-16))
			for tx := r.Min.X + 8; tx+6 < end; tx += 6 {
				if rng.IntN(6) == 0 {
					continue // space
				}
				for gy := range 7 {
					bits := rng.Uint32()
					for gx := range 5 {
						if bits&(1<<gx) != 0 {
							img.SetRGBA(tx+gx, ty+gy, color.RGBA{30, 30, 30, 255})
						}
					}
				}
			}
		}
	}
	return img
}

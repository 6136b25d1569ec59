package wmi

import (
	"fmt"
	"image"

	"github.com/hvkube/hvkube/internal/display"
)

// RGB565ToImage decodes a Hyper-V thumbnail: w×h pixels, row by row, each a
// little-endian 16-bit word with 5 bits of red (high), 6 of green and 5 of
// blue (low). Each channel is widened to 8 bits by repeating its high bits
// in the low ones, so full scale is 255 and zero is 0. data must hold
// exactly w*h*2 bytes.
func RGB565ToImage(data []byte, w, h int) (*image.RGBA, error) {
	if w <= 0 || h <= 0 || w > display.MaxDimension || h > display.MaxDimension {
		return nil, fmt.Errorf("rgb565 image: size %dx%d out of range 1..%d", w, h, display.MaxDimension)
	}
	if want := w * h * 2; len(data) != want {
		return nil, fmt.Errorf("rgb565 image: %d bytes for %dx%d pixels, want %d", len(data), w, h, want)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	pix := img.Pix
	for i, j := 0, 0; i < len(data); i, j = i+2, j+4 {
		p := uint16(data[i]) | uint16(data[i+1])<<8
		r := uint8(p >> 11)
		g := uint8(p>>5) & 0x3f
		b := uint8(p) & 0x1f
		pix[j] = r<<3 | r>>2
		pix[j+1] = g<<2 | g>>4
		pix[j+2] = b<<3 | b>>2
		pix[j+3] = 0xff
	}
	return img, nil
}

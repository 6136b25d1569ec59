package display

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand"
	"testing"
)

// TestFastPNGRoundTrip checks the opaque fast path against image/png's
// decoder, pixel for pixel, on odd sizes and a sub-image.
func TestFastPNGRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, size := range [][2]int{{2, 2}, {3, 2}, {257, 131}, {1280, 800}} {
		m := image.NewRGBA(image.Rect(0, 0, size[0], size[1]))
		for i := range m.Pix {
			m.Pix[i] = byte(rng.Intn(4) * 60) // flat-ish, with repeats
		}
		for i := 3; i < len(m.Pix); i += 4 {
			m.Pix[i] = 0xff
		}
		for _, img := range []*image.RGBA{m, m.SubImage(image.Rect(1, 1, size[0], size[1])).(*image.RGBA)} {
			var e Encoder
			var buf bytes.Buffer
			if err := e.Encode(&buf, img, EncodeOptions{}); err != nil {
				t.Fatal(err)
			}
			got, err := png.Decode(&buf)
			if err != nil {
				t.Fatalf("%v: %v", size, err)
			}
			b := img.Bounds()
			if got.Bounds().Dx() != b.Dx() || got.Bounds().Dy() != b.Dy() {
				t.Fatalf("%v: decoded %v", size, got.Bounds())
			}
			for y := 0; y < b.Dy(); y++ {
				for x := 0; x < b.Dx(); x++ {
					want := img.RGBAAt(b.Min.X+x, b.Min.Y+y)
					if c := color.RGBAModel.Convert(got.At(x, y)).(color.RGBA); c != want {
						t.Fatalf("%v: pixel (%d,%d) = %v, want %v", size, x, y, c, want)
					}
				}
			}
		}
	}
}

// TestEncodePPM checks the straight-from-PPM path against decoding the PPM.
func TestEncodePPM(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	w, h := 321, 97
	ppm := []byte(fmt.Sprintf("P6\n# a comment\n%d %d\n255\n", w, h))
	for i := 0; i < 3*w*h; i++ {
		ppm = append(ppm, byte(rng.Intn(3)*100))
	}
	var e Encoder
	var buf bytes.Buffer
	if err := e.EncodePPM(&buf, ppm, EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodePPM(bytes.NewReader(ppm))
	if err != nil {
		t.Fatal(err)
	}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			if c := color.RGBAModel.Convert(got.At(x, y)).(color.RGBA); c != want.RGBAAt(x, y) {
				t.Fatalf("pixel (%d,%d) = %v, want %v", x, y, c, want.RGBAAt(x, y))
			}
		}
	}
	if err := e.EncodePPM(&buf, ppm[:len(ppm)-1], EncodeOptions{}); err == nil {
		t.Fatal("a truncated PPM was accepted")
	}
	// Other options go through decoding.
	buf.Reset()
	if err := e.EncodePPM(&buf, ppm, EncodeOptions{Format: JPEG}); err != nil {
		t.Fatal(err)
	}
}

package display

import (
	"bytes"
	"hash/adler32"
	"image"
	"image/png"
	"math/rand"
	"testing"
)

// frame is a test screen of 32-bit pixels (R, G, B, unused).
type frame struct {
	w, h int
	pix  []byte
}

func newFrame(w, h int) *frame { return &frame{w: w, h: h, pix: make([]byte, 4*w*h)} }

func (f *frame) row(y int, dst []byte) {
	src := f.pix[4*f.w*y : 4*f.w*(y+1)]
	for x := 0; x < f.w; x++ {
		dst[3*x], dst[3*x+1], dst[3*x+2] = src[4*x], src[4*x+1], src[4*x+2]
	}
}

// paint fills a rectangle with a colour, or with noise when noisy.
func (f *frame) paint(rng *rand.Rand, r image.Rectangle, noisy bool) {
	r = r.Intersect(image.Rect(0, 0, f.w, f.h))
	c := [3]byte{byte(rng.Intn(256)), byte(rng.Intn(256)), byte(rng.Intn(256))}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			p := f.pix[4*(f.w*y+x):]
			if noisy {
				c = [3]byte{byte(rng.Intn(256)), byte(rng.Intn(256)), byte(rng.Intn(256))}
			}
			p[0], p[1], p[2] = c[0], c[1], c[2]
		}
	}
}

// check decodes data with image/png and compares every pixel with f.
func (f *frame) check(t *testing.T, data []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if got := img.Bounds(); got != image.Rect(0, 0, f.w, f.h) {
		t.Fatalf("decoded %v, want %dx%d", got, f.w, f.h)
	}
	for y := 0; y < f.h; y++ {
		for x := 0; x < f.w; x++ {
			r, g, b, a := img.At(x, y).RGBA()
			p := f.pix[4*(f.w*y+x):]
			if byte(r>>8) != p[0] || byte(g>>8) != p[1] || byte(b>>8) != p[2] || a != 0xffff {
				t.Fatalf("pixel (%d,%d) = %02x%02x%02x/%x, want %02x%02x%02x", x, y, r>>8, g>>8, b>>8, a, p[0], p[1], p[2])
			}
		}
	}
}

// TestPNGStripsRandomDamage changes random areas of a screen, marks them
// damaged and checks each encoding against the screen, pixel for pixel,
// on sizes whose last strip is full, partial and a single row.
func TestPNGStripsRandomDamage(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, size := range [][2]int{{1, 1}, {5, 17}, {64, 48}, {333, 97}, {1280, 800}} {
		f := newFrame(size[0], size[1])
		f.paint(rng, image.Rect(0, 0, f.w, f.h), true)
		var p PNGStrips
		var buf bytes.Buffer
		if err := p.Encode(&buf, f.w, f.h, f.row); err != nil {
			t.Fatal(err)
		}
		f.check(t, buf.Bytes())
		if want := (f.h + StripRows - 1) / StripRows; p.Recompressed() != want {
			t.Fatalf("%v: first encoding compressed %d strips, want all %d", size, p.Recompressed(), want)
		}
		for round := 0; round < 12; round++ {
			for n := rng.Intn(4); n >= 0; n-- {
				x0, y0 := rng.Intn(f.w), rng.Intn(f.h)
				r := image.Rect(x0, y0, x0+1+rng.Intn(f.w), y0+1+rng.Intn(max(1, f.h/3)))
				f.paint(rng, r, rng.Intn(2) == 0)
				p.Damage(r.Min.Y, r.Max.Y)
			}
			buf.Reset()
			if err := p.Encode(&buf, f.w, f.h, f.row); err != nil {
				t.Fatal(err)
			}
			f.check(t, buf.Bytes())
		}
	}
}

// TestPNGStripsOneStrip checks that damage to one strip compresses that
// strip alone, that no damage compresses none, and that a new size
// compresses all.
func TestPNGStripsOneStrip(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	f := newFrame(1280, 800)
	f.paint(rng, image.Rect(0, 0, 1280, 800), false)
	f.paint(rng, image.Rect(100, 100, 900, 600), true)
	var p PNGStrips
	var buf bytes.Buffer
	encode := func() {
		t.Helper()
		buf.Reset()
		if err := p.Encode(&buf, f.w, f.h, f.row); err != nil {
			t.Fatal(err)
		}
		f.check(t, buf.Bytes())
	}
	encode()
	cases := []struct {
		name   string
		y0, y1 int
		want   int
	}{
		{"none", 0, 0, 0},
		{"one row", 37, 38, 1},
		{"one strip", 2 * StripRows, 3 * StripRows, 1},
		{"across a strip edge", 3*StripRows - 1, 3*StripRows + 1, 2},
		{"beyond the screen", 790, 900, 1},
	}
	for _, c := range cases {
		if c.y1 > c.y0 {
			f.paint(rng, image.Rect(0, c.y0, 40, c.y1), true)
		}
		p.Damage(c.y0, c.y1)
		encode()
		if got := p.Recompressed(); got != c.want {
			t.Errorf("%s: compressed %d strips, want %d", c.name, got, c.want)
		}
	}
	f = newFrame(1024, 768)
	f.paint(rng, image.Rect(0, 0, 1024, 768), true)
	encode()
	if got, want := p.Recompressed(), 768/StripRows; got != want {
		t.Errorf("new size: compressed %d strips, want %d", got, want)
	}
}

// TestAdler32Combine checks the combined checksum against hash/adler32 of
// the concatenation, on random data of random lengths (some past the
// modulus, where the length is reduced).
func TestAdler32Combine(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	for i := 0; i < 200; i++ {
		a := make([]byte, rng.Intn(3)*rng.Intn(70000))
		b := make([]byte, rng.Intn(3)*rng.Intn(70000))
		rng.Read(a)
		rng.Read(b)
		if i%3 == 0 {
			for j := range b {
				b[j] = 0xff // large sums
			}
		}
		got := adler32Combine(adler32.Checksum(a), adler32.Checksum(b), len(b))
		if want := adler32.Checksum(append(a, b...)); got != want {
			t.Fatalf("len %d + %d: combined %08x, want %08x", len(a), len(b), got, want)
		}
	}
}

func BenchmarkPNGStrips(b *testing.B) {
	rng := rand.New(rand.NewSource(10))
	f := newFrame(1280, 800)
	f.paint(rng, image.Rect(0, 0, 1280, 800), false)
	for i := 0; i < 200; i++ {
		x, y := rng.Intn(1280), rng.Intn(800)
		f.paint(rng, image.Rect(x, y, x+rng.Intn(300), y+rng.Intn(200)), false)
	}
	f.paint(rng, image.Rect(40, 60, 940, 600), true) // a busy window
	for _, c := range []struct {
		name   string
		y0, y1 int
	}{{"all", 0, 800}, {"one strip", 320, 336}, {"none", 0, 0}} {
		b.Run(c.name, func(b *testing.B) {
			var p PNGStrips
			var buf bytes.Buffer
			p.Encode(&buf, f.w, f.h, f.row)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.Damage(c.y0, c.y1)
				buf.Reset()
				if err := p.Encode(&buf, f.w, f.h, f.row); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(buf.Len()))
		})
	}
}

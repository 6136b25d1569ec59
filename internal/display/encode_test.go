package display

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
)

func TestEncodePNGLossless(t *testing.T) {
	var enc Encoder
	src := desktopImage(320, 200)
	var buf bytes.Buffer
	if err := enc.Encode(&buf, src, EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Bounds() != src.Bounds() {
		t.Fatalf("bounds %v, want %v", got.Bounds(), src.Bounds())
	}
	for y := range 200 {
		for x := range 320 {
			r1, g1, b1, a1 := got.At(x, y).RGBA()
			r2, g2, b2, a2 := src.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 || a1 != a2 {
				t.Fatalf("pixel %d,%d differs", x, y)
			}
		}
	}
}

func TestEncodeFormatsAndSizes(t *testing.T) {
	src := desktopImage(1280, 800)
	tests := []struct {
		name          string
		opts          EncodeOptions
		wantW, wantH  int
		wantJPEG      bool
		wantErrSubstr string
	}{
		{"png default", EncodeOptions{}, 1280, 800, false, ""},
		{"png explicit", EncodeOptions{Format: PNG}, 1280, 800, false, ""},
		{"jpeg default quality", EncodeOptions{Format: JPEG}, 1280, 800, true, ""},
		{"jpeg quality", EncodeOptions{Format: JPEG, Quality: 50}, 1280, 800, true, ""},
		{"width and height", EncodeOptions{Width: 1024, Height: 768}, 1024, 768, false, ""},
		{"width keeps aspect", EncodeOptions{Width: 1024}, 1024, 640, false, ""},
		{"height keeps aspect", EncodeOptions{Height: 400}, 640, 400, false, ""},
		{"factor", EncodeOptions{Factor: 0.5, Format: JPEG}, 640, 400, true, ""},
		{"upscale factor", EncodeOptions{Factor: 1.5}, 1920, 1200, false, ""},
		{"tiny", EncodeOptions{Width: 1}, 1, 1, false, ""},
		{"bad format", EncodeOptions{Format: "gif"}, 0, 0, false, `format: unknown format "gif"`},
		{"quality on png", EncodeOptions{Quality: 90}, 0, 0, false, "quality: only applies to jpeg"},
		{"quality too high", EncodeOptions{Format: JPEG, Quality: 101}, 0, 0, false, "quality: 101 out of range"},
		{"negative width", EncodeOptions{Width: -1}, 0, 0, false, "width: -1 is negative"},
		{"negative height", EncodeOptions{Height: -1}, 0, 0, false, "height: -1 is negative"},
		{"too wide", EncodeOptions{Width: MaxDimension + 1}, 0, 0, false, "width: 16385 exceeds"},
		{"factor and width", EncodeOptions{Width: 10, Factor: 0.5}, 0, 0, false, "factor: cannot be combined"},
		{"negative factor", EncodeOptions{Factor: -1}, 0, 0, false, "factor: -1 is not a positive number"},
		{"NaN factor", EncodeOptions{Factor: math.NaN()}, 0, 0, false, "factor: NaN"},
		{"huge factor", EncodeOptions{Factor: 100}, 0, 0, false, "factor: 100 makes a 128000x80000 image"},
	}
	var enc Encoder
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := enc.Encode(&buf, src, tt.opts)
			if tt.wantErrSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErrSubstr)
				}
				if buf.Len() != 0 {
					t.Errorf("%d bytes written despite invalid options", buf.Len())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg, format, err := image.DecodeConfig(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			if wantFormat := map[bool]string{true: "jpeg", false: "png"}[tt.wantJPEG]; format != wantFormat {
				t.Errorf("format %s, want %s", format, wantFormat)
			}
			if cfg.Width != tt.wantW || cfg.Height != tt.wantH {
				t.Errorf("size %dx%d, want %dx%d", cfg.Width, cfg.Height, tt.wantW, tt.wantH)
			}
		})
	}
}

func TestJPEGQualityMatters(t *testing.T) {
	var enc Encoder
	src := desktopImage(640, 400)
	size := func(q int) int {
		var buf bytes.Buffer
		if err := enc.Encode(&buf, src, EncodeOptions{Format: JPEG, Quality: q}); err != nil {
			t.Fatal(err)
		}
		if _, err := jpeg.Decode(bytes.NewReader(buf.Bytes())); err != nil {
			t.Fatal(err)
		}
		return buf.Len()
	}
	if lo, hi := size(20), size(95); lo >= hi {
		t.Errorf("quality 20 gives %d bytes, quality 95 %d", lo, hi)
	}
}

func TestEncoderConcurrent(t *testing.T) {
	var enc Encoder
	src := desktopImage(200, 120)
	var want bytes.Buffer
	if err := enc.Encode(&want, src, EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				var buf bytes.Buffer
				if err := enc.Encode(&buf, src, EncodeOptions{}); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(buf.Bytes(), want.Bytes()) {
					t.Error("concurrent encodes differ")
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestContentType(t *testing.T) {
	tests := []struct {
		f    Format
		want string
	}{{PNG, "image/png"}, {"", "image/png"}, {JPEG, "image/jpeg"}, {"gif", ""}}
	for _, tt := range tests {
		if got := tt.f.ContentType(); got != tt.want {
			t.Errorf("%q.ContentType() = %q, want %q", tt.f, got, tt.want)
		}
	}
}

func solid(w, h int, c color.RGBA) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = c.R, c.G, c.B, c.A
	}
	return img
}

func TestScale(t *testing.T) {
	c := color.RGBA{10, 200, 30, 255}
	tests := []struct {
		name             string
		srcW, srcH, w, h int
	}{
		{"down 2x", 100, 60, 50, 30},
		{"down odd ratio", 1920, 1080, 1280, 720},
		{"down to one pixel", 37, 23, 1, 1},
		{"up", 10, 10, 37, 19},
		{"width only", 64, 64, 20, 64},
		{"height only", 64, 64, 64, 200},
		{"same size", 16, 9, 16, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Scale(solid(tt.srcW, tt.srcH, c), tt.w, tt.h)
			if got.Bounds() != image.Rect(0, 0, tt.w, tt.h) {
				t.Fatalf("bounds %v", got.Bounds())
			}
			// A flat colour stays exactly that colour: weights sum to one.
			for y := range tt.h {
				for x := range tt.w {
					if p := got.RGBAAt(x, y); p != c {
						t.Fatalf("pixel %d,%d = %v, want %v", x, y, p, c)
					}
				}
			}
		})
	}
}

func TestScaleAveragesAndInterpolates(t *testing.T) {
	// Columns alternate black and white: halving the width averages pairs
	// into grey, where dropping pixels would give pure black or white.
	src := image.NewRGBA(image.Rect(0, 0, 8, 2))
	for y := range 2 {
		for x := range 8 {
			v := uint8(0)
			if x%2 == 1 {
				v = 255
			}
			src.SetRGBA(x, y, color.RGBA{v, v, v, 255})
		}
	}
	half := Scale(src, 4, 2)
	for x := range 4 {
		if p := half.RGBAAt(x, 0); p.R != 128 {
			t.Errorf("halved pixel %d = %v, want grey 128", x, p)
		}
	}

	// Doubling a black|white pair: the outer pixels keep their values and
	// the inner ones blend.
	pair := image.NewRGBA(image.Rect(0, 0, 2, 1))
	pair.SetRGBA(0, 0, color.RGBA{0, 0, 0, 255})
	pair.SetRGBA(1, 0, color.RGBA{255, 255, 255, 255})
	wide := Scale(pair, 4, 1)
	want := []uint8{0, 64, 191, 255}
	for x, w := range want {
		if p := wide.RGBAAt(x, 0); p.R != w {
			t.Errorf("doubled pixel %d = %d, want %d", x, p.R, w)
		}
	}
}

func TestScaleNonRGBAAndOffsetBounds(t *testing.T) {
	g := image.NewGray(image.Rect(5, 5, 15, 15))
	for i := range g.Pix {
		g.Pix[i] = 100
	}
	got := Scale(g, 5, 5)
	if got.Bounds() != image.Rect(0, 0, 5, 5) {
		t.Fatalf("bounds %v", got.Bounds())
	}
	if p := got.RGBAAt(2, 2); p != (color.RGBA{100, 100, 100, 255}) {
		t.Errorf("pixel = %v", p)
	}
	// Same size returns a copy, not the source.
	src := solid(4, 4, color.RGBA{1, 2, 3, 255})
	cp := Scale(src, 4, 4)
	cp.Pix[0] = 99
	if src.Pix[0] != 1 {
		t.Error("Scale to the same size returned the source image")
	}
}

func TestScaleBadSizePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Scale to 0x10 did not panic")
		}
	}()
	Scale(solid(2, 2, color.RGBA{}), 0, 10)
}

// Benchmarks: the screenshot path is screendump (PPM) -> DecodePPM ->
// Encode. Run with: go test -bench . -benchmem ./internal/display/

func BenchmarkDecodePPM1280x800(b *testing.B) {
	data := encodePPM(desktopImage(1280, 800))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := DecodePPM(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func benchmarkEncode(b *testing.B, w, h int, opts EncodeOptions) {
	src := desktopImage(w, h)
	var enc Encoder
	var buf bytes.Buffer
	if err := enc.Encode(&buf, src, opts); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := enc.Encode(io.Discard, src, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes/image")
}

func BenchmarkEncodePNG1280x800(b *testing.B) {
	benchmarkEncode(b, 1280, 800, EncodeOptions{})
}

func BenchmarkEncodePNG1920x1080(b *testing.B) {
	benchmarkEncode(b, 1920, 1080, EncodeOptions{})
}

func BenchmarkEncodeJPEG1280x800(b *testing.B) {
	benchmarkEncode(b, 1280, 800, EncodeOptions{Format: JPEG})
}

func BenchmarkEncodePNGScaled1920x1080To1280x720(b *testing.B) {
	benchmarkEncode(b, 1920, 1080, EncodeOptions{Width: 1280})
}

func BenchmarkScale1920x1080To1280x720(b *testing.B) {
	src := desktopImage(1920, 1080)
	for b.Loop() {
		Scale(src, 1280, 720)
	}
}

// BenchmarkScreenshot1280x800 is the whole PPM-to-PNG path.
func BenchmarkScreenshot1280x800(b *testing.B) {
	data := encodePPM(desktopImage(1280, 800))
	var enc Encoder
	for b.Loop() {
		img, err := DecodePPM(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		if err := enc.Encode(io.Discard, img, EncodeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

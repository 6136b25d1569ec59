package display

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"strings"
	"testing"
)

// encodePPM writes img as P6 the way QEMU's screendump does.
func encodePPM(img *image.RGBA) []byte {
	b := img.Bounds()
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "P6\n%d %d\n255\n", b.Dx(), b.Dy())
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := img.RGBAAt(x, y)
			buf.Write([]byte{c.R, c.G, c.B})
		}
	}
	return buf.Bytes()
}

func TestDecodePPM(t *testing.T) {
	// 3x2 image: red green blue / white black grey.
	raster := []byte{255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 128, 128, 128}
	want := []color.RGBA{
		{255, 0, 0, 255}, {0, 255, 0, 255}, {0, 0, 255, 255},
		{255, 255, 255, 255}, {0, 0, 0, 255}, {128, 128, 128, 255},
	}
	headers := []struct {
		name, header string
	}{
		{"qemu style", "P6\n3 2\n255\n"},
		{"single spaces", "P6 3 2 255 "},
		{"comments", "P6\n# made by a test\n3 # width\n# height next\n2\n255\n"},
		{"comment right after token", "P6#c\n3#c\n2#c\n255\n"},
		{"comment as final separator", "P6 3 2 255# trailing comment\n"},
		{"crlf and tabs", "P6\r\n3\t2\r\n255\r"},
		{"leading zeros", "P6 003 002 0255\n"},
	}
	for _, tt := range headers {
		t.Run(tt.name, func(t *testing.T) {
			img, err := DecodePPM(bytes.NewReader(append([]byte(tt.header), raster...)))
			if err != nil {
				t.Fatal(err)
			}
			if got := img.Bounds(); got != image.Rect(0, 0, 3, 2) {
				t.Fatalf("bounds = %v", got)
			}
			for i, w := range want {
				if got := img.RGBAAt(i%3, i/3); got != w {
					t.Errorf("pixel %d = %v, want %v", i, got, w)
				}
			}
		})
	}
}

func TestDecodePPMLarge(t *testing.T) {
	src := desktopImage(1280, 800)
	got, err := DecodePPM(bytes.NewReader(encodePPM(src)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Pix, src.Pix) {
		t.Fatal("decoded pixels differ from the encoded image")
	}
}

// A reader that returns at most one byte per Read exercises every buffer
// boundary.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

func TestDecodePPMSlowReader(t *testing.T) {
	src := desktopImage(40, 30)
	got, err := DecodePPM(oneByteReader{bytes.NewReader(encodePPM(src))})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Pix, src.Pix) {
		t.Fatal("decoded pixels differ")
	}
}

func TestDecodePPMErrors(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{
		{"empty", "", "read magic: unexpected EOF"},
		{"ascii ppm", "P3\n1 1\n255\n0 0 0\n", `unsupported netpbm format "P3": only binary PPM (P6) is supported`},
		{"pgm", "P5\n1 1\n255\n\x00", `unsupported netpbm format "P5"`},
		{"png", "\x89PNG\r\n", "not a PPM image"},
		{"16 bit", "P6\n1 1\n65535\n\x00\x00\x00\x00\x00\x00", "unsupported maxval 65535: only 255"},
		{"maxval 15", "P6 1 1 15 \x00\x00\x00", "unsupported maxval 15"},
		{"zero width", "P6 0 1 255 ", "image size 0x1 out of range"},
		{"huge", "P6 99999 99999 255 ", "out of range"},
		{"too many digits", "P6 1234567 1 255 ", "width: number too large"},
		{"truncated width", "P6 1", "width: unexpected EOF"},
		{"missing height", "P6 1 ", "height: unexpected EOF"},
		{"letter in width", "P6 x 1 255 ", "width: byte 0x78, want a decimal number"},
		{"junk after number", "P6 1x 1 255 ", "width: byte 0x78 after number"},
		{"truncated maxval", "P6 1 1 255", "maxval: unexpected EOF"},
		{"no separator before raster", "P6 1 1 255#", "comment: unexpected EOF"},
		{"raster right after maxval", "P6 1 1 255\x00\x00\x00", "maxval: byte 0x0 after number"},
		{"short raster", "P6 2 1 255\n\x00\x00\x00\x00", "pixel data of 2x1 image: unexpected EOF"},
		{"no raster", "P6 2 1 255\n", "pixel data of 2x1 image: unexpected EOF"},
		{"unterminated comment", "P6 # forever", "comment: unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodePPM(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("DecodePPM(%q) succeeded", tt.in)
			}
			if !strings.HasPrefix(err.Error(), "ppm: ") || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecodePPMReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("P6 2 2 255\n\x01\x02"), errReader{boom})
	if _, err := DecodePPM(r); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want it to wrap the reader's error", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func FuzzDecodePPM(f *testing.F) {
	f.Add([]byte("P6\n3 2\n255\n" + strings.Repeat("\x10\x20\x30", 6)))
	f.Add([]byte("P6 # c\n1 1 255 \xff\xff\xff"))
	f.Add([]byte("P3\n1 1\n255\n0 0 0\n"))
	f.Add([]byte("P6 1 1 65535 \x00\x00\x00\x00\x00\x00"))
	f.Add(encodePPM(desktopImage(8, 5)))
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := DecodePPM(bytes.NewReader(data))
		if err != nil {
			if img != nil {
				t.Fatal("image returned with an error")
			}
			return
		}
		b := img.Bounds()
		if b.Dx() < 1 || b.Dy() < 1 || b.Dx() > MaxDimension || b.Dy() > MaxDimension {
			t.Fatalf("bounds %v out of range", b)
		}
		if len(data) < 3*b.Dx()*b.Dy() {
			t.Fatalf("%dx%d image from %d bytes", b.Dx(), b.Dy(), len(data))
		}
		for i := 3; i < len(img.Pix); i += 4 {
			if img.Pix[i] != 0xff {
				t.Fatal("decoded image is not opaque")
			}
		}
		// Re-encoding and decoding again is lossless.
		again, err := DecodePPM(bytes.NewReader(encodePPM(img)))
		if err != nil || !bytes.Equal(again.Pix, img.Pix) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

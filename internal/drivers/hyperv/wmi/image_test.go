package wmi

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/hvkube/hvkube/internal/powershell/pstest"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/powershell"
)

// knownPixels are RGB565 words and the colours they must decode to: each
// 5- or 6-bit channel widened by repeating its high bits.
var knownPixels = []struct {
	word uint16
	want color.RGBA
}{
	{0xF800, color.RGBA{255, 0, 0, 255}},     // full red
	{0x07E0, color.RGBA{0, 255, 0, 255}},     // full green
	{0x001F, color.RGBA{0, 0, 255, 255}},     // full blue
	{0xFFFF, color.RGBA{255, 255, 255, 255}}, // white
	{0x0000, color.RGBA{0, 0, 0, 255}},       // black
	{0x8410, color.RGBA{132, 130, 132, 255}}, // r 16, g 32, b 16: the middle of each range
	{0x7BEF, color.RGBA{123, 125, 123, 255}}, // r 15, g 31, b 15: just below it
	{0x0841, color.RGBA{8, 8, 8, 255}},       // r 1, g 2, b 1: the lowest step above black
}

// knownRGB565 lays knownPixels out as a 4×2 little-endian buffer.
func knownRGB565() []byte {
	var b []byte
	for _, p := range knownPixels {
		b = append(b, byte(p.word), byte(p.word>>8))
	}
	return b
}

func TestRGB565ToImage(t *testing.T) {
	img, err := RGB565ToImage(knownRGB565(), 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds(); got != image.Rect(0, 0, 4, 2) {
		t.Fatalf("bounds %v, want 4x2", got)
	}
	for i, p := range knownPixels {
		if got := img.RGBAAt(i%4, i/4); got != p.want {
			t.Errorf("pixel %d (0x%04X) = %v, want %v", i, p.word, got, p.want)
		}
	}
}

func TestRGB565ToImageChecksSize(t *testing.T) {
	for _, tc := range []struct {
		n, w, h int
	}{
		{16, 4, 3}, // too short
		{18, 4, 2}, // too long
		{15, 4, 2}, // odd
		{0, 0, 0},  // empty
		{4, -1, -2},
		{2, 1 << 20, 1},
	} {
		if _, err := RGB565ToImage(make([]byte, tc.n), tc.w, tc.h); err == nil {
			t.Errorf("%d bytes for %dx%d: no error", tc.n, tc.w, tc.h)
		}
	}
}

// thumbnailJSON is the screenshot script's output for data at w×h, as the
// wrapper writes it (ConvertTo-Json -Compress).
func thumbnailJSON(data []byte, w, h int) string {
	return fmt.Sprintf(`{"Width":%d,"Height":%d,"Data":"%s"}`, w, h, base64.StdEncoding.EncodeToString(data))
}

func TestScreenshotPNG(t *testing.T) {
	rec := &pstest.Recorder{Outputs: map[string]string{"vm-screenshot": thumbnailJSON(knownRGB565(), 4, 2)}}
	data, ctype, err := Screenshot(context.Background(), rec, "hvkube-a", backend.ScreenshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "image/png" {
		t.Errorf("content type %q, want image/png", ctype)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds(); got != image.Rect(0, 0, 4, 2) {
		t.Fatalf("bounds %v, want 4x2", got)
	}
	for i, p := range knownPixels {
		if got := color.RGBAModel.Convert(img.At(i%4, i/4)).(color.RGBA); got != p.want {
			t.Errorf("PNG pixel %d (0x%04X) = %v, want %v", i, p.word, got, p.want)
		}
	}
	if len(rec.Calls) != 1 {
		t.Fatalf("%d script runs, want 1", len(rec.Calls))
	}
	want := powershell.Args{"VMName": "hvkube-a", "Width": 0, "Height": 0}
	if got := rec.Calls[0].Args; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("args %v, want %v", got, want)
	}
}

// TestScreenshotRecordedOutput parses output recorded from the script (a
// 2×2 thumbnail: red, green / blue, white) through powershell.Decode, with
// the byte-order mark and line end PowerShell may add.
func TestScreenshotRecordedOutput(t *testing.T) {
	out := "\xef\xbb\xbf" + `{"Width":2,"Height":2,"Data":"APjgBx8A//8="}` + "\r\n"
	rec := &pstest.Recorder{Outputs: map[string]string{"vm-screenshot": out}}
	data, _, err := Screenshot(context.Background(), rec, "hvkube-a", backend.ScreenshotOptions{Format: "png"})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	want := []color.RGBA{{255, 0, 0, 255}, {0, 255, 0, 255}, {0, 0, 255, 255}, {255, 255, 255, 255}}
	for i, w := range want {
		if got := color.RGBAModel.Convert(img.At(i%2, i/2)).(color.RGBA); got != w {
			t.Errorf("pixel %d = %v, want %v", i, got, w)
		}
	}
}

func TestScreenshotJPEGAndSize(t *testing.T) {
	// Hyper-V scales the thumbnail to the size asked for; the script
	// reports the size it asked for.
	w, h := 64, 48
	rec := &pstest.Recorder{Outputs: map[string]string{"vm-screenshot": thumbnailJSON(make([]byte, w*h*2), w, h)}}
	data, ctype, err := Screenshot(context.Background(), rec, "hvkube-a", backend.ScreenshotOptions{Format: "jpeg", Quality: 50, Width: 64})
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "image/jpeg" {
		t.Errorf("content type %q, want image/jpeg", ctype)
	}
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Width != 64 || cfg.Height != 48 {
		t.Errorf("size %dx%d, want 64x48", cfg.Width, cfg.Height)
	}
	if got := rec.Calls[0].Args["Width"]; got != 64 {
		t.Errorf("Width argument %v, want 64", got)
	}
}

func TestScreenshotBadOutput(t *testing.T) {
	for name, out := range map[string]string{
		"short data":    thumbnailJSON(make([]byte, 6), 2, 2),
		"no data":       `{"Width":2,"Height":2}`,
		"bad base64":    `{"Width":1,"Height":1,"Data":"!!"}`,
		"no size":       thumbnailJSON(make([]byte, 8), 0, 0),
		"not an object": `"x"`,
	} {
		rec := &pstest.Recorder{Outputs: map[string]string{"vm-screenshot": out}}
		if _, _, err := Screenshot(context.Background(), rec, "hvkube-a", backend.ScreenshotOptions{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestScreenshotOptions(t *testing.T) {
	for _, tc := range []struct {
		opts  backend.ScreenshotOptions
		field string
	}{
		{backend.ScreenshotOptions{Format: "gif"}, "format"},
		{backend.ScreenshotOptions{Quality: 80}, "quality"},
		{backend.ScreenshotOptions{Format: "jpeg", Quality: 101}, "quality"},
		{backend.ScreenshotOptions{Format: "jpeg", Quality: -1}, "quality"},
		{backend.ScreenshotOptions{Width: -1}, "width"},
		{backend.ScreenshotOptions{Height: 1 << 20}, "height"},
	} {
		rec := &pstest.Recorder{}
		_, _, err := Screenshot(context.Background(), rec, "hvkube-a", tc.opts)
		if !errors.Is(err, api.ErrInvalid) || api.FieldOf(err) != tc.field {
			t.Errorf("%+v: error %v, want invalid %s", tc.opts, err, tc.field)
		}
		if len(rec.Calls) != 0 {
			t.Errorf("%+v: the script ran for bad options", tc.opts)
		}
	}
}

package recording

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// frame is a w x h picture of one shade, encoded by enc.
func frame(t *testing.T, w, h int, shade uint8, enc func(*bytes.Buffer, image.Image) error) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{shade, 255 - shade, uint8(x), 255})
		}
	}
	var b bytes.Buffer
	if err := enc(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestRecordReal records with the host's ffmpeg, as agents (JPEG frames,
// WebM) and OSWorld's routes (PNG frames, MP4) do, and checks the files
// are those containers with frames in them.
func TestRecordReal(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is not installed (make deps installs it)")
	}
	jpg := func(b *bytes.Buffer, img image.Image) error { return jpeg.Encode(b, img, nil) }
	pngEnc := func(b *bytes.Buffer, img image.Image) error { return png.Encode(b, img) }
	for _, c := range []struct {
		name   string
		frames string
		enc    func(*bytes.Buffer, image.Image) error
		format Format
		magic  func([]byte) bool
	}{
		{"webm from jpeg", "mjpeg", jpg, WebM, func(b []byte) bool { return bytes.HasPrefix(b, []byte{0x1a, 0x45, 0xdf, 0xa3}) }},
		{"mp4 from png", "png", pngEnc, MP4, func(b []byte) bool { return len(b) > 8 && string(b[4:8]) == "ftyp" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var n atomic.Int32
			// An odd size (scaled to even) and one failing shot (repeats
			// the last frame).
			shot := func(ctx context.Context) ([]byte, error) {
				i := n.Add(1)
				if i == 2 {
					return nil, errors.New("paused for a moment")
				}
				return frame(t, 97, 61, uint8(i*40), c.enc), nil
			}
			path := filepath.Join(t.TempDir(), "out."+c.format.Name)
			rec, err := Start(context.Background(), Options{Shot: shot, Frames: c.frames, Path: path, Format: c.format})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond)
			if err := rec.Stop(); err != nil {
				t.Fatalf("stop: %v", err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !c.magic(b) {
				t.Errorf("%s: %d bytes that are no %s file: % x", path, len(b), c.format.Name, b[:min(16, len(b))])
			}
			if n.Load() < 2 {
				t.Errorf("%d frames taken in 1.5 s at %d a second", n.Load(), FPS)
			}
		})
	}
}

// TestRecordFirstFrameFails: a recording whose first frame cannot be had
// says so when stopped and leaves no file.
func TestRecordFirstFrameFails(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is not installed (make deps installs it)")
	}
	path := filepath.Join(t.TempDir(), "out.mp4")
	rec, err := Start(context.Background(), Options{
		Shot:   func(context.Context) ([]byte, error) { return nil, errors.New("no screen") },
		Path:   path,
		Format: MP4,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Stop(); err == nil {
		t.Error("stop: no error for a recording without frames")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was left: %v", err)
	}
}

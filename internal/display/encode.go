package display

import (
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"image/png"
	"io"
	"math"
	"sync"
)

// Format is an output image format.
type Format string

// Output formats.
const (
	PNG  Format = "png"
	JPEG Format = "jpeg"
)

// ContentType returns the MIME type of the format, or "" for an unknown one.
func (f Format) ContentType() string {
	switch f {
	case PNG, "":
		return "image/png"
	case JPEG:
		return "image/jpeg"
	}
	return ""
}

// DefaultJPEGQuality is the JPEG quality used when EncodeOptions.Quality is
// zero.
const DefaultJPEGQuality = 80

// EncodeOptions says how Encoder.Encode encodes an image. The zero value
// encodes PNG at the image's own size.
type EncodeOptions struct {
	// Format is PNG (the default when empty) or JPEG.
	Format Format
	// Quality is the JPEG quality, 1..100; 0 means DefaultJPEGQuality. It
	// must be 0 for PNG.
	Quality int
	// Width and Height, when set, scale the image to that size. If only one
	// is set, the other follows the image's aspect ratio (rounded, at least
	// 1).
	Width, Height int
	// Factor, when set, scales both sides by it (rounded, at least 1 pixel);
	// it cannot be combined with Width or Height.
	Factor float64
}

// Encoder encodes screenshots to PNG or JPEG. PNG uses the fastest zlib
// level (screenshots of flat desktops compress well even so, and default
// compression costs about three times the time) and reuses the encoder's
// buffers across calls through a pool.
//
// The zero value is ready to use. An Encoder is safe for concurrent use and
// must not be copied after first use.
type Encoder struct {
	pool     pngBufferPool
	zlibPool sync.Pool // *zlib.Writer for encodeOpaqueRGBA
}

type pngBufferPool struct{ p sync.Pool }

func (b *pngBufferPool) Get() *png.EncoderBuffer {
	v, _ := b.p.Get().(*png.EncoderBuffer)
	return v // nil when empty: png.Encoder then allocates a fresh buffer
}

func (b *pngBufferPool) Put(v *png.EncoderBuffer) { b.p.Put(v) }

// Encode writes img to w as opts say, scaling it first if asked. It returns
// an error naming the bad option for invalid options, before writing
// anything.
func (e *Encoder) Encode(w io.Writer, img image.Image, opts EncodeOptions) error {
	b := img.Bounds()
	tw, th, err := targetSize(b.Dx(), b.Dy(), opts)
	if err != nil {
		return err
	}
	quality := opts.Quality
	switch opts.Format {
	case PNG, "":
		if quality != 0 {
			return errors.New("quality: only applies to jpeg")
		}
	case JPEG:
		if quality == 0 {
			quality = DefaultJPEGQuality
		}
		if quality < 1 || quality > 100 {
			return fmt.Errorf("quality: %d out of range 1..100", quality)
		}
	default:
		return fmt.Errorf("format: unknown format %q, want png or jpeg", opts.Format)
	}

	if tw != b.Dx() || th != b.Dy() {
		img = Scale(img, tw, th)
	}
	if opts.Format == JPEG {
		if err := jpeg.Encode(w, img, &jpeg.Options{Quality: quality}); err != nil {
			return fmt.Errorf("encode jpeg: %w", err)
		}
		return nil
	}
	if m, ok := img.(*image.RGBA); ok && isOpaque(m) {
		if err := e.encodeOpaqueRGBA(w, m); err != nil {
			return fmt.Errorf("encode png: %w", err)
		}
		return nil
	}
	enc := png.Encoder{CompressionLevel: png.BestSpeed, BufferPool: &e.pool}
	if err := enc.Encode(w, img); err != nil {
		return fmt.Errorf("encode png: %w", err)
	}
	return nil
}

// targetSize resolves the output size from the options.
func targetSize(w, h int, opts EncodeOptions) (int, int, error) {
	switch {
	case opts.Width < 0:
		return 0, 0, fmt.Errorf("width: %d is negative", opts.Width)
	case opts.Height < 0:
		return 0, 0, fmt.Errorf("height: %d is negative", opts.Height)
	case opts.Width > MaxDimension:
		return 0, 0, fmt.Errorf("width: %d exceeds %d", opts.Width, MaxDimension)
	case opts.Height > MaxDimension:
		return 0, 0, fmt.Errorf("height: %d exceeds %d", opts.Height, MaxDimension)
	case opts.Factor < 0 || math.IsNaN(opts.Factor) || math.IsInf(opts.Factor, 0):
		return 0, 0, fmt.Errorf("factor: %v is not a positive number", opts.Factor)
	case opts.Factor > 0 && (opts.Width > 0 || opts.Height > 0):
		return 0, 0, errors.New("factor: cannot be combined with width or height")
	}
	if w <= 0 || h <= 0 {
		return w, h, nil // empty image: nothing to scale
	}
	tw, th := opts.Width, opts.Height
	switch {
	case opts.Factor > 0:
		tw = max(1, int(math.Round(float64(w)*opts.Factor)))
		th = max(1, int(math.Round(float64(h)*opts.Factor)))
		if tw > MaxDimension || th > MaxDimension {
			return 0, 0, fmt.Errorf("factor: %v makes a %dx%d image, larger than %d", opts.Factor, tw, th, MaxDimension)
		}
	case tw == 0 && th == 0:
		tw, th = w, h
	case tw == 0:
		tw = max(1, int(math.Round(float64(w)*float64(th)/float64(h))))
	case th == 0:
		th = max(1, int(math.Round(float64(h)*float64(tw)/float64(w))))
	}
	if tw > MaxDimension || th > MaxDimension {
		return 0, 0, fmt.Errorf("size: %dx%d exceeds %d", tw, th, MaxDimension)
	}
	return tw, th, nil
}

// Scale returns src resized to width×height. Shrinking averages the source
// pixels each output pixel covers (a box filter, which keeps thin text
// strokes visible instead of dropping them); enlarging interpolates
// bilinearly. Each axis is resampled separately with fixed-point weights.
// A non-RGBA src is converted first. width and height must be in
// 1..MaxDimension.
func Scale(src image.Image, width, height int) *image.RGBA {
	if width < 1 || height < 1 || width > MaxDimension || height > MaxDimension {
		panic(fmt.Sprintf("display.Scale: size %dx%d out of range", width, height))
	}
	rgba, ok := src.(*image.RGBA)
	if !ok || rgba.Rect.Min != (image.Point{}) {
		b := src.Bounds()
		rgba = image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
		draw.Draw(rgba, rgba.Rect, src, b.Min, draw.Src)
	}
	sw, sh := rgba.Rect.Dx(), rgba.Rect.Dy()
	if sw == 0 || sh == 0 {
		return image.NewRGBA(image.Rect(0, 0, width, height))
	}

	cur := rgba
	if width != sw {
		cur = scaleRows(cur, width)
	}
	if height != sh {
		cur = scaleColumns(cur, height)
	}
	if cur == src { // same size: still return a copy, never the caller's image
		cp := image.NewRGBA(cur.Rect)
		copy(cp.Pix, cur.Pix)
		cur = cp
	}
	return cur
}

// weightBits is the fixed-point precision of the resampling weights.
const weightBits = 14

// taps lists, for one output pixel, the first source index and the weights
// of consecutive source pixels; the weights sum to 1<<weightBits.
type taps struct {
	first   int
	weights []int32
}

// resampleTaps computes the taps mapping n source pixels to m output pixels.
func resampleTaps(n, m int) []taps {
	out := make([]taps, m)
	ratio := float64(n) / float64(m)
	buf := make([]int32, 0, m*(int(math.Ceil(ratio))+2))
	var ws []float64
	for i := range out {
		ws = ws[:0]
		first := 0
		if m < n {
			// Box: the output pixel covers source span [x0, x1).
			x0, x1 := float64(i)*ratio, float64(i+1)*ratio
			first = int(x0)
			last := min(int(math.Ceil(x1)), n) - 1
			for j := first; j <= last; j++ {
				ws = append(ws, math.Min(x1, float64(j+1))-math.Max(x0, float64(j)))
			}
		} else {
			// Bilinear between the two source pixels around the output
			// pixel's centre.
			c := (float64(i)+0.5)*ratio - 0.5
			j0 := int(math.Floor(c))
			f := c - float64(j0)
			switch {
			case j0 < 0:
				first, ws = 0, append(ws, 1)
			case j0 >= n-1:
				first, ws = n-1, append(ws, 1)
			default:
				first, ws = j0, append(ws, 1-f, f)
			}
		}
		out[i] = taps{first: first, weights: fixedWeights(&buf, ws)}
	}
	return out
}

// fixedWeights normalises ws to fixed point summing exactly to one, appending
// them to buf (which the taps of one axis share).
func fixedWeights(buf *[]int32, ws []float64) []int32 {
	var sum float64
	for _, w := range ws {
		sum += w
	}
	start := len(*buf)
	*buf = append(*buf, make([]int32, len(ws))...)
	fw := (*buf)[start:len(*buf):len(*buf)]
	var total int32
	big := 0
	for k, w := range ws {
		fw[k] = int32(math.Round(w / sum * (1 << weightBits)))
		total += fw[k]
		if fw[k] > fw[big] {
			big = k
		}
	}
	fw[big] += 1<<weightBits - total // rounding slack goes to the heaviest tap
	return fw
}

func clampByte(v int32) uint8 {
	v = (v + 1<<(weightBits-1)) >> weightBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// scaleRows resamples every row of src to width pixels.
func scaleRows(src *image.RGBA, width int) *image.RGBA {
	sh := src.Rect.Dy()
	dst := image.NewRGBA(image.Rect(0, 0, width, sh))
	tt := resampleTaps(src.Rect.Dx(), width)
	for y := range sh {
		srow := src.Pix[y*src.Stride:]
		drow := dst.Pix[y*dst.Stride : y*dst.Stride+4*width]
		for x, t := range tt {
			var r, g, b, a int32
			s := srow[4*t.first : 4*(t.first+len(t.weights))]
			for k, w := range t.weights {
				p := s[4*k : 4*k+4 : 4*k+4]
				r += w * int32(p[0])
				g += w * int32(p[1])
				b += w * int32(p[2])
				a += w * int32(p[3])
			}
			d := drow[4*x : 4*x+4 : 4*x+4]
			d[0], d[1], d[2], d[3] = clampByte(r), clampByte(g), clampByte(b), clampByte(a)
		}
	}
	return dst
}

// scaleColumns resamples every column of src to height pixels, a whole row
// at a time so memory is walked in order.
func scaleColumns(src *image.RGBA, height int) *image.RGBA {
	w := src.Rect.Dx()
	dst := image.NewRGBA(image.Rect(0, 0, w, height))
	tt := resampleTaps(src.Rect.Dy(), height)
	acc := make([]int32, 4*w)
	for y, t := range tt {
		clear(acc)
		for k, wt := range t.weights {
			row := src.Pix[(t.first+k)*src.Stride:]
			row = row[:len(acc)]
			for i, v := range row {
				acc[i] += wt * int32(v)
			}
		}
		drow := dst.Pix[y*dst.Stride : y*dst.Stride+len(acc)]
		for i, v := range acc {
			drow[i] = clampByte(v)
		}
	}
	return dst
}

// isOpaque reports whether every pixel has full alpha (screens do).
func isOpaque(m *image.RGBA) bool {
	b := m.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		row := m.Pix[m.PixOffset(b.Min.X, y) : m.PixOffset(b.Max.X-1, y)+4]
		for i := 3; i < len(row); i += 4 {
			if row[i] != 0xff {
				return false
			}
		}
	}
	return true
}

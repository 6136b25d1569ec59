package display

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"io"
)

// encodeOpaqueRGBA writes an opaque RGBA image as an 8-bit RGB PNG; see
// encodeRGB.
func (e *Encoder) encodeOpaqueRGBA(w io.Writer, m *image.RGBA) error {
	b := m.Bounds()
	width := b.Dx()
	rgb := make([]byte, 3*width)
	return e.encodeRGB(w, width, b.Dy(), func(y int) []byte {
		pix := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
		for x := 0; x < width; x++ {
			copy(rgb[3*x:3*x+3], pix[4*x:4*x+3])
		}
		return rgb
	})
}

// encodeRGB writes an 8-bit RGB PNG whose rows row(0..height-1) returns
// (3*width bytes each; the slice may be reused between calls). It is what
// image/png does for an opaque image at BestSpeed, less the part that costs
// most there: choosing a filter for every row by trying all five. A screen
// is flat areas and text, and the Up filter (each byte minus the one above
// it) suits it; the output is a little larger and takes about half the time.
func (e *Encoder) encodeRGB(w io.Writer, width, height int, row func(y int) []byte) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString("\x89PNG\r\n\x1a\n")
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(width))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(height))
	ihdr[8], ihdr[9] = 8, 2 // bit depth 8, colour type RGB
	writeChunk(bw, "IHDR", ihdr[:])

	idat := &chunkWriter{w: bw, typ: "IDAT"}
	zw := e.zlibWriter(idat)
	rowLen := 3 * width
	prev := make([]byte, rowLen) // the previous row, raw; zero above the first
	out := make([]byte, 1+rowLen)
	out[0] = 2 // Up
	for y := 0; y < height; y++ {
		cur := row(y)
		f := out[1:]
		for i := range f {
			f[i] = cur[i] - prev[i]
		}
		if _, err := zw.Write(out); err != nil {
			return err
		}
		copy(prev, cur)
	}
	if err := zw.Close(); err != nil {
		return err
	}
	e.zlibPool.Put(zw)
	if err := idat.flush(); err != nil {
		return err
	}
	writeChunk(bw, "IEND", nil)
	return bw.Flush()
}

// EncodePPM encodes a binary PPM (as QEMU's screendump writes it) as opts
// say. A PNG at the PPM's own size is written straight from the PPM's RGB
// rows, without decoding it to an image first.
func (e *Encoder) EncodePPM(w io.Writer, ppm []byte, opts EncodeOptions) error {
	if (opts.Format == PNG || opts.Format == "") && opts.Width == 0 && opts.Height == 0 && opts.Factor == 0 && opts.Quality == 0 {
		rd := bytes.NewReader(ppm)
		br := bufio.NewReaderSize(rd, 512)
		width, height, err := readPPMHeader(br)
		if err != nil {
			return fmt.Errorf("ppm: %w", err)
		}
		// The pixels start where the header ends: what bufio took from
		// the reader, less what it has not handed out yet.
		off := len(ppm) - rd.Len() - br.Buffered()
		if len(ppm)-off < 3*width*height {
			return fmt.Errorf("ppm: pixel data of %dx%d image: %w", width, height, io.ErrUnexpectedEOF)
		}
		pix := ppm[off:]
		return e.encodeRGB(w, width, height, func(y int) []byte { return pix[3*width*y : 3*width*(y+1)] })
	}
	img, err := DecodePPM(bytes.NewReader(ppm))
	if err != nil {
		return err
	}
	return e.Encode(w, img, opts)
}

func (e *Encoder) zlibWriter(w io.Writer) *zlib.Writer {
	if zw, ok := e.zlibPool.Get().(*zlib.Writer); ok {
		zw.Reset(w)
		return zw
	}
	zw, _ := zlib.NewWriterLevel(w, flate.BestSpeed)
	return zw
}

// chunkWriter cuts what is written into PNG chunks of up to 64 KiB.
type chunkWriter struct {
	w   *bufio.Writer
	typ string
	buf []byte
	err error
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && c.err == nil {
		room := 64<<10 - len(c.buf)
		take := min(room, len(p))
		c.buf = append(c.buf, p[:take]...)
		p = p[take:]
		if len(c.buf) == 64<<10 {
			c.err = c.flush()
		}
	}
	return n, c.err
}

func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := writeChunk(c.w, c.typ, c.buf)
	c.buf = c.buf[:0]
	return err
}

func writeChunk(w *bufio.Writer, typ string, data []byte) error {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
	copy(hdr[4:], typ)
	w.Write(hdr[:])
	w.Write(data)
	crc := crc32.NewIEEE()
	crc.Write(hdr[4:])
	crc.Write(data)
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc.Sum32())
	_, err := w.Write(sum[:])
	return err
}
